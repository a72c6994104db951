"""Lesson 08: attention in today's models: RoPE, ALiBi, sliding-window and streaming attention, MLA, the KV cache
of each kind of attention.

New names:
    positions        (T,) integer positions of the rows of x (RoPE rotates row t by angles proportional to positions[t])
    base             RoPE's frequency base: pair i turns by base^(-2i/d_head) radians per position
    n_sink, window   a streaming cache keeps the first n_sink tokens and the `window` most recent ones
    d_c, d_rope      MLA's latent width (the cached c_KV) and its decoupled RoPE key width (also cached)
"""

from __future__ import annotations

import math

import numpy as np

from autograder.reference.arguments import positive_int
from autograder.reference.lesson01 import scaled_dot_product_attention, softmax
from autograder.reference.lesson02 import concat_heads, split_heads
from autograder.reference.lesson06 import decode_loop


def rope(x, positions, base=10000.0, interleaved=True):
    """Rotary position embedding (Su et al., 2021, RoFormer) of x (..., T, d_head) at ``positions`` (T,).

    Column pair i (columns 2i and 2i+1 when ``interleaved``, as in the paper, GPT-J and Meta's Llama code;
    columns i and i + d_head/2 when not, as in GPT-NeoX's and Hugging Face's ``rotate_half``) is rotated by the
    angle positions[t] * base^(-2i/d_head). The angles are computed in float64 and their cosines and sines cast to
    x's dtype, so float32 stays float32. The two conventions differ by a fixed permutation of the columns.
    """
    x = np.asarray(x)
    *_, T, d_head = x.shape
    if d_head % 2:
        raise ValueError(f"RoPE rotates pairs of columns: d_head must be even, got {d_head}")
    positions = np.asarray(positions)
    if positions.shape != (T,):
        raise ValueError(f"positions must have shape (T,) = ({T},), got {positions.shape}")
    inv_freq = base ** (-np.arange(0, d_head, 2, dtype=np.float64) / d_head)  # (d_head/2,)
    angles = positions.astype(np.float64)[:, None] * inv_freq  # (T, d_head/2)
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    half = d_head // 2
    x1, x2 = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :half], x[..., half:])  # (..., T, d_head/2)
    r1, r2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos  # (..., T, d_head/2) each
    if not interleaved:
        return np.concatenate([r1, r2], axis=-1)  # (..., T, d_head)
    out = np.empty_like(x, dtype=r1.dtype)
    out[..., 0::2], out[..., 1::2] = r1, r2
    return out


def _alibi_slopes(n_heads):
    """The slopes of Press et al. (2022), as their reference code computes them: for n a power of 2 the geometric
    sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8); otherwise the slopes of the closest smaller power of 2, c, followed
    by every other slope of 2c (the 1st, 3rd, ...), n - c of them."""
    if n_heads & (n_heads - 1) == 0:
        return [2.0 ** (-8.0 * (i + 1) / n_heads) for i in range(n_heads)]
    closest = 2 ** int(math.floor(math.log2(n_heads)))
    return _alibi_slopes(closest) + _alibi_slopes(2 * closest)[0::2][:n_heads - closest]


def alibi_bias(n_heads, T):
    """ALiBi's bias (Press et al., 2022): (n_heads, T, T) float64, -slope_h * |i - j| for query i and key j.

    Added to the scores before the softmax; head h penalises distance with its own slope (``_alibi_slopes``).
    Above the diagonal the same distance penalty applies; a causal mask blocks those pairs anyway."""
    positive_int("n_heads", n_heads)
    positive_int("T", T)
    slopes = np.array(_alibi_slopes(n_heads), dtype=np.float64)  # (n_heads,)
    t = np.arange(T)
    distance = np.abs(t[:, None] - t[None, :]).astype(np.float64)  # (T, T)
    return -slopes[:, None, None] * distance  # (n_heads, T, T)


def sliding_window_mask(T, window):
    """(T, T) bool, True = blocked: query i sees keys i - window + 1 ... i, the `window` most recent tokens
    itself included (Mistral 7B: window 4096, a rolling cache of `window` entries)."""
    positive_int("T", T)
    positive_int("window", window)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    return (j > i) | (i - j >= window)


def _evict(cache, n_sink, keep):
    """The first n_sink and the last `keep` positions of a cache (..., n_kv_heads, T, d_head), or all of it when
    it holds no more than n_sink + keep."""
    T = cache.shape[-2]
    if T <= n_sink + keep:
        return cache
    return np.concatenate([cache[..., :n_sink, :], cache[..., T - keep:, :]], axis=-2)  # (..., n_sink+keep, d_head)


def streaming_decode(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, n_sink, window):
    """Decode x (..., T, d_model) one token at a time with ``decode_step``, keeping a bounded KV cache: the first
    n_sink tokens (attention sinks, Xiao et al., 2024) and the `window` most recent ones, the new token included.

    Before each step the cache is cut to its sinks and its last window - 1 tokens; the step appends the new one.
    So token t attends to tokens 0 ... n_sink - 1 and t - window + 1 ... t, and the cache never holds more than
    n_sink + window tokens. Returns ``(out (..., T, d_model), cache_k, cache_v)``.
    """
    positive_int("window", window)
    if isinstance(n_sink, bool) or not isinstance(n_sink, (int, np.integer)) or n_sink < 0:
        raise ValueError(f"n_sink must be an integer >= 0, got {n_sink!r}")
    return decode_loop(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads,
                        cut=lambda cache: _evict(cache, n_sink, window - 1))  # the sinks and the last window - 1


def _mla_parts(x, W_DKV, W_KR, W_Q, W_QR, n_heads):
    """What both forms of MLA share: the cache (c_KV (..., T, d_c) and the rotated shared key k_R (..., T, d_rope))
    and the queries' content part (..., n_heads, T, d_head) and rotated part (..., n_heads, T, d_rope)."""
    x = np.asarray(x)
    positions = np.arange(x.shape[-2])
    c_kv, k_r = mla_cache(x, W_DKV, W_KR)  # (..., T, d_c), (..., T, d_rope): one key part for every head
    q_c = split_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    q_r = rope(split_heads(x @ W_QR, n_heads), positions)  # (..., n_heads, T, d_rope)
    return c_kv, k_r, q_c, q_r


def mla_attention(x, W_DKV, W_UK, W_UV, W_KR, W_Q, W_QR, W_O, n_heads, mask=None):
    """Multi-head latent attention (DeepSeek-AI, 2024, DeepSeek-V2), keys and values built from the latent.

    x (..., T, d_model) at positions 0 ... T-1; W_DKV (d_model, d_c) compresses x to the latent c_KV; W_UK, W_UV
    (d_c, n_heads*d_head) expand it to the heads' keys and values; W_KR (d_model, d_rope) gives one RoPE key part
    shared by every head; W_Q (d_model, n_heads*d_head) and W_QR (d_model, n_heads*d_rope) the queries' two parts;
    W_O (n_heads*d_head, d_model). Each head's query and key are [content, rotated] of width d_head + d_rope, so the
    scores are divided by sqrt(d_head + d_rope). Returns ``(out (..., T, d_model), weights (..., n_heads, T, T))``.
    """
    c_kv, k_r, q_c, q_r = _mla_parts(x, W_DKV, W_KR, W_Q, W_QR, n_heads)
    k_c = split_heads(c_kv @ W_UK, n_heads)  # (..., n_heads, T, d_head)
    v = split_heads(c_kv @ W_UV, n_heads)  # (..., n_heads, T, d_head)
    k_r = np.broadcast_to(np.expand_dims(k_r, -3), (*k_c.shape[:-1], k_r.shape[-1]))  # (..., n_heads, T, d_rope)
    q = np.concatenate([q_c, q_r], axis=-1)  # (..., n_heads, T, d_head + d_rope)
    k = np.concatenate([k_c, k_r], axis=-1)  # (..., n_heads, T, d_head + d_rope)
    heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (..., n_heads, T, d_head), (..., n_heads, T, T)
    return concat_heads(heads) @ W_O, weights  # (..., T, d_model)


def mla_cache(x, W_DKV, W_KR):
    """What MLA caches for tokens x (..., T, d_model) at positions 0 ... T-1: the latent c_KV = x W_DKV
    (..., T, d_c) and the rotated shared key k_R = rope(x W_KR) (..., T, d_rope)."""
    x = np.asarray(x)
    return x @ W_DKV, rope(x @ W_KR, np.arange(x.shape[-2]))


def mla_absorbed(x, c_kv, k_r, W_UK, W_UV, W_Q, W_QR, W_O, n_heads, mask=None):
    """The newest tokens' MLA read from the cache alone: no head's key or value of a cached token is ever built.

    x (..., T_q, d_model) holds the newest T_q tokens, at positions T - T_q ... T - 1; c_kv (..., T, d_c) and k_r
    (..., T, d_rope) are the cache of all T tokens (``mla_cache``), the newest last; ``mask`` (T_q, T), True where
    blocked, or None. W_UK is absorbed into the queries (head h's content score is (q_h W_UK_h^T) . c_KV) and W_UV
    into W_O (head h contributes (weights_h @ c_KV) W_UV_h W_O_h), where W_UK_h, W_UV_h are columns h*d_head ... of
    W_UK, W_UV and W_O_h rows h*d_head ... of W_O. With the cache of x, equal to the last T_q rows of
    ``mla_attention(x, ...)`` up to rounding. Returns ``(out (..., T_q, d_model), weights (..., n_heads, T_q, T))``.
    """
    x, c_kv, k_r = np.asarray(x), np.asarray(c_kv), np.asarray(k_r)
    T_q, T = x.shape[-2], c_kv.shape[-2]
    if T_q > T:
        raise ValueError(f"x holds {T_q} tokens but the cache only {T}: the cache holds every token, the newest last")
    positions = np.arange(T - T_q, T)  # the newest tokens' positions
    q_c = split_heads(x @ W_Q, n_heads)  # (..., n_heads, T_q, d_head)
    q_r = rope(split_heads(x @ W_QR, n_heads), positions)  # (..., n_heads, T_q, d_rope)
    d_c, d_head, d_rope = c_kv.shape[-1], q_c.shape[-1], k_r.shape[-1]
    W_UK_h = np.swapaxes(W_UK.reshape(d_c, n_heads, d_head), 0, 1)  # (n_heads, d_c, d_head)
    W_UV_h = np.swapaxes(W_UV.reshape(d_c, n_heads, d_head), 0, 1)  # (n_heads, d_c, d_head)
    W_O_h = W_O.reshape(n_heads, d_head, W_O.shape[-1])  # (n_heads, d_head, d_model)
    q_latent = q_c @ np.swapaxes(W_UK_h, -1, -2)  # (..., n_heads, T_q, d_c)
    c = np.expand_dims(c_kv, -3)  # (..., 1, T, d_c): one latent for every head
    scores = (q_latent @ np.swapaxes(c, -1, -2)
              + q_r @ np.swapaxes(np.expand_dims(k_r, -3), -1, -2)) / math.sqrt(d_head + d_rope)  # (..., n_heads, T_q, T)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    weights = softmax(scores, axis=-1)  # (..., n_heads, T_q, T)
    W_OV = W_UV_h @ W_O_h  # (n_heads, d_c, d_model): W_UV absorbed into W_O
    return np.sum((weights @ c) @ W_OV, axis=-3), weights  # (..., n_heads, T_q, d_c) @ ... summed: (..., T_q, d_model)


KV_CACHE_ATTENTION = ("MHA", "GQA", "MQA", "MLA")


def kv_cache_elements_per_token(config):
    """Numbers cached per token over all layers (DeepSeek-V2, Table 1): MHA 2 n_heads d_head, GQA 2 n_kv_heads d_head,
    MQA 2 d_head, MLA d_c + d_rope (one latent and one shared RoPE key), each times n_layers.

    ``config``: a dict with "attention" (one of KV_CACHE_ATTENTION), "n_layers", "n_heads", "d_head", and
    "n_kv_heads" for GQA, "d_c" and "d_rope" for MLA."""
    kind = config["attention"]
    per_layer = {"MHA": lambda c: 2 * c["n_heads"] * c["d_head"], "GQA": lambda c: 2 * c["n_kv_heads"] * c["d_head"],
                 "MQA": lambda c: 2 * c["d_head"], "MLA": lambda c: c["d_c"] + c["d_rope"]}
    if kind not in per_layer:
        raise ValueError(f"attention must be one of {KV_CACHE_ATTENTION}, got {kind!r}")
    return int(per_layer[kind](config) * config["n_layers"])

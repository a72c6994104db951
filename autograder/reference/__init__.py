"""The course's one reference implementation of multi-head attention (numpy).

Every hidden test grades a learner's function against the function of the same name here, and the
benchmarks time it. Learners never receive this file. It is one module, longer than the others, because it is
the one reference: every function learners write across the lessons, in lesson order.

Glossary (the same names are used in the lessons, the plots and the tests):
    B        batch size
    T        sequence length (T_q queries, T_k keys/values when they differ)
    d_model  width of a token vector
    n_heads  number of attention heads
    d_head   width of one head, d_model // n_heads (the paper's d_k = d_v)
    W_Q, W_K, W_V, W_O   (d_model, d_model) projections, applied as x @ W
    mask     boolean, True marks a blocked (query, key) pair

No function modifies its inputs. float32 stays float32 and float64 stays float64: every scale is a
Python float (``math.sqrt``), because ``np.sqrt(d_head)`` is a numpy float64 and would promote float32.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "softmax",
    "scaled_dot_product_attention",
    "split_heads",
    "concat_heads",
    "output_projection",
    "multi_head_attention",
    "mha_param_count",
]


def softmax(x, axis=-1):
    """Numerically stable softmax of ``x`` along ``axis``.

    The row maximum is subtracted before ``exp`` so scores near 1e4 do not overflow. ``-inf`` entries get
    weight exactly 0; a row that is ``-inf`` everywhere (every key blocked) gets all-zero weights.
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    row_max = np.max(x, axis=axis, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0).astype(x.dtype, copy=False)
    e = x - row_max  # a new array: exp and the division below run in place on it, never on x
    np.exp(e, out=e)
    total = np.sum(e, axis=axis, keepdims=True)
    ok = total > 0
    np.divide(e, total, out=e, where=ok)
    if not ok.all():  # a fully blocked row (total 0), or NaN input: all-zero weights
        e = np.where(ok, e, 0.0).astype(e.dtype, copy=False)
    return e


def scaled_dot_product_attention(Q, K, V, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V, with blocked pairs given weight exactly 0.

    Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v); mask boolean, broadcastable to
    (..., T_q, T_k), True = blocked. Returns ``(out, weights)``: out (..., T_q, d_v), weights (..., T_q, T_k).
    """
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(
            f"Q and K must share their last axis d_k, got Q {Q.shape} and K {K.shape}")
    if K.shape[-2] != V.shape[-2]:
        raise ValueError(
            f"K and V must have the same number of keys T_k (axis -2), got K {K.shape} and V {V.shape}")
    d_k = Q.shape[-1]
    scores = Q @ np.swapaxes(K, -1, -2)  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k), a new array
    scores /= math.sqrt(d_k)  # in place on that new array: one (T_q, T_k) allocation fewer, same values
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(
                f"mask must be boolean with True marking a blocked pair, got dtype {mask.dtype}; "
                "convert with mask.astype(bool) after checking which value means 'blocked'")
        scores = np.where(mask, -np.inf, scores)  # new array: the caller's scores are never touched
    weights = softmax(scores, axis=-1)
    out = weights @ V  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)
    return out, weights


def _check_divisible(d_model, n_heads):
    if n_heads <= 0 or d_model % n_heads != 0:
        raise ValueError(
            f"d_model={d_model} cannot be split into n_heads={n_heads} equal heads: "
            "choose n_heads that divides d_model")


def split_heads(x, n_heads):
    """(..., T, d_model) -> (..., n_heads, T, d_head); head i holds columns i*d_head:(i+1)*d_head."""
    x = np.asarray(x)
    *lead, T, d_model = x.shape
    _check_divisible(d_model, n_heads)
    d_head = d_model // n_heads
    x = x.reshape(*lead, T, n_heads, d_head)  # (..., T, n_heads, d_head)
    return np.swapaxes(x, -3, -2)  # (..., n_heads, T, d_head)


def concat_heads(x):
    """(..., n_heads, T, d_head) -> (..., T, n_heads * d_head); the exact inverse of ``split_heads``."""
    x = np.asarray(x)
    *lead, n_heads, T, d_head = x.shape
    x = np.swapaxes(x, -3, -2)  # (..., T, n_heads, d_head)
    return x.reshape(*lead, T, n_heads * d_head)  # (..., T, d_model)


def output_projection(heads, W_O):
    """Concat(heads) @ W_O: (..., n_heads, T, d_head), W_O (n_heads*d_head, d_model) -> (..., T, d_model)."""
    heads, W_O = np.asarray(heads), np.asarray(W_O)
    n_heads, d_head = heads.shape[-3], heads.shape[-1]
    if W_O.shape[0] != n_heads * d_head:
        raise ValueError(
            f"W_O must have n_heads*d_head = {n_heads * d_head} rows to take the concatenated heads, "
            f"got W_O {W_O.shape}")
    return concat_heads(heads) @ W_O  # (..., T, n_heads*d_head) @ (n_heads*d_head, d_model) -> (..., T, d_model)


def _check_projections(d_model, n_heads, *Ws):
    _check_divisible(d_model, n_heads)
    for name, W in zip(("W_Q", "W_K", "W_V", "W_O"), Ws):
        if np.shape(W) != (d_model, d_model):
            raise ValueError(f"{name} must be (d_model, d_model) = ({d_model}, {d_model}), got {np.shape(W)}")


def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """Self-attention with ``n_heads`` heads. x (..., T, d_model) -> (out (..., T, d_model), weights (..., n_heads, T, T)).

    Each head attends in its own d_head = d_model // n_heads subspace, scaled by sqrt(d_head). ``mask`` must
    broadcast to the weights (..., n_heads, T, T): a (T, T) mask applies to every head, a (B, 1, T, T) mask
    gives each batch element its own.
    """
    x = np.asarray(x)
    _check_projections(x.shape[-1], n_heads, W_Q, W_K, W_V, W_O)
    Q = split_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    K = split_heads(x @ W_K, n_heads)  # (..., n_heads, T, d_head)
    V = split_heads(x @ W_V, n_heads)  # (..., n_heads, T, d_head)
    heads, weights = scaled_dot_product_attention(Q, K, V, mask)  # (..., n_heads, T, d_head), (..., n_heads, T, T)
    return output_projection(heads, W_O), weights


def mha_param_count(d_model, n_heads, bias=False):
    """Parameters of one multi-head attention layer: W_Q, W_K, W_V, W_O (and their biases).

    Each projection is d_model x d_model whatever n_heads is (n_heads slices of d_model x d_head), so the
    count is 4 d_model^2 (+ 4 d_model with bias): it does not change with n_heads.
    """
    for name, v in (("d_model", d_model), ("n_heads", n_heads)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    _check_divisible(d_model, n_heads)
    weights = 4 * d_model * d_model
    biases = 4 * d_model if bias else 0
    return int(weights + biases)


# ---------------------------------------------------------------------------------------------------------
# Lesson 03 (parameter count: grouped-query attention and the KV cache) and lesson 04 (d_k scaling)
# ---------------------------------------------------------------------------------------------------------
def head_weights(x, W_Q, W_K, n_heads):
    """The attention weights of every head of a layer, ``(..., n_heads, T, T)`` (lesson 05's exercise): those of
    ``multi_head_attention``, which W_V and W_O do not affect."""
    zeros = np.zeros_like(W_Q)
    return multi_head_attention(x, W_Q, W_K, zeros, zeros, n_heads)[1]


__all__ += ["head_weights"]


__all__ += ["gqa_param_count", "kv_cache_bytes_per_token", "multi_head_scores", "dot_product_std"]


def _positive_int(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")


def gqa_param_count(d_model, n_heads, n_kv_heads, bias=False):
    """Parameters of one grouped-query attention layer (MQA when n_kv_heads == 1, MHA when == n_heads).

    W_Q and W_O stay (d_model, d_model); W_K and W_V shrink to (d_model, n_kv_heads * d_head) because groups
    of n_heads // n_kv_heads query heads share one key/value head. With bias: d_model each for W_Q and W_O,
    n_kv_heads * d_head each for W_K and W_V.
    """
    for name, v in (("d_model", d_model), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads)):
        _positive_int(name, v)
    _check_divisible(d_model, n_heads)
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}: each key/value head serves "
                         "a whole group of query heads")
    d_head = d_model // n_heads
    d_kv = n_kv_heads * d_head  # width of the K (and V) projection
    weights = 2 * d_model * d_model + 2 * d_model * d_kv  # W_Q, W_O + W_K, W_V
    biases = (2 * d_model + 2 * d_kv) if bias else 0
    return int(weights + biases)


def kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_value=2):
    """Bytes the KV cache grows by per generated token: a key and a value vector per KV head, per layer."""
    for name, v in (("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("d_head", d_head),
                    ("bytes_per_value", bytes_per_value)):
        _positive_int(name, v)
    return int(2 * n_layers * n_kv_heads * d_head * bytes_per_value)  # 2 = one K and one V


def multi_head_scores(x, W_Q, W_K, n_heads):
    """Scaled scores of every head: x (..., T, d_model) -> (..., n_heads, T, T).

    Inside a head the dot product sums over d_head = d_model // n_heads terms, so the scale is sqrt(d_head),
    not sqrt(d_model). The scale is a Python float, so float32 input stays float32.
    """
    x = np.asarray(x)
    d_model = x.shape[-1]
    _check_divisible(d_model, n_heads)
    d_head = d_model // n_heads
    Q = split_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    K = split_heads(x @ W_K, n_heads)  # (..., n_heads, T, d_head)
    return Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)  # (..., n_heads, T, T)


def dot_product_std(d_k, n_samples, scaled, rng):
    """Standard deviation of q.k over ``n_samples`` pairs of independent standard-normal q, k of width d_k.

    About sqrt(d_k) unscaled (the variance of a sum of d_k unit-variance products is d_k) and about 1 when
    each dot product is divided by sqrt(d_k). Draws q then k, each (n_samples, d_k), from ``rng``.
    """
    q = rng.standard_normal((n_samples, d_k))  # (n_samples, d_k)
    k = rng.standard_normal((n_samples, d_k))  # (n_samples, d_k)
    dots = np.sum(q * k, axis=-1)  # (n_samples,)
    if scaled:
        dots = dots / math.sqrt(d_k)
    return float(np.std(dots))

# Lesson 06: grouped-query attention, the KV cache, mask conventions, tiled (online-softmax) attention
# ---------------------------------------------------------------------------------------------------------
# n_kv_heads  number of key/value heads (n_heads query heads share them in groups of n_heads // n_kv_heads);
#             n_kv_heads == n_heads is ordinary multi-head attention, n_kv_heads == 1 is multi-query attention
# cache       keys or values seen so far, laid out (..., n_kv_heads, T, d_head): batch, KV head, time, width

__all__ += [
    "repeat_kv",
    "grouped_query_attention",
    "causal_mask",
    "causal_self_attention",
    "kv_cache_append",
    "decode_step",
    "decode_with_kv_cache",
    "tiled_attention",
    "cross_attention",
]

MASK_CONVENTIONS = ("course", "masked_fill", "nn.MultiheadAttention", "F.scaled_dot_product_attention")


def repeat_kv(x, n_rep):
    """(..., n_kv_heads, T, d_head) -> (..., n_kv_heads * n_rep, T, d_head), each KV head repeated n_rep times
    in a row (KV head j serves query heads j*n_rep ... j*n_rep + n_rep - 1), as Llama's ``repeat_kv`` does."""
    x = np.asarray(x)
    if isinstance(n_rep, bool) or not isinstance(n_rep, (int, np.integer)) or n_rep < 1:
        raise ValueError(f"n_rep must be a positive integer, got {n_rep!r}")
    return np.repeat(x, n_rep, axis=-3)  # (..., n_kv_heads * n_rep, T, d_head)


def _check_kv_heads(d_model, n_heads, n_kv_heads):
    _check_divisible(d_model, n_heads)
    if n_kv_heads <= 0 or n_heads % n_kv_heads != 0:
        raise ValueError(f"n_heads={n_heads} query heads cannot be shared out evenly over n_kv_heads={n_kv_heads} "
                         "KV heads: choose n_kv_heads that divides n_heads")


def _project_gqa(x, W_Q, W_K, W_V, n_heads, n_kv_heads):
    """Q (..., n_heads, T, d_head) and the un-repeated K, V (..., n_kv_heads, T, d_head)."""
    x = np.asarray(x)
    d_model = x.shape[-1]
    _check_kv_heads(d_model, n_heads, n_kv_heads)
    d_kv = n_kv_heads * (d_model // n_heads)
    if np.shape(W_Q) != (d_model, d_model):
        raise ValueError(f"W_Q must be (d_model, d_model) = ({d_model}, {d_model}), got {np.shape(W_Q)}")
    for name, W in (("W_K", W_K), ("W_V", W_V)):
        if np.shape(W) != (d_model, d_kv):
            raise ValueError(f"{name} must be (d_model, n_kv_heads*d_head) = ({d_model}, {d_kv}), got {np.shape(W)}")
    Q = split_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    K = split_heads(x @ W_K, n_kv_heads)  # (..., n_kv_heads, T, d_head)
    V = split_heads(x @ W_V, n_kv_heads)  # (..., n_kv_heads, T, d_head)
    return Q, K, V


def grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=None):
    """Self-attention with n_heads query heads sharing n_kv_heads key/value heads.

    x (..., T, d_model); W_Q, W_O (d_model, d_model); W_K, W_V (d_model, n_kv_heads * d_head) with
    d_head = d_model // n_heads. Query head i uses KV head i // (n_heads // n_kv_heads). Returns
    ``(out (..., T, d_model), weights (..., n_heads, T, T))``; ``mask`` as in ``multi_head_attention``.
    """
    Q, K, V = _project_gqa(x, W_Q, W_K, W_V, n_heads, n_kv_heads)
    n_rep = n_heads // n_kv_heads
    K, V = repeat_kv(K, n_rep), repeat_kv(V, n_rep)  # (..., n_heads, T, d_head)
    heads, weights = scaled_dot_product_attention(Q, K, V, mask)  # (..., n_heads, T, d_head), (..., n_heads, T, T)
    return output_projection(heads, W_O), weights


def causal_mask(T, convention="course"):
    """The (T, T) causal mask (query t may see keys 0..t) written in one library's convention.

    ``"course"`` and ``"nn.MultiheadAttention"`` (its boolean ``attn_mask``): bool, True = blocked (above the
    diagonal). ``"F.scaled_dot_product_attention"`` (its boolean ``attn_mask``): bool, True = may attend (on and
    below the diagonal). ``"masked_fill"`` (code that runs ``scores.masked_fill(mask == 0, -inf)``): float
    ones on and below the diagonal, 0.0 = blocked.
    """
    if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or T < 1:
        raise ValueError(f"T must be a positive integer, got {T!r}")
    blocked = np.triu(np.ones((T, T), dtype=bool), k=1)  # (T, T) True above the diagonal
    if convention in ("course", "nn.MultiheadAttention"):
        return blocked
    if convention == "F.scaled_dot_product_attention":
        return ~blocked
    if convention == "masked_fill":
        return (~blocked).astype(np.float64)
    raise ValueError(f"convention must be one of {MASK_CONVENTIONS}, got {convention!r}")


def causal_self_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
    """The full (uncached) path: grouped-query self-attention over all T tokens at once with the causal mask.
    Returns ``(out (..., T, d_model), weights (..., n_heads, T, T))``."""
    T = np.shape(x)[-2]
    return grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=causal_mask(T))


def kv_cache_append(cache_k, cache_v, k, v):
    """Append new keys/values to the cache along its time axis.

    cache_k, cache_v (..., n_kv_heads, T_past, d_head); k, v (..., n_kv_heads, T_new, d_head). Returns new
    arrays (..., n_kv_heads, T_past + T_new, d_head); the caller's cache is not modified.
    """
    cache_k, cache_v, k, v = map(np.asarray, (cache_k, cache_v, k, v))
    for name, c, new in (("k", cache_k, k), ("v", cache_v, v)):
        if c.shape[:-2] != new.shape[:-2] or c.shape[-1] != new.shape[-1]:
            raise ValueError(f"new {name} {new.shape} does not fit the cache {c.shape}: both must be laid out "
                             "(..., n_kv_heads, T, d_head) and differ only in T (axis -2)")
    return np.concatenate([cache_k, k], axis=-2), np.concatenate([cache_v, v], axis=-2)  # (..., n_kv, T+1, d)


def decode_step(x_t, cache_k, cache_v, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
    """One step of incremental decoding: the newest token attends to every cached token and to itself.

    x_t (..., 1, d_model), the newest token; cache_k, cache_v (..., n_kv_heads, T_past, d_head). Only x_t is
    projected. Returns ``(out_t (..., 1, d_model), cache_k, cache_v)`` with the caches one token longer. No
    mask is needed: the cache holds only the past, so the newest token may see all of it.
    """
    q, k, v = _project_gqa(x_t, W_Q, W_K, W_V, n_heads, n_kv_heads)  # (..., n_heads|n_kv_heads, 1, d_head)
    cache_k, cache_v = kv_cache_append(cache_k, cache_v, k, v)  # (..., n_kv_heads, T_past + 1, d_head)
    n_rep = n_heads // n_kv_heads
    head, _ = scaled_dot_product_attention(q, repeat_kv(cache_k, n_rep), repeat_kv(cache_v, n_rep))
    return output_projection(head, W_O), cache_k, cache_v  # (..., 1, d_model)


def decode_with_kv_cache(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
    """Feed x (..., T, d_model) one token at a time through ``decode_step``, starting from an empty cache.

    Returns ``(out (..., T, d_model), cache_k, cache_v)``; out equals ``causal_self_attention``'s out and the
    caches are (..., n_kv_heads, T, d_head).
    """
    return _decode_loop(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)


def _decode_loop(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, cut=None):
    """``decode_step`` over the tokens of x from empty caches; ``cut(cache)``, when given, is applied to each cache
    before each step. Returns ``(out (..., T, d_model), cache_k, cache_v)``."""
    x = np.asarray(x)
    *lead, T, d_model = x.shape
    d_head = d_model // n_heads
    cache_k = np.zeros((*lead, n_kv_heads, 0, d_head), dtype=x.dtype)  # (..., n_kv_heads, 0, d_head)
    cache_v = np.zeros((*lead, n_kv_heads, 0, d_head), dtype=x.dtype)
    outs = []
    for t in range(T):
        if cut is not None:
            cache_k, cache_v = cut(cache_k), cut(cache_v)
        out_t, cache_k, cache_v = decode_step(x[..., t:t + 1, :], cache_k, cache_v, W_Q, W_K, W_V, W_O,
                                              n_heads, n_kv_heads)  # out_t (..., 1, d_model)
        outs.append(out_t)
    out = np.concatenate(outs, axis=-2) if outs else np.zeros((*lead, 0, d_model), dtype=x.dtype)  # (..., T, d_model)
    return out, cache_k, cache_v


def tiled_attention(Q, K, V, block_size, causal=False):
    """softmax(Q K^T / sqrt(d_k)) V computed over blocks of ``block_size`` keys with an online softmax.

    Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v) -> out (..., T_q, d_v). A running maximum m, a
    running sum l of exp(score - m) and a running unnormalised output acc are rescaled by exp(m_old - m_new)
    whenever a block raises the maximum; the largest score array held is (..., T_q, block_size), never
    (..., T_q, T_k). ``causal=True`` blocks key j for query i when j > i (the course's causal mask).
    """
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    if Q.shape[-1] != K.shape[-1] or K.shape[-2] != V.shape[-2]:
        raise ValueError(f"Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v) do not fit: got Q {Q.shape}, "
                         f"K {K.shape}, V {V.shape}")
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    T_q, T_k = Q.shape[-2], K.shape[-2]
    lead = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    dtype = np.result_type(Q, K, V)
    scale = 1.0 / math.sqrt(Q.shape[-1])
    m = np.full((*lead, T_q, 1), -np.inf, dtype=dtype)  # running max of each query's scores
    total = np.zeros((*lead, T_q, 1), dtype=dtype)  # running sum of exp(score - m)
    acc = np.zeros((*lead, T_q, V.shape[-1]), dtype=dtype)  # running sum of exp(score - m) * v
    rows = np.arange(T_q)[:, None]  # (T_q, 1) query positions
    for start in range(0, T_k, block_size):
        stop = min(start + block_size, T_k)
        s = (Q * scale) @ np.swapaxes(K[..., start:stop, :], -1, -2)  # (..., T_q, block)
        if causal:
            s = np.where(np.arange(start, stop)[None, :] > rows, -np.inf, s)  # (T_q, block) True = blocked
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))  # (..., T_q, 1)
        # A row with no open key so far keeps m_new = -inf: shift by 0 there so exp gives 0, never NaN.
        shift = np.where(np.isfinite(m_new), m_new, 0.0)
        p = np.exp(s - shift)  # (..., T_q, block)
        alpha = np.exp(np.where(np.isfinite(m), m, shift) - shift)  # rescales the old sums to the new max
        total = total * alpha + p.sum(axis=-1, keepdims=True)
        acc = acc * alpha + p @ V[..., start:stop, :]  # (..., T_q, d_v)
        m = m_new
    return np.divide(acc, total, out=np.zeros_like(acc), where=total > 0)  # (..., T_q, d_v)


# ---------------------------------------------------------------------------------------------------------
# Lesson 07: attention's backward pass, the gradient check, sinusoidal positions
# ---------------------------------------------------------------------------------------------------------
# grad_X   dL/dX, the gradient of a scalar loss L with respect to X: always the shape of X

__all__ += [
    "softmax_jacobian",
    "softmax_backward",
    "attention_row_backward",
    "scaled_dot_product_attention_backward",
    "multi_head_attention_backward",
    "gradient_check",
    "sinusoidal_positions",
]


def softmax_jacobian(p):
    """The Jacobian of softmax at one row of weights p = softmax(s), (T_k,) -> (T_k, T_k): J[j, i] = dp_j / ds_i =
    p_j (delta_ij - p_i), that is diag(p) - p p^T (symmetric)."""
    p = np.asarray(p)
    return np.diag(p) - np.outer(p, p)  # (T_k, T_k)


def softmax_backward(weights, grad_weights, axis=-1):
    """dL/dscores from weights = softmax(scores, axis) and dL/dweights.

    The Jacobian of one row is diag(p) - p p^T; applied to g it gives p * (g - sum(g * p)), so it is never built.
    A row of all-zero weights (every key blocked) gets all-zero gradient.
    """
    weights, grad_weights = np.asarray(weights), np.asarray(grad_weights)
    dot = np.sum(grad_weights * weights, axis=axis, keepdims=True)  # (..., 1, ...): sum_j g_j p_j per row
    return weights * (grad_weights - dot)


def attention_row_backward(q, K, V, grad_out):
    """(dq, dK, dV) of one query's attention, out = softmax(K q / sqrt(d_k)) V.

    q (d_k,), K (T_k, d_k), V (T_k, d_v), grad_out (d_v,). Returns gradients of the shapes of q, K, V.
    """
    q, K, V, grad_out = map(np.asarray, (q, K, V, grad_out))
    scale = 1.0 / math.sqrt(q.shape[-1])  # a Python float: float32 stays float32
    p = softmax(K @ q * scale)  # (T_k,)
    dV = np.outer(p, grad_out)  # (T_k, d_v): value j collects p_j times the output's gradient
    grad_scores = softmax_backward(p, V @ grad_out)  # (T_k,)
    return K.T @ grad_scores * scale, np.outer(grad_scores, q) * scale, dV  # (d_k,), (T_k, d_k), (T_k, d_v)


def scaled_dot_product_attention_backward(Q, K, V, weights, grad_out, mask=None):
    """(dQ, dK, dV) of out = softmax(Q K^T / sqrt(d_k), with ``mask``) V, given the forward pass's ``weights``.

    Q (..., T_q, d_k), K (..., T_k, d_k), V (..., T_k, d_v), weights (..., T_q, T_k), grad_out (..., T_q, d_v).
    Blocked pairs (mask True) get no gradient. Returns dQ, dK, dV of the shapes of Q, K, V.
    """
    Q, K, V, weights, grad_out = map(np.asarray, (Q, K, V, weights, grad_out))
    scale = 1.0 / math.sqrt(Q.shape[-1])  # a Python float: float32 stays float32
    dV = np.swapaxes(weights, -1, -2) @ grad_out  # (..., T_k, T_q) @ (..., T_q, d_v) -> (..., T_k, d_v)
    grad_weights = grad_out @ np.swapaxes(V, -1, -2)  # (..., T_q, d_v) @ (..., d_v, T_k) -> (..., T_q, T_k)
    grad_scores = softmax_backward(weights, grad_weights, axis=-1)  # (..., T_q, T_k)
    if mask is not None:
        grad_scores = np.where(np.asarray(mask), 0, grad_scores).astype(grad_scores.dtype, copy=False)
    dQ = grad_scores @ K * scale  # (..., T_q, T_k) @ (..., T_k, d_k) -> (..., T_q, d_k)
    dK = np.swapaxes(grad_scores, -1, -2) @ Q * scale  # (..., T_k, T_q) @ (..., T_q, d_k) -> (..., T_k, d_k)
    return dQ, dK, dV


def _summed_outer(a, b):
    """sum over every leading axis of a^T @ b: a (..., T, m), b (..., T, n) -> (m, n)."""
    return a.reshape(-1, a.shape[-1]).T @ b.reshape(-1, b.shape[-1])  # (m, B*T) @ (B*T, n) -> (m, n)


def multi_head_attention_backward(x, W_Q, W_K, W_V, W_O, n_heads, grad_out, mask=None):
    """Gradients of multi_head_attention's out with respect to x and the four weights, given dL/dout.

    x (..., T, d_model), grad_out (..., T, d_model). Returns {"x", "W_Q", "W_K", "W_V", "W_O"}, each the shape of
    that input; the weight gradients are summed over the batch and the positions. The forward pass is recomputed.
    Split and concat are permutations of the columns, so each routes the gradient back through the other.
    """
    x, grad_out = np.asarray(x), np.asarray(grad_out)
    d_model = x.shape[-1]
    _check_projections(d_model, n_heads, W_Q, W_K, W_V, W_O)
    if grad_out.shape != x.shape:
        raise ValueError(f"grad_out must have the shape of the output, x's shape {x.shape}, got {grad_out.shape}")
    Q = split_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    K = split_heads(x @ W_K, n_heads)  # (..., n_heads, T, d_head)
    V = split_heads(x @ W_V, n_heads)  # (..., n_heads, T, d_head)
    heads, weights = scaled_dot_product_attention(Q, K, V, mask)  # (..., n_heads, T, d_head), (..., n_heads, T, T)
    grad_W_O = _summed_outer(concat_heads(heads), grad_out)  # (d_model, d_model)
    grad_heads = split_heads(grad_out @ np.swapaxes(W_O, -1, -2), n_heads)  # (..., n_heads, T, d_head)
    dQ, dK, dV = scaled_dot_product_attention_backward(Q, K, V, weights, grad_heads, mask)
    dQ, dK, dV = concat_heads(dQ), concat_heads(dK), concat_heads(dV)  # each (..., T, d_model)
    grad_x = dQ @ np.swapaxes(W_Q, -1, -2) + dK @ np.swapaxes(W_K, -1, -2) + dV @ np.swapaxes(W_V, -1, -2)
    return {"x": grad_x, "W_Q": _summed_outer(x, dQ), "W_K": _summed_outer(x, dK), "W_V": _summed_outer(x, dV),
            "W_O": grad_W_O}


def gradient_check(f, inputs, grad, eps=1e-6):
    """The largest relative error between the analytic gradients ``grad`` and central finite differences of f.

    ``f(*inputs)`` is a scalar; ``inputs`` and ``grad`` are sequences of arrays of matching shapes. Each entry is
    moved by +eps and -eps in a float64 copy (the caller's arrays are never changed); numeric = (f+ - f-) / (2 eps).
    The error of one input is max|analytic - numeric| / max(max|analytic|, max|numeric|, 1e-12): relative to the
    gradient's size, so entries that are exactly 0 (blocked pairs) do not divide by 0. Returns the largest over
    the inputs, as a float: NaN when a gradient or ``f`` holds NaN or inf (it must never pass as 0).
    """
    xs = [np.array(a, dtype=np.float64) for a in inputs]  # copies: the caller's inputs stay as they are
    if len(grad) != len(xs):
        raise ValueError(f"grad has {len(grad)} arrays for {len(xs)} inputs: give one gradient per input")
    errors = [0.0]
    for x, analytic in zip(xs, grad):
        analytic = np.asarray(analytic, dtype=np.float64)
        if analytic.shape != x.shape:
            raise ValueError(f"a gradient has shape {analytic.shape} for an input of shape {x.shape}")
        numeric = np.zeros_like(x)
        flat, numeric_flat = x.reshape(-1), numeric.reshape(-1)  # views of x and numeric
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + eps
            f_plus = float(f(*xs))
            flat[i] = old - eps
            f_minus = float(f(*xs))
            flat[i] = old
            numeric_flat[i] = (f_plus - f_minus) / (2 * eps)
        size = max(float(np.max(np.abs(analytic), initial=0.0)), float(np.max(np.abs(numeric), initial=0.0)), 1e-12)
        errors.append(float(np.max(np.abs(analytic - numeric), initial=0.0)) / size)
    return float(np.max(errors))  # NaN when any gradient or f holds NaN or inf (Python's max would drop it)


def sinusoidal_positions(T, d_model):
    """The paper's section 3.5 encoding, (T, d_model) float64: PE[t, 2i] = sin(t / 10000^(2i/d_model)),
    PE[t, 2i+1] = cos(t / 10000^(2i/d_model)). An odd d_model keeps the last sine column."""
    for name, v in (("T", T), ("d_model", d_model)):
        _positive_int(name, v)
    t = np.arange(T, dtype=np.float64)[:, None]  # (T, 1)
    freq = 10000.0 ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)  # (ceil(d_model / 2),)
    angles = t * freq  # (T, ceil(d_model / 2))
    pe = np.empty((T, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return pe
def cross_attention(x_q, x_kv, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """Multi-head attention whose queries come from x_q (..., T_q, d_model) and whose keys and values come from
    x_kv (..., T_k, d_model), as a decoder attends to an encoder's output.

    ``mask`` is boolean (True = blocked), broadcastable to (..., T_q, T_k) over the batch axes of x_q, with no
    head axis: it applies to every head. A padding mask blocks keys, e.g. (B, 1, T_k) True at each sequence's
    padded keys; a query whose keys are all blocked gets all-zero weights and a zero output row. Returns
    ``(out (..., T_q, d_model), weights (..., n_heads, T_q, T_k))``.
    """
    x_q, x_kv = np.asarray(x_q), np.asarray(x_kv)
    d_model = x_q.shape[-1]
    if x_kv.shape[-1] != d_model:
        raise ValueError(f"x_q and x_kv must share d_model (their last axis), got x_q {x_q.shape} and x_kv "
                         f"{x_kv.shape}")
    _check_projections(d_model, n_heads, W_Q, W_K, W_V, W_O)
    Q = split_heads(x_q @ W_Q, n_heads)  # (..., n_heads, T_q, d_head)
    K = split_heads(x_kv @ W_K, n_heads)  # (..., n_heads, T_k, d_head)
    V = split_heads(x_kv @ W_V, n_heads)  # (..., n_heads, T_k, d_head)
    if mask is not None:
        mask = np.expand_dims(np.atleast_2d(mask), -3)  # (..., 1, T_q, T_k): the same for every head
    heads, weights = scaled_dot_product_attention(Q, K, V, mask)  # (..., n_heads, T_q, d_head|T_k)
    return output_projection(heads, W_O), weights  # (..., T_q, d_model)


# ---------------------------------------------------------------------------------------------------------
# Lesson 08: attention in today's models. New names:
# positions  (T,) integer positions of the rows of x (RoPE rotates row t by angles proportional to positions[t])
# base       RoPE's frequency base: pair i turns by base^(-2i/d_head) radians per position
# n_sink, window   a streaming cache keeps the first n_sink tokens and the `window` most recent ones
# d_c, d_rope      MLA's latent width (the cached c_KV) and its decoupled RoPE key width (also cached)

__all__ += [
    "rope",
    "alibi_bias",
    "sliding_window_mask",
    "streaming_decode",
    "mla_attention",
    "mla_absorbed",
    "kv_cache_elements_per_token",
]


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
    _positive_int("n_heads", n_heads)
    _positive_int("T", T)
    slopes = np.array(_alibi_slopes(n_heads), dtype=np.float64)  # (n_heads,)
    t = np.arange(T)
    distance = np.abs(t[:, None] - t[None, :]).astype(np.float64)  # (T, T)
    return -slopes[:, None, None] * distance  # (n_heads, T, T)


def sliding_window_mask(T, window):
    """(T, T) bool, True = blocked: query i sees keys i - window + 1 ... i, the `window` most recent tokens
    itself included (Mistral 7B: window 4096, a rolling cache of `window` entries)."""
    _positive_int("T", T)
    _positive_int("window", window)
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
    _positive_int("window", window)
    if isinstance(n_sink, bool) or not isinstance(n_sink, (int, np.integer)) or n_sink < 0:
        raise ValueError(f"n_sink must be an integer >= 0, got {n_sink!r}")
    return _decode_loop(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads,
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

"""Lesson 06: grouped-query attention, the KV cache, mask conventions, tiled (online-softmax) and cross-attention.

New names:
    n_kv_heads  number of key/value heads (n_heads query heads share them in groups of n_heads // n_kv_heads);
                n_kv_heads == n_heads is ordinary multi-head attention, n_kv_heads == 1 is multi-query attention
    cache       keys or values seen so far, laid out (..., n_kv_heads, T, d_head): batch, KV head, time, width
"""

from __future__ import annotations

import math

import numpy as np

from autograder.reference.arguments import check_divisible, check_projections
from autograder.reference.lesson01 import scaled_dot_product_attention
from autograder.reference.lesson02 import output_projection, split_heads

MASK_CONVENTIONS = ("course", "masked_fill", "nn.MultiheadAttention", "F.scaled_dot_product_attention")


def repeat_kv(x, n_rep):
    """(..., n_kv_heads, T, d_head) -> (..., n_kv_heads * n_rep, T, d_head), each KV head repeated n_rep times
    in a row (KV head j serves query heads j*n_rep ... j*n_rep + n_rep - 1), as Llama's ``repeat_kv`` does."""
    x = np.asarray(x)
    if isinstance(n_rep, bool) or not isinstance(n_rep, (int, np.integer)) or n_rep < 1:
        raise ValueError(f"n_rep must be a positive integer, got {n_rep!r}")
    return np.repeat(x, n_rep, axis=-3)  # (..., n_kv_heads * n_rep, T, d_head)


def _check_kv_heads(d_model, n_heads, n_kv_heads):
    check_divisible(d_model, n_heads)
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
    return decode_loop(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)


def decode_loop(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, cut=None):
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
    check_projections(d_model, n_heads, W_Q, W_K, W_V, W_O)
    Q = split_heads(x_q @ W_Q, n_heads)  # (..., n_heads, T_q, d_head)
    K = split_heads(x_kv @ W_K, n_heads)  # (..., n_heads, T_k, d_head)
    V = split_heads(x_kv @ W_V, n_heads)  # (..., n_heads, T_k, d_head)
    if mask is not None:
        mask = np.expand_dims(np.atleast_2d(mask), -3)  # (..., 1, T_q, T_k): the same for every head
    heads, weights = scaled_dot_product_attention(Q, K, V, mask)  # (..., n_heads, T_q, d_head|T_k)
    return output_projection(heads, W_O), weights  # (..., T_q, d_model)

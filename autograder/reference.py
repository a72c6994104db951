"""The course's one reference implementation of multi-head attention (numpy).

Every hidden test grades a learner's function against the function of the same name here, and the
benchmarks time it. Learners never receive this file.

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
    e = np.exp(x - row_max)
    total = np.sum(e, axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


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
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_k)  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
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


def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """Self-attention with ``n_heads`` heads. x (..., T, d_model) -> (out (..., T, d_model), weights (..., n_heads, T, T)).

    Each head attends in its own d_head = d_model // n_heads subspace, scaled by sqrt(d_head). ``mask`` must
    broadcast to the weights (..., n_heads, T, T): a (T, T) mask applies to every head, a (B, 1, T, T) mask
    gives each batch element its own.
    """
    x = np.asarray(x)
    d_model = x.shape[-1]
    _check_divisible(d_model, n_heads)
    for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V), ("W_O", W_O)):
        if np.shape(W) != (d_model, d_model):
            raise ValueError(f"{name} must be (d_model, d_model) = ({d_model}, {d_model}), got {np.shape(W)}")
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

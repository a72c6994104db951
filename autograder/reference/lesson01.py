"""Lesson 01: softmax and scaled dot-product attention."""

from __future__ import annotations

import math

import numpy as np


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

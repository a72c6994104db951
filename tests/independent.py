"""A second, independent implementation of the contract, written differently on purpose: explicit loops over
heads and batch elements, einsum instead of matmul, column slices instead of reshape. The reference is tested
against it, so a mistake would have to be made twice, in two different ways, to go unnoticed."""

import itertools
import math

import numpy as np


def softmax(x, axis=-1):
    x = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    out = np.empty_like(x)
    for idx in itertools.product(*map(range, x.shape[:-1])):
        row = x[idx]
        finite = row[np.isfinite(row)]
        if finite.size == 0:
            out[idx] = 0.0
            continue
        e = np.exp(row - finite.max())
        out[idx] = e / e.sum()
    return np.moveaxis(out, -1, axis)


def attention(Q, K, V, mask=None):
    lead = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    T_q, T_k = Q.shape[-2], K.shape[-2]
    Q, K, V = (np.broadcast_to(a, lead + a.shape[-2:]) for a in (Q, K, V))
    m = np.zeros(lead + (T_q, T_k), bool) if mask is None else np.broadcast_to(mask, lead + (T_q, T_k))
    out = np.zeros(lead + (T_q, V.shape[-1]))
    weights = np.zeros(lead + (T_q, T_k))
    for idx in itertools.product(*map(range, lead)):
        scores = np.einsum("qd,kd->qk", Q[idx].astype(float), K[idx].astype(float)) / math.sqrt(Q.shape[-1])
        scores[m[idx]] = -np.inf
        weights[idx] = softmax(scores, axis=-1)
        out[idx] = np.einsum("qk,kv->qv", weights[idx], V[idx].astype(float))
    return out, weights


def split_heads(x, n_heads):
    d_head = x.shape[-1] // n_heads
    return np.stack([x[..., h * d_head:(h + 1) * d_head] for h in range(n_heads)], axis=-3)


def concat_heads(x):
    return np.concatenate([x[..., h, :, :] for h in range(x.shape[-3])], axis=-1)


def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """Per-head loop: each head has its own column slice of W_Q, W_K, W_V and row slice of W_O; the output is
    the sum over heads of head_i @ W_O^i (ARENA's form), not Concat(heads) @ W_O."""
    d_model = x.shape[-1]
    d_head = d_model // n_heads
    out = 0.0
    all_weights = []
    for h in range(n_heads):
        cols = slice(h * d_head, (h + 1) * d_head)
        q = np.einsum("...td,de->...te", x, W_Q[:, cols])
        k = np.einsum("...td,de->...te", x, W_K[:, cols])
        v = np.einsum("...td,de->...te", x, W_V[:, cols])
        head_out, w = attention(q, k, v, mask)
        out = out + np.einsum("...te,ed->...td", head_out, W_O[cols, :])
        all_weights.append(w)
    return out, np.stack(all_weights, axis=-3)


def mha_param_count(d_model, n_heads, bias=False):
    d_head = d_model // n_heads
    per_head = 3 * (d_model * d_head + (d_head if bias else 0))
    return n_heads * per_head + d_model * d_model + (d_model if bias else 0)

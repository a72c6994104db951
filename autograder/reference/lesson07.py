"""Lesson 07: attention's backward pass, the gradient check, sinusoidal positions.

New names:
    grad_X   dL/dX, the gradient of a scalar loss L with respect to X: always the shape of X
"""

from __future__ import annotations

import math

import numpy as np

from autograder.reference.arguments import check_projections, positive_int
from autograder.reference.lesson01 import scaled_dot_product_attention, softmax
from autograder.reference.lesson02 import concat_heads, split_heads


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
    check_projections(d_model, n_heads, W_Q, W_K, W_V, W_O)
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
        positive_int(name, v)
    t = np.arange(T, dtype=np.float64)[:, None]  # (T, 1)
    freq = 10000.0 ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)  # (ceil(d_model / 2),)
    angles = t * freq  # (T, ceil(d_model / 2))
    pe = np.empty((T, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return pe

"""Lesson 02: multi-head attention: the heads split and concatenated, the output projection, the whole layer."""

from __future__ import annotations

import numpy as np

from autograder.reference.arguments import check_divisible, check_projections
from autograder.reference.lesson01 import scaled_dot_product_attention


def split_heads(x, n_heads):
    """(..., T, d_model) -> (..., n_heads, T, d_head); head i holds columns i*d_head:(i+1)*d_head."""
    x = np.asarray(x)
    *lead, T, d_model = x.shape
    check_divisible(d_model, n_heads)
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
    check_projections(x.shape[-1], n_heads, W_Q, W_K, W_V, W_O)
    Q = split_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
    K = split_heads(x @ W_K, n_heads)  # (..., n_heads, T, d_head)
    V = split_heads(x @ W_V, n_heads)  # (..., n_heads, T, d_head)
    heads, weights = scaled_dot_product_attention(Q, K, V, mask)  # (..., n_heads, T, d_head), (..., n_heads, T, T)
    return output_projection(heads, W_O), weights

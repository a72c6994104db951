"""Lesson 04: why the scores are scaled by sqrt(d_k): every head's scaled scores, the spread of a dot product."""

from __future__ import annotations

import math

import numpy as np

from autograder.reference.arguments import check_divisible
from autograder.reference.lesson02 import split_heads


def multi_head_scores(x, W_Q, W_K, n_heads):
    """Scaled scores of every head: x (..., T, d_model) -> (..., n_heads, T, T).

    Inside a head the dot product sums over d_head = d_model // n_heads terms, so the scale is sqrt(d_head),
    not sqrt(d_model). The scale is a Python float, so float32 input stays float32.
    """
    x = np.asarray(x)
    d_model = x.shape[-1]
    check_divisible(d_model, n_heads)
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

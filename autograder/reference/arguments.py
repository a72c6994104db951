"""The argument checks the lessons' functions share: each raises ``ValueError`` naming the argument and what it must
be."""

from __future__ import annotations

import numpy as np


def check_divisible(d_model, n_heads):
    if n_heads <= 0 or d_model % n_heads != 0:
        raise ValueError(
            f"d_model={d_model} cannot be split into n_heads={n_heads} equal heads: "
            "choose n_heads that divides d_model")


def check_projections(d_model, n_heads, *Ws):
    check_divisible(d_model, n_heads)
    for name, W in zip(("W_Q", "W_K", "W_V", "W_O"), Ws):
        if np.shape(W) != (d_model, d_model):
            raise ValueError(f"{name} must be (d_model, d_model) = ({d_model}, {d_model}), got {np.shape(W)}")


def positive_int(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")

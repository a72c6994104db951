"""Lesson 03: parameter counts (multi-head and grouped-query attention) and the KV cache's bytes per token."""

from __future__ import annotations

import numpy as np

from autograder.reference.arguments import check_divisible, positive_int


def mha_param_count(d_model, n_heads, bias=False):
    """Parameters of one multi-head attention layer: W_Q, W_K, W_V, W_O (and their biases).

    Each projection is d_model x d_model whatever n_heads is (n_heads slices of d_model x d_head), so the
    count is 4 d_model^2 (+ 4 d_model with bias): it does not change with n_heads.
    """
    for name, v in (("d_model", d_model), ("n_heads", n_heads)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    check_divisible(d_model, n_heads)
    weights = 4 * d_model * d_model
    biases = 4 * d_model if bias else 0
    return int(weights + biases)


def gqa_param_count(d_model, n_heads, n_kv_heads, bias=False):
    """Parameters of one grouped-query attention layer (MQA when n_kv_heads == 1, MHA when == n_heads).

    W_Q and W_O stay (d_model, d_model); W_K and W_V shrink to (d_model, n_kv_heads * d_head) because groups
    of n_heads // n_kv_heads query heads share one key/value head. With bias: d_model each for W_Q and W_O,
    n_kv_heads * d_head each for W_K and W_V.
    """
    for name, v in (("d_model", d_model), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads)):
        positive_int(name, v)
    check_divisible(d_model, n_heads)
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
        positive_int(name, v)
    return int(2 * n_layers * n_kv_heads * d_head * bytes_per_value)  # 2 = one K and one V

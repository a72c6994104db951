"""Catalogued learner bugs of lesson 06: GQA/MQA, the KV cache, mask conventions, tiled attention."""

import math  # noqa: F401 - used inside the bug sources' namespace

import numpy as np  # noqa: F401

from autograder.bugs import bug

# ---------------------------------------------------------------------------------------------------------
# Grouped-query attention: KV heads repeated in the wrong order
# ---------------------------------------------------------------------------------------------------------
_TILE_DIAGNOSIS = """The KV heads are repeated in the wrong order: np.tile lays them out as 0, 1, 0, 1, ... so query
    head i gets KV head i % n_kv_heads. Each KV head serves a *consecutive* group of n_heads // n_kv_heads query
    heads (0, 0, 1, 1, ...): use np.repeat(x, n_rep, axis=-3)."""

bug("repeat_kv_tiled", "06", "repeat_kv", _TILE_DIAGNOSIS,
    """
    def repeat_kv(x, n_rep):
        reps = (1,) * (x.ndim - 3) + (n_rep, 1, 1)
        return np.tile(x, reps)
    """, tests=("repeat_kv_values",))

bug("gqa_kv_heads_tiled", "06", "grouped_query_attention", _TILE_DIAGNOSIS,
    """
    def grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=None):
        n_rep = n_heads // n_kv_heads
        reps = (1,) * (x.ndim - 2) + (n_rep, 1, 1)
        Q = split_heads(x @ W_Q, n_heads)
        K = np.tile(split_heads(x @ W_K, n_kv_heads), reps)
        V = np.tile(split_heads(x @ W_V, n_kv_heads), reps)
        heads, weights = scaled_dot_product_attention(Q, K, V, mask)
        return concat_heads(heads) @ W_O, weights
    """, tests=("gqa_values",))

# ---------------------------------------------------------------------------------------------------------
# KV cache and the full (uncached) path
# ---------------------------------------------------------------------------------------------------------
bug("kv_cache_wrong_axis", "06", "kv_cache_append",
    """The cache grows along the wrong axis: with the layout (B, n_kv_heads, T, d_head) axis 1 is the KV-head
    axis, so appending there adds heads instead of time steps. Concatenate along the time axis, axis=-2
    (which is also right for an unbatched (n_kv_heads, T, d_head) cache).""",
    """
    def kv_cache_append(cache_k, cache_v, k, v):
        return np.concatenate([cache_k, k], axis=1), np.concatenate([cache_v, v], axis=1)
    """, tests=("kv_cache_append_values",))

bug("kv_cache_feature_axis", "06", "kv_cache_append",
    """The cache grows along its last axis, d_head, so each cached key gets wider instead of the cache getting
    longer. The time axis of (..., n_kv_heads, T, d_head) is axis=-2.""",
    """
    def kv_cache_append(cache_k, cache_v, k, v):
        return np.concatenate([cache_k, k], axis=-1), np.concatenate([cache_v, v], axis=-1)
    """, tests=("kv_cache_append_values",))

bug("causal_mask_forgotten", "06", "causal_self_attention",
    """The full path attends without the causal mask, so every token also sees the tokens after it and the
    result cannot match token-by-token decoding. Pass mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    (True = blocked, above the diagonal).""",
    """
    def causal_self_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
        return grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)
    """, tests=("causal_full_values",))

bug("causal_mask_diagonal_blocked", "06", "causal_self_attention",
    """The causal mask also blocks the diagonal (k=0), so a token cannot attend to itself and the first token
    has no key at all. Block only the future: np.triu(..., k=1).""",
    """
    def causal_self_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
        T = x.shape[-2]
        mask = np.triu(np.ones((T, T), dtype=bool), k=0)
        return grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=mask)
    """, tests=("causal_full_values",))

bug("decode_step_new_token_not_seen", "06", "decode_step",
    """The newest token attends only to the old cache: it must be appended to the cache *before* attending,
    because a token may attend to itself (the diagonal of the causal mask is open).""",
    """
    def decode_step(x_t, cache_k, cache_v, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
        n_rep = n_heads // n_kv_heads
        q = split_heads(x_t @ W_Q, n_heads)
        k = split_heads(x_t @ W_K, n_kv_heads)
        v = split_heads(x_t @ W_V, n_kv_heads)
        heads, _ = scaled_dot_product_attention(q, repeat_kv(cache_k, n_rep), repeat_kv(cache_v, n_rep))
        cache_k, cache_v = kv_cache_append(cache_k, cache_v, k, v)
        return concat_heads(heads) @ W_O, cache_k, cache_v
    """, tests=("decode_step_values",))

# ---------------------------------------------------------------------------------------------------------
# Mask conventions
# ---------------------------------------------------------------------------------------------------------
bug("mask_sdpa_polarity", "06", "causal_mask",
    """The mask for F.scaled_dot_product_attention has the wrong polarity: its boolean attn_mask marks the
    pairs that *may attend* with True (the opposite of this course and of nn.MultiheadAttention), so the causal
    mask is True on and below the diagonal.""",
    """
    def causal_mask(T, convention="course"):
        blocked = np.triu(np.ones((T, T), dtype=bool), k=1)
        if convention == "masked_fill":
            return (~blocked).astype(float)
        return blocked
    """, tests=("mask_conventions",))

# ---------------------------------------------------------------------------------------------------------
# Tiled attention with an online softmax
# ---------------------------------------------------------------------------------------------------------
bug("tiled_no_rescale", "06", "tiled_attention",
    """The running sums are not rescaled when a block raises the running maximum: before adding a block, multiply
    the running sum and the running output by exp(m_old - m_new), so every term is measured against the same
    maximum.""",
    """
    def tiled_attention(Q, K, V, block_size, causal=False):
        T_q, T_k = Q.shape[-2], K.shape[-2]
        scale = 1 / math.sqrt(Q.shape[-1])
        m = np.full(Q.shape[:-1] + (1,), -np.inf)
        total = np.zeros(Q.shape[:-1] + (1,))
        acc = np.zeros(Q.shape[:-1] + (V.shape[-1],))
        for start in range(0, T_k, block_size):
            s = Q @ np.swapaxes(K[..., start:start + block_size, :], -1, -2) * scale
            if causal:
                s = np.where(np.arange(start, start + s.shape[-1]) > np.arange(T_q)[:, None], -np.inf, s)
            m = np.maximum(m, s.max(axis=-1, keepdims=True))
            p = np.exp(s - m)
            total = total + p.sum(axis=-1, keepdims=True)
            acc = acc + p @ V[..., start:start + block_size, :]
        return acc / total
    """, tests=("tiled_values",))

"""Catalogued learner bugs of lesson 06: GQA/MQA, the KV cache, mask conventions, tiled attention."""

import math  # noqa: F401 - used inside the bug sources' namespace

import numpy as np  # noqa: F401

from autograder.bugs import declarer

bug = declarer(__name__)

# ---------------------------------------------------------------------------------------------------------
# Grouped-query attention: KV heads repeated in the wrong order
# ---------------------------------------------------------------------------------------------------------
_TILE_DIAGNOSIS = """The KV heads come out in the order 0, 1, 0, 1, ... (the whole stack tiled), so query head i gets
    KV head i % n_kv_heads. In grouped-query attention each KV head serves a *consecutive* group of query heads
    (with 4 query heads and 2 KV heads the order is 0, 0, 1, 1): each head must be repeated in place, next to
    itself."""

bug("repeat_kv_tiled", "repeat_kv", _TILE_DIAGNOSIS,
    """
    def repeat_kv(x, n_rep):
        reps = (1,) * (x.ndim - 3) + (n_rep, 1, 1)
        return np.tile(x, reps)
    """, tests=("repeat_kv_values",))

bug("gqa_kv_heads_tiled", "grouped_query_attention", _TILE_DIAGNOSIS,
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
bug("kv_cache_wrong_axis", "kv_cache_append",
    """The cache grows along the wrong axis: with the layout (B, n_kv_heads, T, d_head) axis 1 is the KV-head
    axis, so appending there adds heads instead of time steps. Concatenate along the time axis, axis=-2
    (which is also right for an unbatched (n_kv_heads, T, d_head) cache).""",
    """
    def kv_cache_append(cache_k, cache_v, k, v):
        return np.concatenate([cache_k, k], axis=1), np.concatenate([cache_v, v], axis=1)
    """, tests=("kv_cache_append_values",))

bug("kv_cache_feature_axis", "kv_cache_append",
    """The cache grows along its last axis, d_head, so each cached key gets wider instead of the cache getting
    longer. The time axis of (..., n_kv_heads, T, d_head) is axis=-2.""",
    """
    def kv_cache_append(cache_k, cache_v, k, v):
        return np.concatenate([cache_k, k], axis=-1), np.concatenate([cache_v, v], axis=-1)
    """, tests=("kv_cache_append_values",))

bug("causal_mask_forgotten", "causal_self_attention",
    """The full path attends without the causal mask, so every token also sees the tokens after it and the
    result cannot match token-by-token decoding. Give the attention the course's causal mask (True = blocked:
    every key after the query).""",
    """
    def causal_self_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
        return grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)
    """, tests=("causal_full_values",))

bug("causal_mask_diagonal_blocked", "causal_self_attention",
    """The causal mask also blocks the diagonal, so a token cannot attend to itself and the first token has no
    key at all. Only the keys strictly after the query are the future: the diagonal stays open.""",
    """
    def causal_self_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
        T = x.shape[-2]
        mask = np.triu(np.ones((T, T), dtype=bool), k=0)
        return grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=mask)
    """, tests=("causal_full_values",))

bug("decode_step_new_token_not_seen", "decode_step",
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
bug("mask_sdpa_polarity", "causal_mask",
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
bug("tiled_no_rescale", "tiled_attention",
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


def _tiled_source(*, m_init="np.full((*lead, T_q, 1), -np.inf, dtype=dtype)", blocks="range(0, T_k, block_size)",
                  scale="1.0 / math.sqrt(Q.shape[-1])", dtype="np.result_type(Q, K, V)"):
    """The course's tiled attention with one part replaced."""
    return f"""
    def tiled_attention(Q, K, V, block_size, causal=False):
        T_q, T_k = Q.shape[-2], K.shape[-2]
        scale = {scale}
        lead = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
        dtype = {dtype}
        m = {m_init}
        total = np.zeros((*lead, T_q, 1), dtype=dtype)
        acc = np.zeros((*lead, T_q, V.shape[-1]), dtype=dtype)
        queries = np.arange(T_q)[:, None]
        for start in {blocks}:
            stop = min(start + block_size, T_k)
            s = (Q * scale) @ np.swapaxes(K[..., start:stop, :], -1, -2)
            if causal:
                s = np.where(np.arange(start, stop)[None, :] > queries, -np.inf, s)
            m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
            shift = np.where(np.isfinite(m_new), m_new, 0.0)
            p = np.exp(s - shift)
            rescale = np.exp(np.where(np.isfinite(m), m, shift) - shift)
            total = total * rescale + p.sum(axis=-1, keepdims=True)
            acc = acc * rescale + p @ V[..., start:stop, :]
            m = m_new
        return acc / total
    """


bug("tiled_max_starts_at_zero", "tiled_attention",
    """The running maximum starts at 0 instead of minus infinity, so for a query whose scores are all far below
    0 the shift stays 0, every exp(score) underflows to 0 and the row comes out 0/0 = NaN (rows near 0 come out
    right, which is why ordinary inputs hide it). The running maximum must be the largest score seen so far:
    before any key, that is minus infinity.""",
    _tiled_source(m_init="np.zeros((*lead, T_q, 1), dtype=dtype)"), tests=("tiled_values",))

bug("tiled_no_scale", "tiled_attention",
    """The block scores are not divided by sqrt(d_k): tiled attention must equal plain scaled dot-product
    attention, softmax(Q K^T / sqrt(d_k)) V, block by block.""",
    _tiled_source(scale="1.0"), tests=("tiled_values",))

bug("tiled_drops_last_block", "tiled_attention",
    """The last, shorter block of keys is left out: when T_k is not a multiple of block_size the loop stops
    before the keys that do not fill a whole block. Every key belongs to some block, the last one included.""",
    _tiled_source(blocks="range(0, T_k - block_size + 1, block_size)"), tests=("tiled_values",))

bug("tiled_float64_accumulators", "tiled_attention",
    """The running maximum, sum and output are created as float64 (np.zeros and np.full without dtype=), so
    float32 input comes back float64. Create them with the input's dtype.""",
    _tiled_source(dtype="np.float64"), tests=("tiled_values",))

bug("tiled_calls_attention", "tiled_attention",
    """tiled_attention hands the whole computation to scaled_dot_product_attention, which builds the full
    (T_q, T_k) matrix of scores in one piece: nothing is tiled, and the attention is not this function's own
    work. Walk over the keys one block at a time, keeping a running maximum, a running sum and a running output
    per query (the online softmax).""",
    """
    def tiled_attention(Q, K, V, block_size, causal=False):
        mask = np.triu(np.ones((Q.shape[-2], K.shape[-2]), dtype=bool), k=1) if causal else None
        return scaled_dot_product_attention(Q, K, V, mask)[0]
    """, tests=("tiled_values", "tiled_memory"), visible=False)  # the self-checks see values and memory, not who did the work

bug("tiled_full_matrix", "tiled_attention",
    """tiled_attention builds the whole (T_q, T_k) matrix of scores and then walks over it in blocks: the values
    are right, but the memory grows like T_q * T_k, which is what tiling exists to avoid. Compute the scores of one
    block of keys at a time, (T_q, block_size), and never hold the full matrix.""",
    """
    def tiled_attention(Q, K, V, block_size, causal=False):
        T_q, T_k = Q.shape[-2], K.shape[-2]
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])  # (..., T_q, T_k): the whole matrix
        if causal:
            scores = np.where(np.arange(T_k)[None, :] > np.arange(T_q)[:, None], -np.inf, scores)
        m = scores.max(axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        total = np.zeros(Q.shape[:-1] + (1,), dtype=scores.dtype)
        acc = np.zeros(Q.shape[:-1] + (V.shape[-1],), dtype=scores.dtype)
        for start in range(0, T_k, block_size):
            p = np.exp(scores[..., start:start + block_size] - m)  # (..., T_q, block)
            total = total + p.sum(axis=-1, keepdims=True)
            acc = acc + p @ V[..., start:start + block_size, :]
        return acc / total
    """, tests=("tiled_memory",))

bug("decode_loop_float64_cache", "decode_with_kv_cache",
    """The empty caches are created as float64 (np.zeros without dtype=), and appending float32 keys to a
    float64 cache makes float64: float32 input must give float32 output and caches. Create the empty caches
    with the input's dtype.""",
    """
    def decode_with_kv_cache(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
        *lead, T, d_model = x.shape
        d_head = d_model // n_heads
        cache_k = np.zeros((*lead, n_kv_heads, 0, d_head))
        cache_v = np.zeros((*lead, n_kv_heads, 0, d_head))
        outs = []
        for t in range(T):
            out_t, cache_k, cache_v = decode_step(x[..., t:t + 1, :], cache_k, cache_v, W_Q, W_K, W_V, W_O,
                                                  n_heads, n_kv_heads)
            outs.append(out_t)
        return np.concatenate(outs, axis=-2), cache_k, cache_v
    """, tests=("decode_loop_values",))

bug("gqa_mask_dropped", "grouped_query_attention",
    """The mask is never passed on to the attention, so blocked pairs get weight like any other: with a mask
    the result differs, without one it is right. Every query head must see the mask it was given.""",
    """
    def grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=None):
        n_rep = n_heads // n_kv_heads
        Q = split_heads(x @ W_Q, n_heads)
        K = repeat_kv(split_heads(x @ W_K, n_kv_heads), n_rep)
        V = repeat_kv(split_heads(x @ W_V, n_kv_heads), n_rep)
        heads, weights = scaled_dot_product_attention(Q, K, V)
        return concat_heads(heads) @ W_O, weights
    """, tests=("gqa_values",))

# Not visible: the self-check runs the learner's pasted lesson-01 attention, which this lesson does not grade
# and which may give NaN on a fully blocked row; the hidden test binds the course's own.
bug("gqa_blocked_row_uniform", "grouped_query_attention",
    """Blocked pairs get a large negative score (-1e9) instead of being excluded, so a query whose keys are all
    blocked gets uniform weights 1/T over keys it may not see. The contract: a fully blocked row gets all-zero
    weights, and so a zero output row.""",
    """
    def grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=None):
        n_rep = n_heads // n_kv_heads
        d_head = x.shape[-1] // n_heads
        Q = split_heads(x @ W_Q, n_heads)
        K = repeat_kv(split_heads(x @ W_K, n_kv_heads), n_rep)
        V = repeat_kv(split_heads(x @ W_V, n_kv_heads), n_rep)
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)
        if mask is not None:
            scores = np.where(mask, -1e9, scores)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = e / e.sum(axis=-1, keepdims=True)
        return concat_heads(weights @ V) @ W_O, weights
    """, tests=("gqa_values",), visible=False)

bug("gqa_kv_split_into_query_heads", "grouped_query_attention",
    """K and V are split into n_heads heads, as many as the queries, but W_K and W_V have only n_kv_heads *
    d_head columns: there are n_kv_heads key/value heads of width d_head, shared by groups of query heads.""",
    """
    def grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=None):
        n_rep = n_heads // n_kv_heads
        Q = split_heads(x @ W_Q, n_heads)
        K = repeat_kv(split_heads(x @ W_K, n_heads), n_rep)
        V = repeat_kv(split_heads(x @ W_V, n_heads), n_rep)
        heads, weights = scaled_dot_product_attention(Q, K, V, mask)
        return concat_heads(heads) @ W_O, weights
    """, tests=("gqa_values",))

bug("causal_self_attention_calls_mha", "causal_self_attention",
    """The full path calls multi-head attention, whose W_K and W_V are (d_model, d_model): with fewer KV heads
    they are narrower, (d_model, n_kv_heads * d_head), and groups of query heads share each KV head. The full
    path is the same grouped-query attention as the cached one, with the causal mask.""",
    """
    def causal_self_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
        T = x.shape[-2]
        return multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=causal_mask(T))
    """, tests=("causal_full_values",))

bug("causal_mask_blocks_diagonal", "causal_mask",
    """The mask blocks the diagonal too, so a query may not attend to its own key (and the first query has no
    key at all). Causal means no key *after* the query: the diagonal is open in every convention.""",
    """
    def causal_mask(T, convention="course"):
        blocked = np.triu(np.ones((T, T), dtype=bool), k=0)
        if convention in ("course", "nn.MultiheadAttention"):
            return blocked
        if convention == "F.scaled_dot_product_attention":
            return ~blocked
        if convention == "masked_fill":
            return (~blocked).astype(float)
        raise ValueError(f"unknown mask convention {convention!r}")
    """, tests=("mask_conventions",))

# ---------------------------------------------------------------------------------------------------------
# Cross-attention with a padding mask
# ---------------------------------------------------------------------------------------------------------
bug("cross_kv_from_queries", "cross_attention",
    """The keys and values are projected from x_q, the queries' own sequence, so the layer is self-attention
    over the queries (weights (..., n_heads, T_q, T_q)) and never reads x_kv. In cross-attention only the
    queries come from x_q; the keys and values come from the other sequence, x_kv, with T_k tokens.""",
    """
    def cross_attention(x_q, x_kv, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        Q = split_heads(x_q @ W_Q, n_heads)
        K = split_heads(x_q @ W_K, n_heads)
        V = split_heads(x_q @ W_V, n_heads)
        if mask is not None:
            mask = mask[..., None, :, :]
        heads, weights = scaled_dot_product_attention(Q, K, V, mask)
        return concat_heads(heads) @ W_O, weights
    """, tests=("cross_attention_values",))

bug("cross_padding_mask_over_queries", "cross_attention",
    """The padding mask is applied over the query axis: its head axis was added at the end, so the mask's key
    axis lines up with the queries and whole rows of queries are blocked (or the shapes do not broadcast when
    T_q != T_k). A padding mask blocks keys, the last axis of the weights (..., n_heads, T_q, T_k): the head axis
    of size 1 goes in front of the mask's (query, key) axes.""",
    """
    def cross_attention(x_q, x_kv, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        Q = split_heads(x_q @ W_Q, n_heads)
        K = split_heads(x_kv @ W_K, n_heads)
        V = split_heads(x_kv @ W_V, n_heads)
        if mask is not None:
            mask = mask[..., None]
        heads, weights = scaled_dot_product_attention(Q, K, V, mask)
        return concat_heads(heads) @ W_O, weights
    """, tests=("cross_attention_values",))

bug("cross_mask_without_head_axis", "cross_attention",
    """The mask is given to the attention without a head axis: a padding mask (B, 1, T_k) then lines its batch
    axis up with the heads of the weights (B, n_heads, T_q, T_k), which fails (or mixes sequences up) unless
    B is 1. The mask applies to every head: give it a head axis of size 1 in front of its (query, key) axes.""",
    """
    def cross_attention(x_q, x_kv, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        Q = split_heads(x_q @ W_Q, n_heads)
        K = split_heads(x_kv @ W_K, n_heads)
        V = split_heads(x_kv @ W_V, n_heads)
        heads, weights = scaled_dot_product_attention(Q, K, V, mask)
        return concat_heads(heads) @ W_O, weights
    """, tests=("cross_attention_values",))


def _cross_softmax_source(blocked_score, safe_shift):
    shift = "np.where(np.isfinite(row_max), row_max, 0.0)" if safe_shift else "row_max"
    return f"""
    def cross_attention(x_q, x_kv, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        Q = split_heads(x_q @ W_Q, n_heads)
        K = split_heads(x_kv @ W_K, n_heads)
        V = split_heads(x_kv @ W_V, n_heads)
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = np.where(mask[..., None, :, :], {blocked_score}, scores)
        row_max = scores.max(axis=-1, keepdims=True)
        e = np.exp(scores - {shift})
        weights = e / e.sum(axis=-1, keepdims=True)
        return concat_heads(weights @ V) @ W_O, weights
    """


bug("cross_blocked_row_nan", "cross_attention",
    """A query whose keys are all blocked (a sequence that is all padding) gets NaN weights: every score of its
    row is -inf, so the row maximum is -inf and exp(-inf - (-inf)) is NaN. The contract is all-zero weights for
    such a row: shift by 0 where the row maximum is -inf, and divide only where the row's sum is positive.""",
    _cross_softmax_source("-np.inf", safe_shift=False), tests=("cross_attention_values",))

bug("cross_blocked_row_uniform", "cross_attention",
    """Blocked pairs get a large negative score (-1e9) instead of -inf, so a query whose keys are all blocked (a
    sequence that is all padding) gets uniform weights 1/T_k over keys it may not see. The contract: a fully
    blocked row gets all-zero weights, and so a zero output row.""",
    _cross_softmax_source("-1e9", safe_shift=True), tests=("cross_attention_values",))

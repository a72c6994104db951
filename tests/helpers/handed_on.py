"""Lesson 06 functions that reuse or hand on work, each right in value: GQA through the pasted
``multi_head_attention`` (its K/V weights widened: the identity the lesson states, so correct and worth full marks),
the decoding loop through ``causal_self_attention`` (its caches made by projection: the lesson asks the loop to go
through ``decode_step``, so refused), and a ``tiled_attention`` that attends over the distinct (key, value) pairs
only, which needs no tiles whenever keys repeat. Graded in ``tests/unit/checks/test_own_work.py`` and
``tests/grading/test_grading_lesson06.py``.
"""

GQA_VIA_MHA = """
def grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=None):
    d_head = W_Q.shape[1] // n_heads
    n_rep = n_heads // n_kv_heads

    def widen(W):  # (d_model, n_kv_heads * d_head) -> (d_model, n_heads * d_head): each KV head n_rep times
        heads = W.reshape(W.shape[0], n_kv_heads, 1, d_head)
        return np.broadcast_to(heads, (W.shape[0], n_kv_heads, n_rep, d_head)).reshape(W.shape[0], -1)

    return multi_head_attention(x, W_Q, widen(W_K), widen(W_V), W_O, n_heads, mask=mask)
"""
DECODE_VIA_CAUSAL = """
def decode_with_kv_cache(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
    d_head = W_Q.shape[1] // n_heads

    def heads(a):  # (..., T, n_kv_heads * d_head) -> (..., n_kv_heads, T, d_head)
        return np.swapaxes(a.reshape(*a.shape[:-1], n_kv_heads, d_head), -2, -3)

    out, _ = causal_self_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)
    return out, heads(x @ W_K), heads(x @ W_V)
"""

DISTINCT_KEYS_ONLY = """
def tiled_attention(Q, K, V, block_size, causal=False):
    d_k = Q.shape[-1]
    if causal or Q.ndim != 2:
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_k)  # (..., T_q, T_k)
        if causal:
            scores = np.where(np.triu(np.ones(scores.shape[-2:], dtype=bool), k=1), -np.inf, scores)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return (weights / weights.sum(axis=-1, keepdims=True)) @ V
    pairs, first, count = np.unique(np.concatenate([K, V], axis=-1), axis=0, return_index=True,
                                     return_counts=True)  # (P, d_k + d_v): each distinct (key, value) pair once
    scores = Q @ K[first].T / math.sqrt(d_k) + np.log(count)  # (T_q, P): a pair seen n times weighs n times
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return ((weights / weights.sum(axis=-1, keepdims=True)) @ V[first]).astype(V.dtype)
"""

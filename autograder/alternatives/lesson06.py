"""Correct alternatives of lesson 06: GQA, masks, the KV cache and decoding, tiled and cross-attention."""

from autograder.alternatives import declarer

alternative = declarer(__name__)

alternative("repeat_kv_broadcast", "repeat_kv",
            """a new axis after the KV heads, broadcast to n_rep and folded back with a reshape""",
            """
            def repeat_kv(x, n_rep):
                *lead, n_kv_heads, T, d_head = x.shape
                widened = np.broadcast_to(x[..., :, None, :, :], (*lead, n_kv_heads, n_rep, T, d_head))
                return widened.reshape(*lead, n_kv_heads * n_rep, T, d_head)  # (..., n_kv_heads * n_rep, T, d_head)
            """)

alternative("repeat_kv_concatenate", "repeat_kv",
            """each KV head written n_rep times in a row with np.concatenate, with a check on n_rep""",
            """
            def repeat_kv(x, n_rep):
                if n_rep < 1:
                    raise ValueError("each KV head is used at least once")
                heads = [x[..., h:h + 1, :, :] for h in range(x.shape[-3]) for _ in range(n_rep)]
                return np.concatenate(heads, axis=-3)  # (..., n_kv_heads * n_rep, T, d_head)
            """)

alternative("gqa_through_pasted_mha", "grouped_query_attention",
            """the identity the lesson states: multi-head attention (the pasted one) with each KV head's weight
            columns repeated for its group""",
            """
            def grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=None):
                if n_heads % n_kv_heads:
                    raise ValueError("each KV head serves a whole group of query heads")
                d_head = W_Q.shape[1] // n_heads
                group = n_heads // n_kv_heads

                def widen(W):  # (d_model, n_kv_heads * d_head) -> (d_model, n_heads * d_head), each head group times
                    per_head = W.reshape(W.shape[0], n_kv_heads, 1, d_head)
                    return np.broadcast_to(per_head, (W.shape[0], n_kv_heads, group, d_head)).reshape(W.shape[0], -1)

                return multi_head_attention(x, W_Q, widen(W_K), widen(W_V), W_O, n_heads, mask=mask)
            """)

alternative("gqa_grouped_einsum", "grouped_query_attention",
            """the queries grouped as (n_kv_heads, group) and attended with einsum against the unrepeated keys and
            values, float64 inside""",
            """
            def grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads, mask=None):
                group = n_heads // n_kv_heads
                T, d_head = x.shape[-2], W_Q.shape[1] // n_heads
                Q = split_heads((x @ W_Q).astype(np.float64), n_heads)  # (..., n_heads, T, d_head)
                Q = Q.reshape(*Q.shape[:-3], n_kv_heads, group, T, d_head)  # (..., n_kv_heads, group, T, d_head)
                K = split_heads((x @ W_K).astype(np.float64), n_kv_heads)  # (..., n_kv_heads, T, d_head)
                V = split_heads((x @ W_V).astype(np.float64), n_kv_heads)
                scores = np.einsum("...kgqd,...ksd->...kgqs", Q, K) / math.sqrt(d_head)
                scores = scores.reshape(*scores.shape[:-4], n_heads, T, T)  # (..., n_heads, T, T)
                if mask is not None:
                    scores = np.where(mask, -np.inf, scores)
                weights = softmax(scores, axis=-1)  # (..., n_heads, T, T)
                grouped = weights.reshape(*weights.shape[:-3], n_kv_heads, group, T, T)
                heads = np.einsum("...kgqs,...ksd->...kgqd", grouped, V).reshape(*weights.shape[:-3], n_heads, T,
                                                                                  d_head)
                dtype = np.result_type(x, W_Q)
                return (concat_heads(heads) @ W_O).astype(dtype), weights.astype(dtype)
            """)

alternative("causal_mask_comparison", "causal_mask",
            """key index greater than query index, by broadcasting two aranges; a table of conventions""",
            """
            def causal_mask(T, convention="course"):
                blocked = np.arange(T)[None, :] > np.arange(T)[:, None]  # (T, T): key after query
                kinds = {"course": blocked, "nn.MultiheadAttention": blocked,
                         "F.scaled_dot_product_attention": ~blocked, "masked_fill": (~blocked).astype(float)}
                if convention not in kinds:
                    raise ValueError(f"unknown convention {convention!r}; one of {sorted(kinds)}")
                return kinds[convention]
            """)

alternative("causal_mask_tril", "causal_mask",
            """the allowed pairs as np.tril of ones, each convention derived from it""",
            """
            def causal_mask(T, convention="course"):
                allowed = np.tril(np.ones((T, T), dtype=bool))  # (T, T): True where the key is at or before
                if convention == "F.scaled_dot_product_attention":
                    return allowed
                if convention == "masked_fill":
                    return allowed.astype(np.float64)
                if convention in ("course", "nn.MultiheadAttention"):
                    return np.logical_not(allowed)
                raise ValueError("unknown mask convention " + repr(convention))
            """)

alternative("causal_self_attention_own_mask", "causal_self_attention",
            """the causal mask built inline and passed to the learner's GQA as a keyword""",
            """
            def causal_self_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
                T = x.shape[-2]
                mask = np.triu(np.ones((T, T), dtype=bool), k=1)  # (T, T): True above the diagonal
                return grouped_query_attention(x, W_Q, W_K, W_V, W_O, n_heads=n_heads, n_kv_heads=n_kv_heads,
                                               mask=mask)
            """)

alternative("causal_self_attention_from_pieces", "causal_self_attention",
            """the layer written out from split_heads, repeat_kv and the lesson's attention, with causal_mask""",
            """
            def causal_self_attention(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
                group = n_heads // n_kv_heads
                Q = split_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
                K = repeat_kv(split_heads(x @ W_K, n_kv_heads), group)  # (..., n_heads, T, d_head)
                V = repeat_kv(split_heads(x @ W_V, n_kv_heads), group)
                heads, weights = scaled_dot_product_attention(Q, K, V, causal_mask(x.shape[-2]))
                return concat_heads(heads) @ W_O, weights  # (..., T, d_model), (..., n_heads, T, T)
            """)

alternative("kv_cache_append_preallocated", "kv_cache_append",
            """a new array of the joined length, filled with the old cache and then the new tokens""",
            """
            def kv_cache_append(cache_k, cache_v, k, v):
                def joined(cache, new):
                    shape = cache.shape[:-2] + (cache.shape[-2] + new.shape[-2], cache.shape[-1])
                    out = np.empty(shape, dtype=np.result_type(cache, new))  # (..., n_kv_heads, T_past + T_new, d)
                    out[..., :cache.shape[-2], :] = cache
                    out[..., cache.shape[-2]:, :] = new
                    return out

                return joined(cache_k, k), joined(cache_v, v)
            """)

alternative("kv_cache_append_checked", "kv_cache_append",
            """np.append along the time axis, with a check that the new keys fit the cache""",
            """
            def kv_cache_append(cache_k, cache_v, k, v):
                if k.shape[-1] != cache_k.shape[-1] or k.shape[:-2] != cache_k.shape[:-2]:
                    raise ValueError(f"keys of shape {k.shape} do not fit a cache of shape {cache_k.shape}")
                return np.append(cache_k, k, axis=-2), np.append(cache_v, v, axis=-2)
            """)

alternative("decode_step_grouped_einsum", "decode_step",
            """the one new query per head grouped with its KV head, scores by einsum against the unrepeated
            cache""",
            """
            def decode_step(x_t, cache_k, cache_v, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
                group = n_heads // n_kv_heads
                q = split_heads(x_t @ W_Q, n_heads)  # (..., n_heads, 1, d_head)
                cache_k, cache_v = kv_cache_append(cache_k, cache_v, split_heads(x_t @ W_K, n_kv_heads),
                                                   split_heads(x_t @ W_V, n_kv_heads))  # (..., n_kv_heads, T, d_head)
                q = q.reshape(*q.shape[:-3], n_kv_heads, group, q.shape[-1])  # (..., n_kv_heads, group, d_head)
                scores = np.einsum("...kgd,...ktd->...kgt", q, cache_k) / math.sqrt(q.shape[-1])
                weights = softmax(scores, axis=-1)  # (..., n_kv_heads, group, T)
                heads = np.einsum("...kgt,...ktd->...kgd", weights, cache_v)  # (..., n_kv_heads, group, d_head)
                out = heads.reshape(*heads.shape[:-3], 1, n_heads * heads.shape[-1]) @ W_O  # (..., 1, d_model)
                return out, cache_k, cache_v
            """)

alternative("decode_step_through_gqa_pieces", "decode_step",
            """the new key and value appended with the learner's kv_cache_append, then the lesson's attention on
            the repeated cache; the head axis merged back with concat_heads""",
            """
            def decode_step(x_t, cache_k, cache_v, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
                if n_heads % n_kv_heads:
                    raise ValueError("each KV head serves a whole group of query heads")
                k_t, v_t = (split_heads(x_t @ W, n_kv_heads) for W in (W_K, W_V))  # (..., n_kv_heads, 1, d_head)
                cache_k, cache_v = kv_cache_append(cache_k, cache_v, k_t, v_t)
                n_rep = n_heads // n_kv_heads
                heads, _ = scaled_dot_product_attention(split_heads(x_t @ W_Q, n_heads), repeat_kv(cache_k, n_rep),
                                                        repeat_kv(cache_v, n_rep))  # (..., n_heads, 1, d_head)
                return concat_heads(heads) @ W_O, cache_k, cache_v
            """)

alternative("decode_loop_preallocated_out", "decode_with_kv_cache",
            """the outputs written into a preallocated array, one decode_step per token""",
            """
            def decode_with_kv_cache(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
                T, d_head = x.shape[-2], W_K.shape[1] // n_kv_heads
                cache_k = np.zeros(x.shape[:-2] + (n_kv_heads, 0, d_head), dtype=x.dtype)
                cache_v = np.zeros_like(cache_k)
                out = np.empty(x.shape[:-1] + (W_O.shape[1],), dtype=np.result_type(x, W_O))  # (..., T, d_model)
                for t in range(T):
                    step, cache_k, cache_v = decode_step(x[..., t:t + 1, :], cache_k, cache_v, W_Q, W_K, W_V, W_O,
                                                         n_heads, n_kv_heads)
                    out[..., t, :] = step[..., 0, :]
                return out, cache_k, cache_v
            """)

alternative("decode_loop_moveaxis_tokens", "decode_with_kv_cache",
            """the tokens taken along a time axis moved to the front, the step outputs stacked and moved back""",
            """
            def decode_with_kv_cache(x, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads):
                d_head = W_Q.shape[1] // n_heads
                caches = [np.zeros((*x.shape[:-2], n_kv_heads, 0, d_head), dtype=x.dtype) for _ in range(2)]
                outs = []
                for token in np.moveaxis(x, -2, 0):  # each (..., d_model)
                    step, *caches = decode_step(token[..., None, :], *caches, W_Q, W_K, W_V, W_O, n_heads, n_kv_heads)
                    outs.append(step[..., 0, :])  # (..., d_model)
                return np.stack(outs, axis=-2), caches[0], caches[1]  # (..., T, d_model)
            """)

alternative("tiled_array_split_float64", "tiled_attention",
            """the keys cut with np.array_split into ceil(T_k / block_size) blocks, the online softmax kept in
            float64 and the result returned in the inputs' dtype""",
            """
            def tiled_attention(Q, K, V, block_size, causal=False):
                if block_size < 1:
                    raise ValueError("a block holds at least one key")
                T_q, T_k = Q.shape[-2], K.shape[-2]
                dtype = np.result_type(Q, K, V)
                Q64, K64, V64 = (a.astype(np.float64) for a in (Q, K, V))
                lead = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
                best = np.full((*lead, T_q, 1), -np.inf)  # running maximum of each query's scores
                weight = np.zeros((*lead, T_q, 1))  # running sum of exp(score - best)
                mixed = np.zeros((*lead, T_q, V.shape[-1]))  # running sum of exp(score - best) * value
                rows = np.arange(T_q)[:, None]
                for keys in np.array_split(np.arange(T_k), -(-T_k // block_size)):
                    s = Q64 @ np.swapaxes(K64[..., keys, :], -1, -2) / math.sqrt(Q.shape[-1])  # (..., T_q, block)
                    if causal:
                        s = np.where(keys[None, :] > rows, -np.inf, s)
                    new_best = np.maximum(best, s.max(axis=-1, keepdims=True))
                    pivot = np.where(np.isinf(new_best), 0.0, new_best)
                    p = np.exp(s - pivot)
                    carry = np.where(np.isinf(best), 0.0, np.exp(best - pivot))
                    weight = weight * carry + p.sum(axis=-1, keepdims=True)
                    mixed = mixed * carry + p @ V64[..., keys, :]
                    best = new_best
                return (mixed / weight).astype(dtype)
            """)

alternative("tiled_loop_over_queries_blocks", "tiled_attention",
            """blocks of queries and blocks of keys in two loops, the running maximum and sum kept per query
            block (each score block is (query block, key block))""",
            """
            def tiled_attention(Q, K, V, block_size, causal=False):
                T_q, T_k = Q.shape[-2], K.shape[-2]
                lead = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
                dtype = np.result_type(Q, K, V)
                Q = np.broadcast_to(Q, (*lead, T_q, Q.shape[-1]))
                out = np.empty((*lead, T_q, V.shape[-1]), dtype=dtype)
                scale = 1.0 / math.sqrt(Q.shape[-1])
                for q0 in range(0, T_q, block_size):
                    rows = np.arange(q0, min(q0 + block_size, T_q))
                    m = np.full((*lead, len(rows), 1), -np.inf, dtype=dtype)
                    total = np.zeros((*lead, len(rows), 1), dtype=dtype)
                    acc = np.zeros((*lead, len(rows), V.shape[-1]), dtype=dtype)
                    for k0 in range(0, T_k, block_size):
                        cols = np.arange(k0, min(k0 + block_size, T_k))
                        s = (Q[..., rows, :] * scale) @ np.swapaxes(K[..., cols, :], -1, -2)  # (..., rows, cols)
                        if causal:
                            s = np.where(cols[None, :] > rows[:, None], -np.inf, s)
                        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
                        shift = np.where(np.isfinite(m_new), m_new, 0.0)
                        p = np.exp(s - shift)
                        old = np.exp(np.where(np.isfinite(m), m, shift) - shift)
                        total = total * old + p.sum(axis=-1, keepdims=True)
                        acc = acc * old + p @ V[..., cols, :]
                        m = m_new
                    out[..., rows, :] = acc / total
                return out
            """)

alternative("cross_attention_loop_over_heads", "cross_attention",
            """a loop over heads on column slices, the lesson's attention per head, the heads joined and
            projected""",
            """
            def cross_attention(x_q, x_kv, W_Q, W_K, W_V, W_O, n_heads, mask=None):
                d_head = W_Q.shape[1] // n_heads
                Q, K, V = x_q @ W_Q, x_kv @ W_K, x_kv @ W_V  # (..., T_q, d_model), (..., T_k, d_model) twice
                outs, weights = [], []
                for h in range(n_heads):
                    cols = slice(h * d_head, (h + 1) * d_head)
                    o, w = scaled_dot_product_attention(Q[..., cols], K[..., cols], V[..., cols], mask)
                    outs.append(o)  # (..., T_q, d_head)
                    weights.append(w)  # (..., T_q, T_k)
                return np.concatenate(outs, axis=-1) @ W_O, np.stack(weights, axis=-3)
            """)

alternative("cross_attention_einsum", "cross_attention",
            """einsum on (..., T, n_heads, d_head) arrays, the mask given a head axis with None indexing""",
            """
            def cross_attention(x_q, x_kv, W_Q, W_K, W_V, W_O, n_heads, mask=None):
                d_head = W_Q.shape[1] // n_heads
                Q = (x_q @ W_Q).reshape(*x_q.shape[:-1], n_heads, d_head)  # (..., T_q, n_heads, d_head)
                K = (x_kv @ W_K).reshape(*x_kv.shape[:-1], n_heads, d_head)  # (..., T_k, n_heads, d_head)
                V = (x_kv @ W_V).reshape(*x_kv.shape[:-1], n_heads, d_head)
                scores = np.einsum("...qhd,...khd->...hqk", Q, K) / math.sqrt(d_head)  # (..., n_heads, T_q, T_k)
                if mask is not None:
                    scores = np.where(np.asarray(mask)[..., None, :, :], -np.inf, scores)
                weights = softmax(scores, axis=-1)
                heads = np.einsum("...hqk,...khd->...qhd", weights, V)  # (..., T_q, n_heads, d_head)
                return heads.reshape(*heads.shape[:-2], -1) @ W_O, weights
            """)

"""Correct alternatives of lesson 09, its model: sampling, generation with the KV cache, ablating a head and
K-composition (the block's: ``lesson09.py``)."""

from autograder.alternatives import declarer

alternative = declarer(__name__)

# ------------------------------------------------------------------------------------------------ sample_next
alternative("sample_next_choice_argpartition", "sample_next",
            """rng.choice(n_vocab, p=p) with p a float64 softmax over the top k, found by np.argpartition; a
            negative temperature raises""",
            """
            def sample_next(logits, rng, temperature=1.0, top_k=None):
                \"\"\"One token (an int) drawn from softmax(logits / temperature) over the top_k largest logits.\"\"\"
                logits = np.asarray(logits, dtype=np.float64)
                if temperature < 0:
                    raise ValueError(f"temperature must be 0 or more, got {temperature}")
                if temperature == 0:
                    return int(np.argmax(logits))
                n_vocab = logits.shape[-1]
                z = logits / temperature
                if top_k is not None and top_k < n_vocab:
                    kept = np.argpartition(-z, top_k - 1)[:top_k]  # the indices of the k largest, in any order
                    masked = np.full(n_vocab, -np.inf)
                    masked[kept] = z[kept]
                    z = masked
                p = np.exp(z - z.max())
                p /= p.sum()
                return int(rng.choice(n_vocab, p=p))
            """)

alternative("sample_next_inverse_cdf_sort", "sample_next",
            """the inverse of the cumulative distribution with one rng.random(), the top k kept by a threshold from
            np.sort (the k-th largest logit), the learner's softmax for the probabilities""",
            """
            def sample_next(logits, rng, temperature=1.0, top_k=None):
                \"\"\"One token (an int) drawn from softmax(logits / temperature) over the top_k largest logits.\"\"\"
                logits = np.asarray(logits, dtype=np.float64)
                if temperature == 0:
                    return int(np.argmax(logits))
                if top_k is not None and top_k < len(logits):
                    threshold = np.sort(logits)[-top_k]  # the k-th largest
                    logits = np.where(logits >= threshold, logits, -np.inf)
                p = softmax(logits / temperature)
                u = rng.random()  # uniform on [0, 1)
                total = 0.0
                for token in np.flatnonzero(p):  # only the tokens that can be drawn
                    total += p[token]  # the cumulative distribution up to this token
                    if u < total:
                        return int(token)
                return int(token)  # u beyond the rounded total: the last token that can be drawn
            """)

alternative("sample_next_gumbel_max", "sample_next",
            """the Gumbel-max trick: the argmax of logits / temperature plus independent Gumbel noise from
            rng.gumbel, the tokens outside the top k set to -inf first""",
            """
            def sample_next(logits, rng, temperature=1.0, top_k=None):
                \"\"\"One token (an int) drawn from softmax(logits / temperature) over the top_k largest logits.\"\"\"
                z = np.array(logits, dtype=np.float64)  # a copy: the caller's logits stay
                if temperature == 0:
                    return int(np.argmax(z))
                z /= temperature
                if top_k is not None and top_k < z.size:
                    order = np.argsort(z)[::-1]  # largest first
                    z[order[top_k:]] = -np.inf
                return int(np.argmax(z + rng.gumbel(size=z.size)))
            """)

alternative("sample_next_choice_of_kept", "sample_next",
            """only the kept tokens are candidates: rng.choice among their indices with their renormalised
            probabilities, the top k found by np.argsort of the negated logits""",
            """
            def sample_next(logits, rng, temperature=1.0, top_k=None):
                \"\"\"One token (an int) drawn from softmax(logits / temperature) over the top_k largest logits.\"\"\"
                logits = np.asarray(logits, dtype=np.float64)
                if temperature == 0:
                    return int(np.argmax(logits))
                candidates = np.argsort(-logits, kind="stable")  # every token, largest logit first
                if top_k is not None:
                    candidates = candidates[:top_k]
                z = logits[candidates] / temperature
                w = np.exp(z - z.max())
                return int(rng.choice(candidates, p=w / w.sum()))
            """)

# --------------------------------------------------------------------------------------------------- generate
alternative("generate_while_loop_checked", "generate",
            """a while loop until the list is long enough, the prompt checked (not empty, fits the model's
            positions) before any work, the last new token not fed back (its logits would go unused)""",
            """
            def generate(params, n_heads, prompt, n_new, rng, temperature=1.0, top_k=None):
                \"\"\"The prompt followed by n_new sampled tokens, a list of ints, through model_step's KV cache.\"\"\"
                out = [int(t) for t in prompt]
                T_max = params["P"].shape[0]
                if len(out) == 0 or len(out) + n_new > T_max:
                    raise ValueError(f"a prompt of 1 to {T_max - n_new} tokens is needed, got {len(out)}")
                target = len(out) + n_new
                cache = empty_cache(params, n_heads)
                i = 0  # the next token to feed through model_step
                while len(out) < target or i < len(prompt):
                    logits, cache = model_step(params, n_heads, out[i], cache)
                    i += 1
                    if i == len(out) and len(out) < target:  # the newest token's logits: draw the next one
                        out.append(int(sample_next(logits, rng, temperature, top_k)))
                return out
            """)

alternative("generate_prompt_then_new", "generate",
            """the new tokens collected in a list of their own and returned as prompt + new, sample_next called with
            keyword arguments""",
            """
            def generate(params, n_heads, prompt, n_new, rng, temperature=1.0, top_k=None):
                \"\"\"The prompt followed by n_new sampled tokens, a list of ints, through model_step's KV cache.\"\"\"
                prompt = list(map(int, prompt))
                if not prompt:
                    raise ValueError("the prompt needs at least one token")
                if len(prompt) + n_new > len(params["P"]):
                    raise ValueError(f"{len(prompt)} + {n_new} tokens do not fit {len(params['P'])} positions")
                cache = empty_cache(params, n_heads)
                for token in prompt:
                    logits, cache = model_step(params, n_heads, token, cache)
                new = []
                for _ in range(n_new):
                    token = sample_next(logits, rng, temperature=temperature, top_k=top_k)
                    new.append(int(token))
                    logits, cache = model_step(params, n_heads, token, cache)
                return prompt + new
            """)

# ------------------------------------------------------------------------------------------------ ablate_head
alternative("ablate_head_reshape_heads", "ablate_head",
            """the last axis viewed as (n_heads, d_head) by reshape, the head's slice set to 0 on a copy, reshaped
            back; a check that raises on a head outside 0 .. n_heads - 1""",
            """
            def ablate_head(heads, n_heads, head):
                \"\"\"A copy of the concatenated heads (..., T, d_model) with head ``head``'s columns set to 0.\"\"\"
                if not 0 <= head < n_heads:
                    raise ValueError(f"head must be in 0 .. {n_heads - 1}, got {head}")
                heads = np.asarray(heads)
                d_model = heads.shape[-1]
                d_head = d_model // n_heads
                split = heads.reshape(*heads.shape[:-1], n_heads, d_head).copy()  # (..., T, n_heads, d_head)
                split[..., head, :] = 0
                return split.reshape(heads.shape)  # (..., T, n_heads, d_head) -> (..., T, d_model)
            """)

alternative("ablate_head_where_mask", "ablate_head",
            """np.where with a boolean mask over the columns (a new array, so the caller's stays), in the input's
            dtype""",
            """
            def ablate_head(heads, n_heads, head):
                \"\"\"A copy of the concatenated heads (..., T, d_model) with head ``head``'s columns set to 0.\"\"\"
                heads = np.asarray(heads)
                d_head = heads.shape[-1] // n_heads
                column_head = np.arange(heads.shape[-1]) // d_head  # (d_model,): which head each column belongs to
                return np.where(column_head == head, 0, heads).astype(heads.dtype)  # (..., T, d_model)
            """)

alternative("ablate_head_split_concat", "ablate_head",
            """the given split_heads and concat_heads: the heads laid out (..., n_heads, T, d_head), one zeroed on a
            copy, concatenated back""",
            """
            def ablate_head(heads, n_heads, head):
                \"\"\"A copy of the concatenated heads (..., T, d_model) with head ``head``'s columns set to 0.\"\"\"
                per_head = np.array(split_heads(heads, n_heads))  # (..., n_heads, T, d_head), a copy
                per_head[..., head, :, :] = 0
                return concat_heads(per_head)  # (..., T, d_model)
            """)

# ---------------------------------------------------------------------------------------------- k_composition
alternative("k_composition_loops", "k_composition",
            """two loops over the heads, each circuit built from its columns and rows, the Frobenius norms as the
            square root of the summed squares""",
            """
            def k_composition(W_Q, W_K, W_V_prev, W_O_prev, n_heads):
                \"\"\"[i, j]: how much head i's keys read what head j of the layer before writes.\"\"\"
                d_head = W_Q.shape[0] // n_heads
                scores = np.zeros((n_heads, n_heads), dtype=np.result_type(W_Q, W_K, W_V_prev, W_O_prev))
                for i in range(n_heads):
                    qi = slice(i * d_head, (i + 1) * d_head)
                    W_QK = W_Q[:, qi] @ W_K[:, qi].T  # (d_model, d_model)
                    for j in range(n_heads):
                        vj = slice(j * d_head, (j + 1) * d_head)
                        W_OV = W_V_prev[:, vj] @ W_O_prev[vj, :]  # (d_model, d_model)
                        both = W_QK @ W_OV.T
                        norms = np.sqrt((W_QK ** 2).sum()) * np.sqrt((W_OV ** 2).sum())
                        scores[i, j] = np.sqrt((both ** 2).sum()) / norms
                return scores
            """)

alternative("k_composition_stacked_einsum", "k_composition",
            """every head's circuits at once: the weights reshaped per head, the QK and OV circuits stacked by
            einsum, the composition of every pair as one (n_heads, n_heads, d_model, d_model) array; a check that
            raises when n_heads does not divide d_model""",
            """
            def k_composition(W_Q, W_K, W_V_prev, W_O_prev, n_heads):
                \"\"\"[i, j]: how much head i's keys read what head j of the layer before writes.\"\"\"
                d_model = W_Q.shape[0]
                if d_model % n_heads:
                    raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
                d_head = d_model // n_heads
                Q = W_Q.reshape(d_model, n_heads, d_head)  # (d_model, n_heads, d_head)
                K = W_K.reshape(d_model, n_heads, d_head)  # (d_model, n_heads, d_head)
                V = W_V_prev.reshape(d_model, n_heads, d_head)  # (d_model, n_heads, d_head)
                O = W_O_prev.reshape(n_heads, d_head, d_model)  # (n_heads, d_head, d_model)
                QK = np.einsum("ahe,bhe->hab", Q, K)  # (n_heads, d_model, d_model): W_Q^h W_K^h^T
                OV = np.einsum("ahe,heb->hab", V, O)  # (n_heads, d_model, d_model): W_V^h W_O^h
                both = np.einsum("iab,jcb->ijac", QK, OV)  # (n_heads, n_heads, d_model, d_model): QK_i OV_j^T
                norm_qk = np.sqrt(np.einsum("hab,hab->h", QK, QK))  # (n_heads,)
                norm_ov = np.sqrt(np.einsum("hab,hab->h", OV, OV))  # (n_heads,)
                return np.sqrt(np.einsum("ijac,ijac->ij", both, both)) / (norm_qk[:, None] * norm_ov[None, :])
            """)

alternative("k_composition_small_traces_float64", "k_composition",
            """never a d_model x d_model matrix: with W_QK = q k^T and W_OV = v o^T every squared Frobenius norm is a
            trace of d_head x d_head products (||q M v^T||^2 = tr(q^T q M v^T v M^T), M = k^T o^T); float64
            inside, the scores cast back""",
            """
            def k_composition(W_Q, W_K, W_V_prev, W_O_prev, n_heads):
                \"\"\"[i, j]: how much head i's keys read what head j of the layer before writes.\"\"\"
                dtype = np.result_type(W_Q, W_K, W_V_prev, W_O_prev)
                W_Q, W_K, W_V, W_O = (np.asarray(W, dtype=np.float64) for W in (W_Q, W_K, W_V_prev, W_O_prev))
                d_head = W_Q.shape[0] // n_heads
                head = [slice(h * d_head, (h + 1) * d_head) for h in range(n_heads)]
                scores = np.empty((n_heads, n_heads))
                for i, ci in enumerate(head):
                    q, k = W_Q[:, ci], W_K[:, ci]  # (d_model, d_head) each
                    qq, kk = q.T @ q, k.T @ k  # (d_head, d_head) Gram matrices
                    qk_sq = np.trace(qq @ kk)  # ||q k^T||_F^2
                    for j, cj in enumerate(head):
                        v, o = W_V[:, cj], W_O[cj, :]  # (d_model, d_head), (d_head, d_model)
                        vv, oo = v.T @ v, o @ o.T  # (d_head, d_head)
                        M = k.T @ o.T  # (d_head, d_head): k^T o^T, o^T being (d_model, d_head)
                        both_sq = np.trace(qq @ M @ vv @ M.T)  # ||q k^T o v^T||_F^2 = ||W_QK W_OV^T||_F^2
                        scores[i, j] = math.sqrt(max(both_sq, 0.0) / (qk_sq * np.trace(vv @ oo)))
                return scores.astype(dtype)
            """)

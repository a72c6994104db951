"""Correct alternatives of lesson 05: the sizes, split and merge, head weights, the layer from raw operations and
the two find-the-bug exercises, fixed."""

from autograder.alternatives import declarer

alternative = declarer(__name__)

# ----------------------------------------------------------------------------------------------------- sizes
alternative("d_head_1024_literal", "answer_d_head_1024",
            """the number itself, worked out on paper""",
            """
            d_head_1024 = None
            d_head_1024 = 64
            """)

alternative("d_head_1024_int_of_division", "answer_d_head_1024",
            """true division made a whole number with int()""",
            """
            d_head_1024 = None
            d_head_1024 = int(1024 / 16)
            """)

alternative("param_count_squares", "answer_param_count_1024",
            """four d_model x d_model matrices in both cases, written as powers""",
            """
            param_count_16_heads = None
            param_count_1_head = None
            param_count_16_heads = 4 * 1024 ** 2  # the heads share the columns: still four 1024 x 1024 matrices
            param_count_1_head = 4 * 1024 ** 2
            """)

alternative("param_count_per_head_sum", "answer_param_count_1024",
            """a sum over the heads of each head's slices, from named sizes, and the single head as the same
            expression with one head""",
            """
            param_count_16_heads = None
            param_count_1_head = None
            d_model = 1024


            def count(n_heads):
                d_head = d_model // n_heads
                per_head = 3 * d_model * d_head  # its slices of W_Q, W_K, W_V
                return sum(per_head for _ in range(n_heads)) + n_heads * d_head * d_model  # + W_O


            param_count_16_heads = count(16)
            param_count_1_head = count(1)
            """)

alternative("d_head_small_literals", "answer_d_head_small",
            """the two numbers themselves""",
            """
            d_model_small = 32
            d_head_2_heads = None
            d_head_8_heads = None
            d_head_2_heads = 16
            d_head_8_heads = 4
            """)

alternative("d_head_small_divmod", "answer_d_head_small",
            """divmod, with an assertion that nothing is left over""",
            """
            d_model_small = 32
            d_head_2_heads = None
            d_head_8_heads = None
            d_head_2_heads, rest_2 = divmod(d_model_small, 2)
            d_head_8_heads, rest_8 = divmod(d_model_small, 8)
            assert rest_2 == rest_8 == 0
            """)

alternative("mc_upper_case", "answer_mc",
            """the letter in upper case""",
            """
            mc_answer = None  # one letter, as a string
            mc_answer = "C"
            """)

alternative("mc_with_space", "answer_mc",
            """the letter with a stray space, as typed""",
            """
            mc_answer = None  # one letter, as a string
            mc_answer = " c"
            """)

# ------------------------------------------------------------------------------------------- split / merge
alternative("split_stack_slices", "split_into_heads",
            """each head's columns sliced out explicitly and the slices stacked on a new head axis""",
            """
            def split_into_heads(x, n_heads):
                \"\"\"(..., T, d_model) -> (..., n_heads, T, d_head); head i holds columns i*d_head:(i+1)*d_head.\"\"\"
                d_head = x.shape[-1] // n_heads
                blocks = [x[..., i * d_head:(i + 1) * d_head] for i in range(n_heads)]  # each (..., T, d_head)
                return np.stack(blocks, axis=-3)  # (..., n_heads, T, d_head)
            """)

alternative("split_moveaxis_checked", "split_into_heads",
            """a check that raises ValueError when d_model does not divide into the heads, the reshape with -1
            for d_head, and moveaxis instead of swapaxes""",
            """
            def split_into_heads(x, n_heads):
                \"\"\"(..., T, d_model) -> (..., n_heads, T, d_head); head i holds columns i*d_head:(i+1)*d_head.\"\"\"
                if n_heads < 1 or x.shape[-1] % n_heads:
                    raise ValueError(f"d_model = {x.shape[-1]} does not divide into {n_heads} heads")
                x = x.reshape(*x.shape[:-1], n_heads, -1)  # (..., T, n_heads, d_head)
                return np.moveaxis(x, -2, -3)  # (..., n_heads, T, d_head)
            """)

alternative("split_transpose_axes", "split_into_heads",
            """a transpose whose axes list is built from the number of dimensions, leading axes left in place""",
            """
            def split_into_heads(x, n_heads):
                \"\"\"(..., T, d_model) -> (..., n_heads, T, d_head); head i holds columns i*d_head:(i+1)*d_head.\"\"\"
                *lead, T, d_model = x.shape
                y = x.reshape(*lead, T, n_heads, d_model // n_heads)  # (..., T, n_heads, d_head)
                n = len(lead)
                return y.transpose(*range(n), n + 1, n, n + 2)  # (..., n_heads, T, d_head)
            """)

alternative("merge_concatenate", "merge_heads",
            """the heads' outputs concatenated side by side along the last axis, head 0 first""",
            """
            def merge_heads(x):
                \"\"\"(..., n_heads, T, d_head) -> (..., T, n_heads * d_head); undoes split_into_heads.\"\"\"
                heads = [x[..., i, :, :] for i in range(x.shape[-3])]  # each (..., T, d_head)
                return np.concatenate(heads, axis=-1)  # (..., T, n_heads * d_head)
            """)

alternative("merge_moveaxis_minus_one", "merge_heads",
            """moveaxis to put the heads after the tokens, a reshape with -1 for the merged width, and a check
            that raises ValueError on an array with no head axis""",
            """
            def merge_heads(x):
                \"\"\"(..., n_heads, T, d_head) -> (..., T, n_heads * d_head); undoes split_into_heads.\"\"\"
                if x.ndim < 3:
                    raise ValueError(f"merge_heads needs (..., n_heads, T, d_head), got shape {x.shape}")
                y = np.moveaxis(x, -3, -2)  # (..., T, n_heads, d_head)
                return y.reshape(*y.shape[:-2], -1)  # (..., T, n_heads * d_head)
            """)

# ------------------------------------------------------------------------------------------- head weights
alternative("head_weights_loop_slices", "head_weights",
            """no split: each head's columns of Q and K sliced in a loop, einsum for its scores, the pasted
            softmax, the heads stacked""",
            """
            def head_weights(x, W_Q, W_K, n_heads):
                \"\"\"Attention weights of every head: x (..., T, d_model) -> (..., n_heads, T, T).\"\"\"
                d_head = x.shape[-1] // n_heads
                Q, K = x @ W_Q, x @ W_K  # each (..., T, d_model)
                per_head = []
                for i in range(n_heads):
                    cols = slice(i * d_head, (i + 1) * d_head)
                    scores = np.einsum("...qd,...kd->...qk", Q[..., cols], K[..., cols])  # (..., T, T)
                    per_head.append(softmax(scores / math.sqrt(d_head), axis=-1))
                return np.stack(per_head, axis=-3)  # (..., n_heads, T, T)
            """)

alternative("head_weights_split_float64_checked", "head_weights",
            """the learner's split_into_heads and softmax, a check that raises ValueError when d_model does not
            divide into the heads, the scores in float64 and the weights cast back to the input's dtype""",
            """
            def head_weights(x, W_Q, W_K, n_heads):
                \"\"\"Attention weights of every head: x (..., T, d_model) -> (..., n_heads, T, T).\"\"\"
                if x.shape[-1] % n_heads:
                    raise ValueError(f"d_model = {x.shape[-1]} does not divide into {n_heads} heads")
                dtype = np.result_type(x, W_Q, W_K)
                x64 = x.astype(np.float64)
                Q = split_into_heads(x64 @ W_Q.astype(np.float64), n_heads)  # (..., n_heads, T, d_head)
                K = split_into_heads(x64 @ W_K.astype(np.float64), n_heads)  # (..., n_heads, T, d_head)
                scores = np.matmul(Q, np.moveaxis(K, -1, -2)) / math.sqrt(Q.shape[-1])  # (..., n_heads, T, T)
                return softmax(scores, axis=-1).astype(dtype)
            """)

# ---------------------------------------------------------------------------------- mha from raw operations
alternative("mha_reuses_head_weights", "mha_from_scratch",
            """the learner's head_weights for the weights, split_into_heads for V and merge_heads before W_O""",
            """
            def mha_from_scratch(x, W_Q, W_K, W_V, W_O, n_heads):
                \"\"\"Multi-head self-attention. x (..., T, d_model) -> (out (..., T, d_model), weights (..., n_heads, T, T)).\"\"\"
                weights = head_weights(x, W_Q, W_K, n_heads)  # (..., n_heads, T, T)
                V = split_into_heads(x @ W_V, n_heads)  # (..., n_heads, T, d_head)
                heads = weights @ V  # (..., n_heads, T, d_head)
                return merge_heads(heads) @ W_O, weights  # (..., T, d_model), (..., n_heads, T, T)
            """)

alternative("mha_loop_over_heads", "mha_from_scratch",
            """one head at a time on its slices of W_Q, W_K, W_V, einsum for the products, the pasted softmax,
            the heads concatenated and W_O applied as a sum of per-head blocks""",
            """
            def mha_from_scratch(x, W_Q, W_K, W_V, W_O, n_heads):
                \"\"\"Multi-head self-attention. x (..., T, d_model) -> (out (..., T, d_model), weights (..., n_heads, T, T)).\"\"\"
                d_head = x.shape[-1] // n_heads
                out, all_weights = 0, []
                for i in range(n_heads):
                    cols = slice(i * d_head, (i + 1) * d_head)
                    q, k, v = x @ W_Q[:, cols], x @ W_K[:, cols], x @ W_V[:, cols]  # each (..., T, d_head)
                    scores = np.einsum("...qd,...kd->...qk", q, k) / math.sqrt(d_head)  # (..., T, T)
                    w = softmax(scores, axis=-1)  # (..., T, T)
                    out = out + np.einsum("...qk,...kd->...qd", w, v) @ W_O[cols, :]  # (..., T, d_model)
                    all_weights.append(w)
                return out, np.stack(all_weights, axis=-3)  # (..., T, d_model), (..., n_heads, T, T)
            """)

alternative("mha_reuses_masked_attention", "mha_from_scratch",
            """the learner's split_into_heads, its fixed masked_attention with a mask that blocks nothing (the
            lesson lists masked_attention among the functions to use), and merge_heads""",
            """
            def mha_from_scratch(x, W_Q, W_K, W_V, W_O, n_heads):
                \"\"\"Multi-head self-attention. x (..., T, d_model) -> (out (..., T, d_model), weights (..., n_heads, T, T)).\"\"\"
                T = x.shape[-2]
                Q = split_into_heads(x @ W_Q, n_heads)  # (..., n_heads, T, d_head)
                K = split_into_heads(x @ W_K, n_heads)  # (..., n_heads, T, d_head)
                V = split_into_heads(x @ W_V, n_heads)  # (..., n_heads, T, d_head)
                heads, weights = masked_attention(Q, K, V, np.zeros((T, T), dtype=bool))  # nothing blocked
                return merge_heads(heads) @ W_O, weights  # (..., T, d_model), (..., n_heads, T, T)
            """)

# ----------------------------------------------------------------------------------- find the bug: the mask
alternative("masked_einsum_broadcast", "masked_attention",
            """einsum for both products, the scale applied to Q, the mask broadcast to the scores' shape before
            np.where, the pasted softmax""",
            """
            def masked_attention(Q, K, V, mask):
                \"\"\"softmax(Q K^T / sqrt(d_k)) V, blocked pairs (mask True) weighted 0. Returns (out, weights).\"\"\"
                scores = np.einsum("...qd,...kd->...qk", Q / math.sqrt(Q.shape[-1]), K)  # (..., T_q, T_k)
                scores = np.where(np.broadcast_to(mask, scores.shape), -np.inf, scores)  # blocked before softmax
                weights = softmax(scores, axis=-1)  # (..., T_q, T_k); all blocked: zeros
                return np.einsum("...qk,...kv->...qv", weights, V), weights  # (..., T_q, d_v), (..., T_q, T_k)
            """)

alternative("masked_exp_zeroed_renormalised", "masked_attention",
            """fixed without softmax's -inf: exp of the shifted scores with the blocked pairs set to 0 before the
            normalisation (the row maximum taken over the open keys), a row with every key blocked left at zero""",
            """
            def masked_attention(Q, K, V, mask):
                \"\"\"softmax(Q K^T / sqrt(d_k)) V, blocked pairs (mask True) weighted 0. Returns (out, weights).\"\"\"
                scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])  # (..., T_q, T_k)
                open_ = ~np.broadcast_to(mask, scores.shape)  # (..., T_q, T_k): True where a key may be read
                row_max = np.max(np.where(open_, scores, -np.inf), axis=-1, keepdims=True)
                row_max = np.where(np.isfinite(row_max), row_max, 0).astype(scores.dtype)
                e = np.where(open_, np.exp(scores - row_max), 0).astype(scores.dtype)  # blocked: 0 before normalising
                total = e.sum(axis=-1, keepdims=True)
                weights = e / np.where(total > 0, total, 1)  # every key blocked: the row stays 0
                return weights @ V, weights  # (..., T_q, d_v), (..., T_q, T_k)
            """)

# ----------------------------------------------------------------------------------- find the bug: the layer
alternative("layer_split_calls_split_into_heads", "attention_layer",
            """the given layer with its split line replaced by a call to the learner's own split_into_heads and its
            merge by merge_heads, as the exercise suggests (compare with your own functions); the rest as given""",
            '''
            def attention_layer(x, W_Q, W_K, W_V, W_O, n_heads):
                """Multi-head self-attention: x (..., T, d_model) -> (out (..., T, d_model), weights (..., n_heads, T, T))."""
                *lead, T, d_model = x.shape
                d_head = d_model // n_heads

                def split(y):  # (..., T, d_model) -> (..., n_heads, T, d_head)
                    return split_into_heads(y, n_heads)

                Q, K, V = split(x @ W_Q), split(x @ W_K), split(x @ W_V)  # each (..., n_heads, T, d_head)
                scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)  # (..., n_heads, T, T)
                e = np.exp(scores - scores.max(axis=-1, keepdims=True))  # a stable softmax over the keys
                weights = e / e.sum(axis=-1, keepdims=True)  # (..., n_heads, T, T)
                heads = weights @ V  # (..., n_heads, T, d_head)
                merged = merge_heads(heads)  # (..., T, n_heads * d_head)
                return merged @ W_O, weights
            ''')

alternative("layer_split_reshape_moveaxis", "attention_layer",
            """the smallest fix in place: the split's reshape put in the order (T, n_heads, d_head) and its
            moveaxis adjusted to bring the heads in front; everything else as given""",
            '''
            def attention_layer(x, W_Q, W_K, W_V, W_O, n_heads):
                """Multi-head self-attention: x (..., T, d_model) -> (out (..., T, d_model), weights (..., n_heads, T, T))."""
                *lead, T, d_model = x.shape
                d_head = d_model // n_heads

                def split(y):  # (..., T, d_model) -> (..., T, n_heads, d_head) -> (..., n_heads, T, d_head)
                    return np.moveaxis(y.reshape(*lead, T, n_heads, d_head), -2, -3)

                Q, K, V = split(x @ W_Q), split(x @ W_K), split(x @ W_V)  # each (..., n_heads, T, d_head)
                scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)  # (..., n_heads, T, T)
                e = np.exp(scores - scores.max(axis=-1, keepdims=True))  # a stable softmax over the keys
                weights = e / e.sum(axis=-1, keepdims=True)  # (..., n_heads, T, T)
                heads = weights @ V  # (..., n_heads, T, d_head)
                merged = np.swapaxes(heads, -3, -2).reshape(*lead, T, d_model)  # (..., T, n_heads * d_head)
                return merged @ W_O, weights
            ''')

alternative("layer_split_stack_softmax", "attention_layer",
            """the split rewritten as a stack of each head's column slices, and the pasted softmax in place of
            the inline one""",
            '''
            def attention_layer(x, W_Q, W_K, W_V, W_O, n_heads):
                """Multi-head self-attention: x (..., T, d_model) -> (out (..., T, d_model), weights (..., n_heads, T, T))."""
                *lead, T, d_model = x.shape
                d_head = d_model // n_heads

                def split(y):  # (..., T, d_model) -> (..., n_heads, T, d_head): head i gets columns i*d_head:(i+1)*d_head
                    return np.stack([y[..., i * d_head:(i + 1) * d_head] for i in range(n_heads)], axis=-3)

                Q, K, V = split(x @ W_Q), split(x @ W_K), split(x @ W_V)  # each (..., n_heads, T, d_head)
                scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)  # (..., n_heads, T, T)
                weights = softmax(scores, axis=-1)  # (..., n_heads, T, T)
                heads = weights @ V  # (..., n_heads, T, d_head)
                merged = np.swapaxes(heads, -3, -2).reshape(*lead, T, d_model)  # (..., T, n_heads * d_head)
                return merged @ W_O, weights
            ''')

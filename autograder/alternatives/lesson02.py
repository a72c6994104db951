"""Correct alternatives of lesson 02: split_heads, concat_heads, output_projection, multi_head_attention."""

from autograder.alternatives import declarer

alternative = declarer(__name__)

alternative("split_heads_moveaxis", "split_heads",
            """reshape with -1 for the head width, then np.moveaxis of the head axis in front of time""",
            """
            def split_heads(x, n_heads):
                grouped = x.reshape(x.shape[:-1] + (n_heads, -1))  # (..., T, n_heads, d_head)
                return np.moveaxis(grouped, -2, -3)  # (..., n_heads, T, d_head)
            """)

alternative("concat_heads_concatenate", "concat_heads",
            """the heads joined side by side with np.concatenate along the last axis""",
            """
            def concat_heads(x):
                n_heads = x.shape[-3]
                return np.concatenate([x[..., h, :, :] for h in range(n_heads)], axis=-1)  # (..., T, n_heads*d_head)
            """)

alternative("concat_heads_transpose_axes", "concat_heads",
            """np.transpose with an axis order built from ndim, then a reshape with -1""",
            """
            def concat_heads(x):
                order = list(range(x.ndim - 3)) + [x.ndim - 2, x.ndim - 3, x.ndim - 1]
                tokens_first = np.transpose(x, order)  # (..., T, n_heads, d_head)
                return tokens_first.reshape(tokens_first.shape[:-2] + (-1,))  # (..., T, d_model)
            """)

alternative("output_projection_sum_of_head_blocks", "output_projection",
            """the sum over heads of each head times its own rows of W_O, the map lesson 02 derives (no
            concatenation)""",
            """
            def output_projection(heads, W_O):
                n_heads, d_head = heads.shape[-3], heads.shape[-1]
                blocks = W_O.reshape(n_heads, d_head, W_O.shape[-1])  # (n_heads, d_head, d_model)
                total = heads[..., 0, :, :] @ blocks[0]
                for h in range(1, n_heads):
                    total = total + heads[..., h, :, :] @ blocks[h]  # (..., T, d_model)
                return total
            """)

alternative("output_projection_einsum_float64", "output_projection",
            """one einsum over heads and head columns, computed in float64 and returned in the input's dtype""",
            """
            def output_projection(heads, W_O):
                n_heads, d_head = heads.shape[-3], heads.shape[-1]
                blocks = W_O.reshape(n_heads, d_head, -1).astype(np.float64)  # (n_heads, d_head, d_model)
                out = np.einsum("...htd,hdm->...tm", heads.astype(np.float64), blocks)  # (..., T, d_model)
                return out.astype(np.result_type(heads, W_O))
            """)

alternative("mha_loop_over_heads_stacked", "multi_head_attention",
            """a loop over heads on column slices of the projections, the mask taken head by head, calling the
            lesson's attention once per head, then the heads stacked and handed to output_projection""",
            """
            def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
                d_head = W_Q.shape[1] // n_heads
                Q, K, V = x @ W_Q, x @ W_K, x @ W_V  # (..., T, d_model) each
                T = x.shape[-2]
                if mask is not None:  # one (..., T, T) mask per head: the mask broadcast over the heads' axis
                    mask = np.broadcast_to(mask, np.broadcast_shapes(mask.shape, x.shape[:-2] + (n_heads, T, T)))
                outs, weights = [], []
                for h in range(n_heads):
                    cols = slice(h * d_head, (h + 1) * d_head)
                    m = None if mask is None else mask[..., h, :, :]  # (..., T, T)
                    o, w = scaled_dot_product_attention(Q[..., cols], K[..., cols], V[..., cols], mask=m)
                    outs.append(o)  # (..., T, d_head)
                    weights.append(w)  # (..., T, T)
                heads = np.stack(outs, axis=-3)  # (..., n_heads, T, d_head)
                return output_projection(heads, W_O), np.stack(weights, axis=-3)
            """)

alternative("mha_einsum_checked", "multi_head_attention",
            """every product an einsum, the mask broadcast over the heads, and a check that raises when
            n_heads does not divide d_model""",
            """
            def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
                d_model = W_Q.shape[1]
                if d_model % n_heads:
                    raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
                Q, K, V = (split_heads(x @ W, n_heads) for W in (W_Q, W_K, W_V))  # (..., n_heads, T, d_head)
                scores = np.einsum("...qd,...kd->...qk", Q, K) / math.sqrt(Q.shape[-1])  # (..., n_heads, T, T)
                if mask is not None:
                    scores = np.where(mask, -np.inf, scores)
                weights = softmax(scores, axis=-1)  # (..., n_heads, T, T)
                heads = np.einsum("...qk,...kd->...qd", weights, V)  # (..., n_heads, T, d_head)
                return concat_heads(heads) @ W_O, weights
            """)

alternative("split_heads_transpose_axes", "split_heads",
            """np.transpose with an explicit permutation built from the reshaped array's ndim (the leading axes
            kept in place, the last three permuted), and a check that raises ValueError""",
            """
            def split_heads(x, n_heads):
                d_model = x.shape[-1]
                if d_model % n_heads:
                    raise ValueError("n_heads must divide d_model")
                pieces = x.reshape(*x.shape[:-1], n_heads, d_model // n_heads)  # (..., T, n_heads, d_head)
                n = pieces.ndim
                order = [*range(n - 3), n - 2, n - 3, n - 1]  # leading axes, then n_heads, T, d_head
                return np.transpose(pieces, order)  # (..., n_heads, T, d_head)
            """)

alternative("concat_heads_moveaxis_checked", "concat_heads",
            """a check that raises ValueError on input without the three (n_heads, T, d_head) axes, np.moveaxis
            back, and a reshape that keeps the leading shape and merges the last two axes""",
            """
            def concat_heads(x):
                if x.ndim < 3:
                    raise ValueError(f"expected (..., n_heads, T, d_head), got shape {x.shape}")
                tokens_first = np.moveaxis(x, -3, -2)  # (..., T, n_heads, d_head)
                return tokens_first.reshape(*tokens_first.shape[:-2], -1)  # (..., T, n_heads * d_head)
            """)

alternative("output_projection_sum_of_row_slices", "output_projection",
            """no concatenation: the sum over heads of head_i @ W_O[i*d_head:(i+1)*d_head] (the map section 5
            derives), W_O sliced by rows, accumulated from a zero array of the inputs' dtype, with a check on
            W_O's rows""",
            """
            def output_projection(heads, W_O):
                *lead, n_heads, T, d_head = heads.shape
                if W_O.shape[0] != n_heads * d_head:
                    raise ValueError(f"W_O needs n_heads * d_head = {n_heads * d_head} rows, has {W_O.shape[0]}")
                out = np.zeros((*lead, T, W_O.shape[1]), dtype=np.result_type(heads, W_O))  # (..., T, d_model)
                for i in range(n_heads):
                    W_O_i = W_O[i * d_head:(i + 1) * d_head, :]  # (d_head, d_model): the rows that read head i
                    out = out + heads[..., i, :, :] @ W_O_i  # (..., T, d_model)
                return out
            """)

alternative("output_projection_einsum_per_head", "output_projection",
            """W_O reshaped to (n_heads, d_head, d_model) and the sum over heads and head columns taken by one
            einsum in the inputs' own dtype, as the cell after the lesson's exercise writes it""",
            """
            def output_projection(heads, W_O):
                n_heads, d_head = heads.shape[-3], heads.shape[-1]
                W_O_per_head = W_O.reshape(n_heads, d_head, W_O.shape[-1])  # (n_heads, d_head, d_model)
                return np.einsum("...htd,hdm->...tm", heads, W_O_per_head)  # (..., T, d_model)
            """)

alternative("output_projection_float64_matmul", "output_projection",
            """the learner's concat_heads, the product computed in float64 with np.matmul, the result cast back
            to the inputs' dtype (float32 stays float32, float64 stays float64)""",
            """
            def output_projection(heads, W_O):
                dtype = np.result_type(heads, W_O)
                joined = concat_heads(heads).astype(np.float64)  # (..., T, n_heads*d_head)
                return np.matmul(joined, W_O.astype(np.float64)).astype(dtype)  # (..., T, d_model)
            """)

alternative("mha_loop_over_heads_summed", "multi_head_attention",
            """a loop over heads projecting x with each head's own column slices of W_Q, W_K, W_V, the mask
            broadcast to every head first, the learner's attention once per head, the weights stacked on the
            heads axis and the output as the sum of head_i @ W_O's row block (no output_projection)""",
            """
            def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
                *lead, T, d_model = x.shape
                d_head = d_model // n_heads
                if mask is not None:
                    mask = np.broadcast_to(mask, (*lead, n_heads, T, T))  # one (T, T) mask per head
                outs, weights = [], []
                for i in range(n_heads):
                    cols = slice(i * d_head, (i + 1) * d_head)  # head i's columns
                    head_mask = None if mask is None else mask[..., i, :, :]  # (..., T, T)
                    head, w = scaled_dot_product_attention(x @ W_Q[:, cols], x @ W_K[:, cols], x @ W_V[:, cols],
                                                           mask=head_mask)  # (..., T, d_head), (..., T, T)
                    outs.append(head @ W_O[cols, :])  # (..., T, d_model): head i's contribution
                    weights.append(w)
                return sum(outs[1:], outs[0]), np.stack(weights, axis=-3)  # (..., T, d_model), (..., n_heads, T, T)
            """)

alternative("mha_einsum_float64_inside", "multi_head_attention",
            """the projections by einsum in float64 with the weights reshaped per head (no split_heads), the
            learner's softmax on masked scores, the output through the learner's output_projection, both
            results cast back to the inputs' dtype""",
            """
            def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
                dtype = np.result_type(x, W_Q, W_K, W_V, W_O)
                d_model = x.shape[-1]
                if d_model % n_heads:
                    raise ValueError("n_heads must divide d_model")
                d_head = d_model // n_heads
                x64 = x.astype(np.float64)
                per_head = [W.astype(np.float64).reshape(d_model, n_heads, d_head) for W in (W_Q, W_K, W_V)]
                Q, K, V = (np.einsum("...tm,mhd->...htd", x64, W) for W in per_head)  # each (..., n_heads, T, d_head)
                scores = np.einsum("...qd,...kd->...qk", Q, K) / math.sqrt(d_head)  # (..., n_heads, T, T)
                if mask is not None:
                    scores = np.where(mask, -np.inf, scores)  # a (T, T) mask broadcasts to every head
                weights = softmax(scores, axis=-1)  # (..., n_heads, T, T)
                heads = weights @ V  # (..., n_heads, T, d_head)
                out = output_projection(heads, W_O.astype(np.float64))  # (..., T, d_model)
                return out.astype(dtype), weights.astype(dtype)
            """)

alternative("mha_fused_qkv_helpers", "multi_head_attention",
            """W_Q, W_K, W_V fused into one (d_model, 3*d_model) matrix and x projected once, the result cut with
            np.split, then the learner's split_heads, attention and concat_heads and a plain matmul by W_O""",
            """
            def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
                W_QKV = np.concatenate([W_Q, W_K, W_V], axis=1)  # (d_model, 3*d_model): columns [Q | K | V]
                q, k, v = np.split(x @ W_QKV, 3, axis=-1)  # each (..., T, d_model)
                Q, K, V = (split_heads(p, n_heads) for p in (q, k, v))  # each (..., n_heads, T, d_head)
                heads, weights = scaled_dot_product_attention(Q, K, V, mask)  # (..., n_heads, T, d_head), (..., n_heads, T, T)
                return concat_heads(heads) @ W_O, weights  # (..., T, d_model), (..., n_heads, T, T)
            """)

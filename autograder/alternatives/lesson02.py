"""Correct alternatives of lesson 02: split_heads, concat_heads, output_projection, multi_head_attention."""

from autograder.alternatives import declarer

alternative = declarer(__name__)

alternative("split_heads_stacked_slices", "split_heads",
            """each head's columns sliced out and stacked on a new axis before the time axis, with a check that
            raises when n_heads does not divide d_model""",
            """
            def split_heads(x, n_heads):
                d_model = x.shape[-1]
                if n_heads <= 0 or d_model % n_heads:
                    raise ValueError(f"{n_heads} heads cannot share {d_model} columns equally")
                d_head = d_model // n_heads
                return np.stack([x[..., h * d_head:(h + 1) * d_head] for h in range(n_heads)],
                                axis=-3)  # (..., n_heads, T, d_head)
            """)

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

alternative("mha_loop_over_heads", "multi_head_attention",
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

"""Correct alternatives of lesson 01: softmax and scaled dot-product attention."""

from autograder.alternatives import declarer

alternative = declarer(__name__)

alternative("softmax_moveaxis_loop", "softmax",
            """the axis moved last, each row's finite maximum subtracted in a loop, a row with nothing finite left
            at zero""",
            """
            def softmax(x, axis=-1):
                moved = np.moveaxis(np.asarray(x, dtype=float), axis, -1)  # (..., n): the axis last
                out = np.zeros_like(moved)
                for index in np.ndindex(moved.shape[:-1]):
                    row = moved[index]
                    if not np.isfinite(row).any():
                        continue  # every score blocked: weights 0
                    shifted = np.exp(row - row[np.isfinite(row)].max())
                    out[index] = shifted / shifted.sum()
                return np.moveaxis(out, -1, axis).astype(np.result_type(x, np.float32))
            """)

alternative("softmax_logsumexp_checked", "softmax",
            """log-sum-exp with the maximum taken where finite, and a check that raises on an axis x does not
            have""",
            """
            def softmax(x, axis=-1):
                x = np.asarray(x)
                if not -x.ndim <= axis < x.ndim:
                    raise ValueError(f"axis {axis} is out of range for an array of {x.ndim} dimensions")
                finite_max = np.max(np.where(np.isfinite(x), x, -np.inf), axis=axis, keepdims=True)
                finite_max = np.where(np.isfinite(finite_max), finite_max, 0.0)
                e = np.exp(x - finite_max)
                total = e.sum(axis=axis, keepdims=True)
                with np.errstate(divide="ignore", invalid="ignore"):
                    return np.where(total > 0, e / total, 0.0).astype(e.dtype)
            """)

alternative("attention_einsum", "scaled_dot_product_attention",
            """einsum for both products, the scale as a power of d_k, the mask broadcast to the scores' shape""",
            """
            def scaled_dot_product_attention(Q, K, V, mask=None):
                scores = np.einsum("...qd,...kd->...qk", Q, K) * Q.shape[-1] ** -0.5  # (..., T_q, T_k)
                if mask is not None:
                    scores = np.where(np.broadcast_to(mask, scores.shape), -np.inf, scores)
                weights = softmax(scores, axis=-1)  # (..., T_q, T_k)
                return np.einsum("...qk,...kv->...qv", weights, V), weights  # (..., T_q, d_v), (..., T_q, T_k)
            """)

alternative("attention_transpose_checked", "scaled_dot_product_attention",
            """K transposed with swapaxes through matmul, the scale applied to Q first, and checks that raise
            when the shapes cannot be attention's""",
            """
            def scaled_dot_product_attention(Q, K, V, mask=None):
                if Q.shape[-1] != K.shape[-1]:
                    raise ValueError("queries and keys need the same width d_k")
                if K.shape[-2] != V.shape[-2]:
                    raise ValueError("every key needs a value: K and V need the same number of positions")
                scaled_q = Q / math.sqrt(K.shape[-1])
                scores = np.matmul(scaled_q, K.swapaxes(-1, -2))  # (..., T_q, T_k)
                if mask is not None:
                    scores = np.where(mask, -np.inf, scores)
                weights = softmax(scores, -1)  # (..., T_q, T_k)
                return np.matmul(weights, V), weights  # (..., T_q, d_v), (..., T_q, T_k)
            """)

"""Correct alternatives of lesson 04: the dot-product experiment and the per-head scaled scores."""

from autograder.alternatives import declarer

alternative = declarer(__name__)

alternative("std_einsum_one_draw", "dot_product_std",
            """q and k drawn together in one (2, n_samples, d_k) array, each pair's dot product by einsum, the
            scale applied to q before the product, the standard deviation written out as the root mean square
            deviation""",
            """
            def dot_product_std(d_k, n_samples, scaled, rng):
                q, k = rng.standard_normal((2, n_samples, d_k))  # each (n_samples, d_k): one q and one k per pair
                if scaled:
                    q = q / math.sqrt(d_k)  # the same as dividing every q.k by sqrt(d_k)
                dots = np.einsum("nd,nd->n", q, k)  # (n_samples,): one q.k per pair
                return math.sqrt(float(np.mean((dots - dots.mean()) ** 2)))
            """)

alternative("std_loop_over_width_checked", "dot_product_std",
            """checks that raise ValueError on a width or a sample count the experiment cannot use, the dot
            products accumulated by a loop over the d_k columns, the sample standard deviation (ddof=1)""",
            """
            def dot_product_std(d_k, n_samples, scaled, rng):
                if d_k < 1 or n_samples < 2:
                    raise ValueError("the experiment needs d_k >= 1 and at least two samples")
                q = rng.standard_normal((n_samples, d_k))  # (n_samples, d_k)
                k = rng.standard_normal((n_samples, d_k))  # (n_samples, d_k)
                dots = np.zeros(n_samples)  # (n_samples,)
                for i in range(d_k):  # add the i-th product of every pair
                    dots += q[:, i] * k[:, i]
                scale = math.sqrt(d_k) if scaled else 1.0
                return float(np.std(dots / scale, ddof=1))
            """)

alternative("std_generator_per_pair", "dot_product_std",
            """one pair at a time in a Python loop, each q and k drawn from rng as its own vector, the dot
            products collected in a list""",
            """
            def dot_product_std(d_k, n_samples, scaled, rng):
                dots = []
                for _ in range(n_samples):
                    q = rng.standard_normal(d_k)  # (d_k,)
                    k = rng.standard_normal(d_k)  # (d_k,)
                    dots.append(float(q @ k) / (math.sqrt(d_k) if scaled else 1.0))
                return float(np.std(np.array(dots)))
            """)

alternative("scores_einsum_no_split", "multi_head_scores",
            """the heads kept as a middle axis after one reshape, no transpose, and one einsum that puts the head
            axis in front while it takes every head's products""",
            """
            def multi_head_scores(x, W_Q, W_K, n_heads):
                *lead, T, d_model = x.shape
                d_head = d_model // n_heads
                Q = (x @ W_Q).reshape(*lead, T, n_heads, d_head)  # (..., T, n_heads, d_head)
                K = (x @ W_K).reshape(*lead, T, n_heads, d_head)  # (..., T, n_heads, d_head)
                scores = np.einsum("...qhd,...khd->...hqk", Q, K)  # (..., n_heads, T, T)
                return scores / math.sqrt(d_head)
            """)

alternative("scores_split_heads_loop_checked", "multi_head_scores",
            """the given split_heads, a check that raises ValueError when d_model does not divide into heads, Q
            scaled first, one head at a time in a loop with matmul and swapaxes, the heads stacked""",
            """
            def multi_head_scores(x, W_Q, W_K, n_heads):
                d_model = x.shape[-1]
                if n_heads < 1 or d_model % n_heads:
                    raise ValueError(f"d_model = {d_model} does not divide into {n_heads} heads")
                d_head = d_model // n_heads
                Q = split_heads(x @ W_Q, n_heads) / math.sqrt(d_head)  # (..., n_heads, T, d_head)
                K = split_heads(x @ W_K, n_heads)  # (..., n_heads, T, d_head)
                per_head = [Q[..., h, :, :] @ np.swapaxes(K[..., h, :, :], -1, -2)  # each (..., T, T)
                            for h in range(n_heads)]
                return np.stack(per_head, axis=-3)  # (..., n_heads, T, T)
            """)

alternative("scores_float64_inside", "multi_head_scores",
            """the given split_heads with the head axis moved by transpose of the last two, the product computed
            in float64 and cast back to the inputs' dtype""",
            """
            def multi_head_scores(x, W_Q, W_K, n_heads):
                dtype = np.result_type(x, W_Q, W_K)
                d_head = x.shape[-1] // n_heads
                Q = split_heads(x.astype(np.float64) @ W_Q.astype(np.float64), n_heads)  # (..., n_heads, T, d_head)
                K = split_heads(x.astype(np.float64) @ W_K.astype(np.float64), n_heads)  # (..., n_heads, T, d_head)
                K_T = np.moveaxis(K, -1, -2)  # (..., n_heads, d_head, T)
                return (np.matmul(Q, K_T) / math.sqrt(d_head)).astype(dtype)  # (..., n_heads, T, T)
            """)

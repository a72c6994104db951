"""Correct alternatives of lesson 03: parameter counts and the KV cache's bytes."""

from autograder.alternatives import declarer

alternative = declarer(__name__)

alternative("mha_count_per_head_sum", "mha_param_count",
            """the count summed head by head (each head's (d_model, d_head) slice of W_Q, W_K, W_V, and its rows
            of W_O), with a check""",
            """
            def mha_param_count(d_model, n_heads, bias=False):
                if n_heads <= 0 or d_model % n_heads:
                    raise ValueError("n_heads must divide d_model")
                d_head = d_model // n_heads
                per_head = 3 * d_model * d_head + d_head * d_model  # its Q, K, V columns and its rows of W_O
                return n_heads * per_head + (4 * d_model if bias else 0)
            """)

alternative("mha_count_matrix_shapes", "mha_param_count",
            """the sizes of the four weight matrices (and bias vectors) listed and summed, after the lesson's
            check""",
            """
            import math


            def mha_param_count(d_model, n_heads, bias=False):
                if d_model % n_heads != 0:
                    raise ValueError(f"{n_heads} heads cannot split {d_model} columns equally")
                shapes = [(d_model, d_model)] * 4  # W_Q, W_K, W_V, W_O
                if bias:
                    shapes += [(d_model,)] * 4
                return int(sum(math.prod(s) for s in shapes))
            """)

alternative("exercise_512_literals", "exercise_512",
            """the sizes written out by hand: 64 columns a head, 4 * 512^2 for any head count""",
            """
            def exercise_512():
                return 64, 4 * 512 * 512, 4 * 512 ** 2
            """)

alternative("exercise_512_divmod", "exercise_512",
            """divmod for the head width with a check, the counts from the learner's own function""",
            """
            def exercise_512():
                d_head, left = divmod(512, 8)
                assert left == 0
                return d_head, mha_param_count(d_model=512, n_heads=8), mha_param_count(d_model=512, n_heads=1)
            """)

alternative("gqa_count_by_parts", "gqa_param_count",
            """W_Q and W_O from the learner's MHA count, W_K and W_V from the KV heads' width""",
            """
            def gqa_param_count(d_model, n_heads, n_kv_heads, bias=False):
                if n_heads % n_kv_heads:
                    raise ValueError("each KV head serves a whole group of query heads")
                d_kv = n_kv_heads * d_model // n_heads
                q_and_o = mha_param_count(d_model, n_heads, bias) // 2  # half of the four matrices and biases
                return q_and_o + 2 * (d_model * d_kv + (d_kv if bias else 0))
            """)

alternative("gqa_count_groups", "gqa_param_count",
            """the count written with the group size n_heads / n_kv_heads""",
            """
            def gqa_param_count(d_model, n_heads, n_kv_heads, bias=False):
                group = n_heads // n_kv_heads
                d_kv = d_model // group  # the K and V projections are group times narrower
                weights = 2 * d_model ** 2 + 2 * d_model * d_kv
                return weights + (2 * (d_model + d_kv) if bias else 0)
            """)

alternative("kv_bytes_explicit", "kv_cache_bytes_per_token",
            """keys and values counted separately, then times the bytes per number""",
            """
            def kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_value=2):
                keys = n_layers * n_kv_heads * d_head
                values = n_layers * n_kv_heads * d_head
                return (keys + values) * bytes_per_value
            """)

alternative("kv_bytes_product", "kv_cache_bytes_per_token",
            """one product of every factor with math.prod and a check on the sizes""",
            """
            import math


            def kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_value=2):
                if min(n_layers, n_kv_heads, d_head, bytes_per_value) <= 0:
                    raise ValueError("every size must be positive")
                return math.prod((2, n_layers, n_kv_heads, d_head, bytes_per_value))
            """)

alternative("mha_count_factored", "mha_param_count",
            """the count factored as 4 d_model (d_model + bias), the bias flag turned into 0 or 1 with int(),
            after a divmod check that raises ValueError""",
            """
            def mha_param_count(d_model, n_heads, bias=False):
                d_head, rest = divmod(d_model, n_heads)
                if rest or d_head == 0:
                    raise ValueError(f"n_heads={n_heads} cannot split d_model={d_model} into equal heads")
                return 4 * d_model * (d_model + int(bool(bias)))  # four (d_model, d_model) matrices, four biases
            """)

alternative("exercise_512_loop_over_heads", "exercise_512",
            """the two counts from the learner's mha_param_count in a comprehension over the head counts 8 and
            1, the tuple built from a list""",
            """
            def exercise_512():
                d_model = 512
                counts = [mha_param_count(d_model, h, bias=False) for h in (8, 1)]  # 8 heads, then 1 full-width head
                return tuple([d_model // 8] + counts)
            """)

alternative("gqa_count_shapes_table", "gqa_param_count",
            """each matrix's shape written in a dict and the sizes summed, biases as long as each matrix's
            output, with checks that raise ValueError on heads that cannot be grouped""",
            """
            def gqa_param_count(d_model, n_heads, n_kv_heads, bias=False):
                if d_model % n_heads or n_heads % n_kv_heads:
                    raise ValueError("n_heads must divide d_model and n_kv_heads must divide n_heads")
                d_head = d_model // n_heads  # set by the query heads
                shapes = {"W_Q": (d_model, d_model), "W_K": (d_model, n_kv_heads * d_head),
                          "W_V": (d_model, n_kv_heads * d_head), "W_O": (d_model, d_model)}
                count = sum(rows * cols for rows, cols in shapes.values())
                if bias:
                    count += sum(cols for _, cols in shapes.values())  # one bias per output column
                return count
            """)

alternative("kv_bytes_loop_over_layers", "kv_cache_bytes_per_token",
            """a loop over the layers and over the two cached tensors (key, value), adding each one's bytes""",
            """
            def kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_value=2):
                total = 0
                for _ in range(n_layers):
                    for _tensor in ("key", "value"):
                        total += n_kv_heads * d_head * bytes_per_value  # one vector of d_head per KV head
                return total
            """)

"""The course's one reference implementation of multi-head attention (numpy).

Every hidden test grades a learner's function against the function of the same name here (``reference.softmax``,
``getattr(reference, name)``), and the benchmarks time it. Learners never receive it. Each lesson's functions live in
a module of their own (``lesson01`` ... ``lesson09``, beside the hidden checks' ``autograder/checks/lessonNN.py``;
the argument checks they share: ``arguments``); this package holds them all under one name, ``__all__`` in lesson
order.

Glossary (the same names are used in the lessons, the plots and the tests):
    B        batch size
    T        sequence length (T_q queries, T_k keys/values when they differ)
    d_model  width of a token vector
    n_heads  number of attention heads
    d_head   width of one head, d_model // n_heads (the paper's d_k = d_v)
    W_Q, W_K, W_V, W_O   (d_model, d_model) projections, applied as x @ W
    mask     boolean, True marks a blocked (query, key) pair

No function modifies its inputs. float32 stays float32 and float64 stays float64: every scale is a
Python float (``math.sqrt``), because ``np.sqrt(d_head)`` is a numpy float64 and would promote float32.
"""

from autograder.reference.lesson01 import scaled_dot_product_attention, softmax
from autograder.reference.lesson02 import concat_heads, multi_head_attention, output_projection, split_heads
from autograder.reference.lesson03 import gqa_param_count, kv_cache_bytes_per_token, mha_param_count
from autograder.reference.lesson04 import dot_product_std, multi_head_scores
from autograder.reference.lesson05 import head_weights
from autograder.reference.lesson06 import (causal_mask, causal_self_attention, cross_attention, decode_step,
                                           decode_with_kv_cache, grouped_query_attention, kv_cache_append, repeat_kv,
                                           tiled_attention)
from autograder.reference.lesson07 import (attention_row_backward, gradient_check, multi_head_attention_backward,
                                           scaled_dot_product_attention_backward, sinusoidal_positions,
                                           softmax_backward, softmax_jacobian)
from autograder.reference.lesson08 import (alibi_bias, kv_cache_elements_per_token, mla_absorbed, mla_attention, rope,
                                           sliding_window_mask, streaming_decode)
from autograder.reference.lesson09 import (ablate_head, block_backward, block_forward, cross_entropy, embedding_backward,
                                           empty_cache, gelu, gelu_backward, generate, gpt_logits, k_composition,
                                           layer_norm, layer_norm_backward, mlp, mlp_backward, model_step,
                                           next_token_probabilities, sample_next)

# Not in __all__ (no learner writes them), read as reference.<name> by the checks and the tests:
from autograder.reference.lesson06 import MASK_CONVENTIONS  # noqa: F401
from autograder.reference.lesson08 import KV_CACHE_ATTENTION, mla_cache  # noqa: F401
from autograder.reference.lesson09 import BLOCK_KEYS  # noqa: F401

__all__ = [
    "softmax",
    "scaled_dot_product_attention",
    "split_heads",
    "concat_heads",
    "output_projection",
    "multi_head_attention",
    "mha_param_count",
    "head_weights",
    "gqa_param_count",
    "kv_cache_bytes_per_token",
    "multi_head_scores",
    "dot_product_std",
    "repeat_kv",
    "grouped_query_attention",
    "causal_mask",
    "causal_self_attention",
    "kv_cache_append",
    "decode_step",
    "decode_with_kv_cache",
    "tiled_attention",
    "cross_attention",
    "softmax_jacobian",
    "softmax_backward",
    "attention_row_backward",
    "scaled_dot_product_attention_backward",
    "multi_head_attention_backward",
    "gradient_check",
    "sinusoidal_positions",
    "rope",
    "alibi_bias",
    "sliding_window_mask",
    "streaming_decode",
    "mla_attention",
    "mla_absorbed",
    "kv_cache_elements_per_token",
    "layer_norm",
    "layer_norm_backward",
    "gelu_backward",
    "mlp_backward",
    "cross_entropy",
    "embedding_backward",
    "block_backward",
    "sample_next",
    "generate",
    "ablate_head",
    "k_composition",
    # given by lesson 09, not graded: bug sources and stand-ins call them
    "gelu",
    "mlp",
    "block_forward",
    "gpt_logits",
    "empty_cache",
    "model_step",
    "next_token_probabilities",
]

"""Catalogued learner bugs of lesson 03: counting the parameters of multi-head and grouped-query attention."""

import math  # noqa: F401 - used inside the bug sources' namespace

import numpy as np  # noqa: F401

from autograder.bugs import declarer

bug = declarer(__name__)

_COUNT_TESTS = ("param_count", "param_count_bias")

bug("param_count_no_divisibility_check", "mha_param_count",
    """mha_param_count returns a count when n_heads does not divide d_model. Such a layer cannot be split into
    equal heads of d_model // n_heads columns, so there is no such layer to count: the lesson asks for a
    ValueError in that case.""",
    """
    def mha_param_count(d_model, n_heads, bias=False):
        count = 4 * d_model * d_model
        if bias:
            count += 4 * d_model
        return count
    """, tests=("param_count",))

bug("exercise_d_head_float", "exercise_512",
    """d_head is computed with / and comes out as the float 64.0. A head width is a whole number of columns:
    integer division (//) gives the int 64.""",
    """
    def exercise_512():
        d_head = 512 / 8
        return d_head, mha_param_count(512, 8), mha_param_count(512, 1)
    """, tests=("exercise_values",))

bug("param_count_no_W_O", "mha_param_count",
    """The count leaves out the output projection W_O. A multi-head attention layer owns four (d_model,
    d_model) matrices, W_Q, W_K, W_V and W_O: the heads' concatenated outputs are mixed by W_O, and its
    d_model^2 weights (plus d_model biases) belong to the layer too.""",
    """
    def mha_param_count(d_model, n_heads, bias=False):
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        count = 3 * d_model * d_model
        if bias:
            count += 3 * d_model
        return count
    """, tests=_COUNT_TESTS)

bug("param_count_times_heads", "mha_param_count",
    """The count is multiplied by n_heads, as if every head had full (d_model, d_model) projections. Each head
    projects to d_head = d_model // n_heads columns, so the n_heads slices together make one (d_model, d_model)
    matrix per projection: the total is 4 d_model^2 whatever n_heads is.""",
    """
    def mha_param_count(d_model, n_heads, bias=False):
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        count = 4 * d_model * d_model * n_heads
        if bias:
            count += 4 * d_model * n_heads
        return count
    """, tests=_COUNT_TESTS)

bug("param_count_bias_once", "mha_param_count",
    """The biases are counted wrong: there is one bias vector of length d_model for each of the four
    projections (W_Q, W_K, W_V and W_O), so bias=True adds 4 * d_model, not d_model.""",
    """
    def mha_param_count(d_model, n_heads, bias=False):
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        count = 4 * d_model * d_model
        if bias:
            count += d_model
        return count
    """, tests=("param_count_bias",))

# Two ways to the same wrong count, 4 * d_model^2 for every n_kv_heads (W_K and W_V counted as wide as W_Q): no
# input tells them apart, so they share one diagnosis, which names the result and both causes.
_GQA_FULL_WIDTH = """W_K and W_V are counted as (d_model, d_model), as wide as W_Q, whatever n_kv_heads is. In
    grouped-query attention they have n_kv_heads * d_head columns, where d_head = d_model // n_heads is the width
    of a *query* head: check both the number of heads they are sized with and the head width used."""

bug("gqa_kv_sized_with_query_heads", "gqa_param_count", _GQA_FULL_WIDTH,
    """
    def gqa_param_count(d_model, n_heads, n_kv_heads, bias=False):
        d_head = d_model // n_heads
        width = n_heads * d_head
        count = 2 * d_model * d_model + 2 * d_model * width
        if bias:
            count += 2 * d_model + 2 * width
        return count
    """, tests=("gqa_count",))

bug("kv_cache_keys_only", "kv_cache_bytes_per_token",
    """The cache holds a key *and* a value vector for every KV head in every layer: the count needs a factor
    of 2 for K and V.""",
    """
    def kv_cache_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_value=2):
        return n_layers * n_kv_heads * d_head * bytes_per_value
    """, tests=("kv_cache_bytes",))

bug("gqa_d_head_from_kv_heads", "gqa_param_count", _GQA_FULL_WIDTH,
    """
    def gqa_param_count(d_model, n_heads, n_kv_heads, bias=False):
        d_head = d_model // n_kv_heads
        width = n_kv_heads * d_head
        count = 2 * d_model * d_model + 2 * d_model * width
        if bias:
            count += 2 * d_model + 2 * width
        return count
    """, tests=("gqa_count",))

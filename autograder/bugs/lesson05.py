"""Catalogued learner bugs of lesson 05 (exercises): the learner's own split/merge, per-head weights and
multi-head attention from raw operations.

The sources are self-contained (numpy, and the `softmax` of the lesson's paste cell), because a mutation test pastes
them into the student notebook, where the reference helpers do not exist.
"""

import math  # noqa: F401 - used inside the bug sources' namespace

import numpy as np  # noqa: F401

from autograder.bugs import declarer

bug = declarer(__name__)

# ---------------------------------------------------------------------------------------------------------
# Lesson 05: split_into_heads / merge_heads (graded by the round-trip test)
# ---------------------------------------------------------------------------------------------------------
bug("split_into_heads_bare_reshape", "split_into_heads",
    """split_into_heads reshapes straight to (..., n_heads, T, d_head) without a transpose, so head 0 does not
    hold columns 0:d_head of every token. An exact round trip cannot show it (the exercise's second part says
    why); the self-check's np.arange input shows where each entry lands. Reshape to (..., T, n_heads, d_head)
    first, then move the head axis in front of T.""",
    """
    def split_into_heads(x, n_heads):
        *lead, T, d_model = x.shape
        return x.reshape(*lead, n_heads, T, d_model // n_heads)
    """, tests=("roundtrip",))

bug("merge_heads_bare_reshape", "merge_heads",
    """merge_heads reshapes straight to (..., T, d_model) without first moving the head axis back behind T,
    so token t's row is filled with pieces of several tokens. Swap axes -3 and -2 first, then reshape.""",
    """
    def merge_heads(x):
        *lead, n_heads, T, d_head = x.shape
        return x.reshape(*lead, T, n_heads * d_head)
    """, tests=("roundtrip",))

bug("split_into_heads_head_axis_last", "split_into_heads",
    """split_into_heads reshapes to (..., T, d_head, n_heads), so head i does not hold its contiguous block of
    columns i*d_head:(i+1)*d_head (the self-check's np.arange input shows which columns it gets). Reshape to
    (..., T, n_heads, d_head).""",
    """
    def split_into_heads(x, n_heads):
        *lead, T, d_model = x.shape
        x = x.reshape(*lead, T, d_model // n_heads, n_heads)
        return np.moveaxis(x, -1, -3)
    """, tests=("roundtrip",))

bug("split_into_heads_fixed_axes", "split_into_heads",
    """split_into_heads swaps axes 0 and 1, which is right for one sequence (T, d_model) but swaps the batch
    axis on batched input. Count the two axes to swap from the end, so leading batch axes pass through.""",
    """
    def split_into_heads(x, n_heads):
        *lead, T, d_model = x.shape
        x = x.reshape(*lead, T, n_heads, d_model // n_heads)
        return np.swapaxes(x, 0, 1)
    """, tests=("roundtrip",))

# ---------------------------------------------------------------------------------------------------------
# Lesson 05: head_weights (graded by the "heads differ" test)
# ---------------------------------------------------------------------------------------------------------
bug("head_weights_random_patterns", "head_weights",
    """head_weights returns random attention patterns. Two random patterns always differ, so they say nothing
    about the layer: the weights must be computed from x, W_Q and W_K, softmax(Q_h K_h^T / sqrt(d_head)) for
    each head h.""",
    """
    def head_weights(x, W_Q, W_K, n_heads):
        rng = np.random.default_rng(0)
        T = x.shape[-2]
        scores = rng.normal(size=(*x.shape[:-2], n_heads, T, T))
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    """, tests=("heads_differ",))

bug("head_weights_same_columns", "head_weights",
    """Every head uses the first d_head columns of Q and K, so all heads are copies of head 0. Head h must use
    its own columns h*d_head:(h+1)*d_head: split Q and K into heads.""",
    """
    def head_weights(x, W_Q, W_K, n_heads):
        d_head = x.shape[-1] // n_heads
        Q = (x @ W_Q)[..., :d_head]
        K = (x @ W_K)[..., :d_head]
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        w = e / e.sum(axis=-1, keepdims=True)
        return np.repeat(w[..., None, :, :], n_heads, axis=-3)
    """, tests=("heads_differ",))

bug("head_weights_scaled_by_d_model", "head_weights",
    """The scores are divided by sqrt(d_model). Each head's scores take the scale of that head's own width,
    sqrt(d_head) with d_head = d_model // n_heads: lesson 04 measures why. sqrt(d_model) makes every head's
    softmax flatter than it should be.""",
    """
    def head_weights(x, W_Q, W_K, n_heads):
        *lead, T, d_model = x.shape
        d_head = d_model // n_heads
        Q = np.swapaxes((x @ W_Q).reshape(*lead, T, n_heads, d_head), -3, -2)
        K = np.swapaxes((x @ W_K).reshape(*lead, T, n_heads, d_head), -3, -2)
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_model)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    """, tests=("heads_differ",))

# ---------------------------------------------------------------------------------------------------------
# Lesson 05: mha_from_scratch (graded by the cell mha_from_scratch_test)
# ---------------------------------------------------------------------------------------------------------
_MHA_HEAD = """
    def mha_from_scratch(x, W_Q, W_K, W_V, W_O, n_heads):
        *lead, T, d_model = x.shape
        d_head = d_model // n_heads
        Q = np.swapaxes((x @ W_Q).reshape(*lead, T, n_heads, d_head), -3, -2)
        K = np.swapaxes((x @ W_K).reshape(*lead, T, n_heads, d_head), -3, -2)
        V = np.swapaxes((x @ W_V).reshape(*lead, T, n_heads, d_head), -3, -2)
"""
_SOFTMAX = """
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = e / e.sum(axis=-1, keepdims=True)
"""
_MERGE = """
        concat = np.swapaxes(weights @ V, -3, -2).reshape(*lead, T, d_model)
"""

bug("mha_from_scratch_no_w_o", "mha_from_scratch",
    """The output is the concatenation of the heads without W_O: the layer ends with Concat(heads) @ W_O.
    Lesson 02 shows what W_O does that the concatenation does not.""",
    _MHA_HEAD + "        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)\n" + _SOFTMAX + _MERGE
    + "        return concat, weights\n", tests=("mha_from_scratch_test",))

bug("mha_from_scratch_w_o_transposed", "mha_from_scratch",
    """W_O is applied transposed (concat @ W_O.T). W_O has shape (n_heads*d_head, d_model) and is applied as
    Concat(heads) @ W_O.""",
    _MHA_HEAD + "        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)\n" + _SOFTMAX + _MERGE
    + "        return concat @ W_O.T, weights\n", tests=("mha_from_scratch_test",))

bug("mha_from_scratch_scaled_by_d_model", "mha_from_scratch",
    """The scores are divided by sqrt(d_model) instead of the per-head sqrt(d_head): each head's scores take the
    scale of that head's own width, as lesson 04 measures.""",
    _MHA_HEAD + "        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_model)\n" + _SOFTMAX + _MERGE
    + "        return concat @ W_O, weights\n", tests=("mha_from_scratch_test",))

bug("mha_from_scratch_heads_summed", "mha_from_scratch",
    """The heads are summed (or averaged) instead of concatenated, and the sum is tiled back to d_model columns.
    Concatenate the heads side by side, (..., T, n_heads*d_head), then apply W_O.""",
    _MHA_HEAD + "        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)\n" + _SOFTMAX
    + "        summed = (weights @ V).sum(axis=-3)\n"
    + "        return np.concatenate([summed] * n_heads, axis=-1) @ W_O, weights\n", tests=("mha_from_scratch_test",))

bug("mha_from_scratch_np_sqrt_promotes", "mha_from_scratch",
    """The scale is a numpy float64 (np.sqrt of the head width), which turns float32 input into float64 results;
    the exercise asks for math.sqrt, a Python float, which keeps float32 float32.""",
    _MHA_HEAD + "        scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(d_head)\n" + _SOFTMAX + _MERGE
    + "        return concat @ W_O, weights\n", tests=("mha_from_scratch_test",))

bug("mha_from_scratch_projections_transposed", "mha_from_scratch",
    """The queries and keys are projected with the transposed weights (x @ W.T). The course applies every
    projection as x @ W: the rows of W take the input's d_model features. With a symmetric W (the identity, or
    all zeros) the two agree, which is why only a random layer shows it.""",
    _MHA_HEAD.replace("(x @ W_Q)", "(x @ W_Q.T)").replace("(x @ W_K)", "(x @ W_K.T)")
    + "        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)\n" + _SOFTMAX + _MERGE
    + "        return concat @ W_O, weights\n", tests=("mha_from_scratch_test",))

bug("mha_from_scratch_fixed_axes", "mha_from_scratch",
    """K is transposed with fixed axes (transpose(0, 2, 1)): right for one sequence (n_heads, T, d_head), wrong
    once a batch axis comes first. Swap the last two axes counted from the end, so leading axes pass through.""",
    _MHA_HEAD + "        scores = Q @ K.transpose(0, 2, 1) / math.sqrt(d_head)\n" + _SOFTMAX + _MERGE
    + "        return concat @ W_O, weights\n", tests=("mha_from_scratch_test",))

bug("head_weights_projections_transposed", "head_weights",
    """The queries and keys are projected with the transposed weights (x @ W.T). The course applies every
    projection as x @ W: the rows of W take the input's d_model features. With a symmetric W (the identity, or
    all zeros) the two agree, which is why only a random layer shows it.""",
    """
    def head_weights(x, W_Q, W_K, n_heads):
        *lead, T, d_model = x.shape
        d_head = d_model // n_heads
        Q = np.swapaxes((x @ W_Q.T).reshape(*lead, T, n_heads, d_head), -3, -2)
        K = np.swapaxes((x @ W_K.T).reshape(*lead, T, n_heads, d_head), -3, -2)
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    """, tests=("heads_differ",))

bug("mha_from_scratch_calls_attention_layer", "mha_from_scratch",
    """mha_from_scratch hands the whole layer to attention_layer, another function of the notebook, instead of
    computing it: the exercise is the layer itself, built from the projections, the split into heads, one
    softmax attention per head, the merge and W_O. A function earns its points for the work it does.""",
    """
    def mha_from_scratch(x, W_Q, W_K, W_V, W_O, n_heads):
        return attention_layer(x, W_Q, W_K, W_V, W_O, n_heads)
    """, tests=("mha_from_scratch_test",), visible=False)

bug("attention_layer_calls_mha_from_scratch", "attention_layer",
    """attention_layer hands the whole layer to mha_from_scratch instead of being fixed: the exercise is to find
    the one mistake in the given layer and correct it there, so that the layer itself computes multi-head
    attention. A function earns its points for the work it does.""",
    """
    def attention_layer(x, W_Q, W_K, W_V, W_O, n_heads):
        return mha_from_scratch(x, W_Q, W_K, W_V, W_O, n_heads)
    """, tests=("attention_layer_test",), visible=False)

# ---------------------------------------------------------------------------------------------------------
# Lesson 05: find-the-bug exercises. Each given bug is the learner's starting code (autograder/publish/given_code.py):
# it runs, its shapes are right, and it carries one catalogued mistake that the learner finds and fixes.
# ---------------------------------------------------------------------------------------------------------
bug("masked_attention_as_given", "masked_attention",
    """masked_attention still computes what the given code does: its weights are wrong on every query that has a
    blocked key (and right on the others), so the mistake is in where and how the mask enters the computation.
    Revisit lesson 01's masked attention: which array the mask acts on, with what value, and why. Your written
    answer after the exercise is where you say what goes wrong.""",
    '''
    def masked_attention(Q, K, V, mask):
        """softmax(Q K^T / sqrt(d_k)) V, blocked pairs (mask True) weighted 0. Returns (out, weights).

        Contract: Q (..., T_q, d_k), K (..., T_k, d_k) and V (..., T_k, d_v) share one float dtype and leading axes that
        broadcast; mask is bool, broadcastable to (..., T_q, T_k).
        """
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])  # (..., T_q, T_k)
        weights = softmax(scores, axis=-1)  # (..., T_q, T_k), each row sums to 1
        weights = np.where(mask, 0.0, weights)  # blocked pairs get weight 0
        return weights @ V, weights  # (..., T_q, d_v), (..., T_q, T_k)
    ''', tests=("masked_attention_test",), given=True)

# The fixes of the given masked_attention that lesson 01 teaches are wrong: each is right on every row that keeps
# a key, and wrong on a row whose keys are all blocked, or on a mask that has to broadcast.
_MASKED = """
    def masked_attention(Q, K, V, mask):
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
{before}        weights = softmax(scores, axis=-1)
{after}        return weights @ V, weights
    """

bug("masked_attention_large_negative", "masked_attention",
    """The fix blocks the scores with a large negative number (-1e9) instead of -inf: right on every row that keeps
    a key, but a query whose keys are all blocked then has equal scores and gets uniform weights 1/T_k, reading
    keys it may not see. Lesson 01's rule: -inf in the blocked scores, and your softmax gives such a row all-zero
    weights.""",
    _MASKED.format(before="        scores = np.where(mask, -1e9, scores)\n", after=""),
    tests=("masked_attention_test",))

bug("masked_attention_renormalised", "masked_attention",
    """The fix keeps zeroing the blocked weights after the softmax and divides each row by its new sum: right on
    every row that keeps a key, but a query whose keys are all blocked divides 0 by 0 and gets NaN weights (and a
    blocked key with a large score can take the whole row's weight before it is removed). Lesson 01's rule: block
    the scores (-inf) before the softmax, which gives such a row all-zero weights.""",
    _MASKED.format(before="", after="        weights = np.where(mask, 0.0, weights)\n"
                                    "        weights = weights / weights.sum(axis=-1, keepdims=True)\n"),
    tests=("masked_attention_test",))

bug("masked_attention_boolean_index", "masked_attention",
    """The fix blocks the scores by boolean indexing, scores[mask] = -inf, which needs a mask of the scores' exact
    shape: one (T_q, T_k) mask for a batch of scores (B, T_q, T_k) raises IndexError. A mask broadcasts over the
    batch, as in lesson 01: choose between -inf and the score with np.where, which broadcasts.""",
    _MASKED.format(before="        scores[mask] = -np.inf\n", after=""), tests=("masked_attention_test",))

bug("attention_layer_as_given", "attention_layer",
    """attention_layer still computes what the given code does: its heads do not read their own columns of Q, K
    and V (head i's block i*d_head:(i+1)*d_head). Its merge is right; the line to fix is the split. Revisit how
    your split_into_heads above cuts (..., T, d_model) into heads, and probe the layer with W_Q and W_K that are
    zero outside one head's columns. Your written answer after the exercise is where you say what goes wrong.""",
    '''
    def attention_layer(x, W_Q, W_K, W_V, W_O, n_heads):
        """Multi-head self-attention: x (..., T, d_model) -> (out (..., T, d_model), weights (..., n_heads, T, T)).

        Contract: x (..., T, d_model) and W_Q, W_K, W_V, W_O (d_model, d_model) share one float dtype; n_heads divides
        d_model.
        """
        *lead, T, d_model = x.shape
        d_head = d_model // n_heads

        def split(y):  # (..., T, d_model) -> (..., n_heads, T, d_head)
            return np.moveaxis(y.reshape(*lead, T, d_head, n_heads), -1, -3)

        Q, K, V = split(x @ W_Q), split(x @ W_K), split(x @ W_V)  # each (..., n_heads, T, d_head)
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)  # (..., n_heads, T, T)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))  # a stable softmax over the keys
        weights = e / e.sum(axis=-1, keepdims=True)  # (..., n_heads, T, T)
        heads = weights @ V  # (..., n_heads, T, d_head)
        merged = np.swapaxes(heads, -3, -2).reshape(*lead, T, d_model)  # (..., T, n_heads * d_head)
        return merged @ W_O, weights
    ''', tests=("attention_layer_test",), given=True)

# The fixes of the given attention_layer that leave its split as it is: each runs, and each head still reads
# every n_heads-th column.
_LAYER = """
    def attention_layer(x, W_Q, W_K, W_V, W_O, n_heads):
        *lead, T, d_model = x.shape
        d_head = d_model // n_heads

        def split(y):
            return np.moveaxis(y.reshape(*lead, T, d_head, n_heads), -1, -3)

        Q, K, V = split(x @ W_Q), split(x @ W_K), split(x @ W_V)
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt({scale})
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = e / e.sum(axis=-1, keepdims=True)
        merged = {merge}.reshape(*lead, T, d_model)
        return merged @ W_O, weights
    """

bug("attention_layer_merge_matches_split", "attention_layer",
    """The fix changes the merge to undo the given split, so the two now agree with each other, but the split was
    the mistake: each head still reads other columns of Q, K and V than its own block i*d_head:(i+1)*d_head.
    Put the merge back and fix the split, as your split_into_heads above splits.""",
    _LAYER.format(scale="d_head", merge="np.moveaxis(weights @ V, -3, -1)"), tests=("attention_layer_test",))

bug("attention_layer_scale_changed", "attention_layer",
    """The fix changes the scale to sqrt(d_model), but the scale was right (a head's scores are divided by
    sqrt(d_head), lesson 04) and the split is the mistake: each head reads other columns than its own block
    i*d_head:(i+1)*d_head. Put the scale back and fix the split, as your split_into_heads above splits.""",
    _LAYER.format(scale="d_model", merge="np.swapaxes(weights @ V, -3, -2)"), tests=("attention_layer_test",))

"""Catalogued learner bugs of lesson 02: split_heads, concat_heads, output_projection, multi_head_attention.

Each bug's ``tests`` are the grade_ids of the broken function's own test cells: a wrong helper costs only the
helper's points, because the tests of the functions that call it bind the reference helper in its place.
"""

import math  # noqa: F401 - used inside the bug sources' namespace

import numpy as np  # noqa: F401

from autograder.bugs import declarer

bug = declarer(__name__)

_SPLIT = ("split_heads_values",)
_CONCAT = ("concat_heads_values",)
_OUTPUT = ("output_projection_values",)
_MHA = ("mha_values", "mha_mask")

# ---------------------------------------------------------------------------------------------------------
# split_heads: (..., T, d_model) -> (..., n_heads, T, d_head)
# ---------------------------------------------------------------------------------------------------------
bug("split_no_transpose", "split_heads",
    """split_heads reshapes straight to (..., n_heads, T, d_head) without a transpose, so a "head" is a run of
    consecutive numbers from the flat memory: head 0 holds all columns of the first tokens instead of columns
    0:d_head of every token. Reshape to (..., T, n_heads, d_head) first, then swap the T and n_heads axes
    (axes -3 and -2, counted from the end).""",
    """
    def split_heads(x, n_heads):
        *lead, T, d_model = x.shape
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        return x.reshape(*lead, n_heads, T, d_model // n_heads)
    """, tests=_SPLIT)

bug("split_strided_heads", "split_heads",
    """split_heads reshapes to (..., T, d_head, n_heads), so the heads are strided: head 0 holds columns 0,
    n_heads, 2*n_heads, ... of each token instead of the contiguous block 0:d_head. Reshape to
    (..., T, n_heads, d_head) (heads before the width) and then swap the T and n_heads axes.""",
    """
    def split_heads(x, n_heads):
        *lead, T, d_model = x.shape
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        x = x.reshape(*lead, T, d_model // n_heads, n_heads)  # (..., T, d_head, n_heads)
        return np.moveaxis(x, -1, -3)  # (..., n_heads, T, d_head)
    """, tests=_SPLIT)

bug("split_swaps_leading_axes", "split_heads",
    """split_heads swaps axes 0 and 1, which is right for one sequence (T, n_heads, d_head) but on a batch
    (B, T, n_heads, d_head) swaps the batch axis with T. Count the axes from the end (-3 and -2) so leading batch
    axes stay in front.""",
    """
    def split_heads(x, n_heads):
        *lead, T, d_model = x.shape
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        x = x.reshape(*lead, T, n_heads, d_model // n_heads)
        return np.swapaxes(x, 0, 1)
    """, tests=_SPLIT)

# ---------------------------------------------------------------------------------------------------------
# concat_heads: (..., n_heads, T, d_head) -> (..., T, n_heads * d_head)
# ---------------------------------------------------------------------------------------------------------
bug("concat_no_transpose", "concat_heads",
    """concat_heads reshapes (..., n_heads, T, d_head) straight to (..., T, n_heads*d_head) without moving the
    heads axis back, so token t's row is filled with the next numbers in memory (pieces of several tokens of
    head 0) instead of head 0, head 1, ... of token t side by side. Swap the n_heads and T axes back first
    (counted from the end), then reshape.""",
    """
    def concat_heads(x):
        *lead, n_heads, T, d_head = x.shape
        return x.reshape(*lead, T, n_heads * d_head)
    """, tests=_CONCAT)

bug("concat_swaps_leading_axes", "concat_heads",
    """concat_heads swaps axes 0 and 1, which is right for one sequence (n_heads, T, d_head) but on a batch
    (B, n_heads, T, d_head) swaps the batch axis with the heads axis and mixes examples. Count the axes from
    the end (-3 and -2) before reshaping to (..., T, n_heads*d_head).""",
    """
    def concat_heads(x):
        *lead, n_heads, T, d_head = x.shape
        return np.swapaxes(x, 0, 1).reshape(*lead, T, n_heads * d_head)
    """, tests=_CONCAT)

# ---------------------------------------------------------------------------------------------------------
# output_projection: Concat(heads) @ W_O
# ---------------------------------------------------------------------------------------------------------
bug("output_W_O_transposed", "output_projection",
    """output_projection multiplies by W_O.T. W_O is (n_heads*d_head, d_model) and is applied as
    Concat(heads) @ W_O: row block i of W_O belongs to head i. Since W_O is square the shapes fit either way,
    but the values do not.""",
    """
    def output_projection(heads, W_O):
        return concat_heads(heads) @ W_O.T
    """, tests=_OUTPUT)

bug("output_W_O_forgotten", "output_projection",
    """output_projection returns the concatenated heads without multiplying by W_O. Concatenation only puts
    the heads side by side; W_O is the learned map that mixes them into each output column, and the layer's
    result is the concatenation multiplied by it.""",
    """
    def output_projection(heads, W_O):
        return concat_heads(heads)
    """, tests=_OUTPUT)

bug("output_heads_averaged", "output_projection",
    """output_projection averages the heads' projected outputs. Concat(heads) @ W_O equals the *sum* over
    heads of head i times its own rows of W_O (rows i*d_head to (i+1)*d_head); the mean divides it by n_heads.""",
    """
    def output_projection(heads, W_O):
        n_heads, d_head = heads.shape[-3], heads.shape[-1]
        parts = [heads[..., i, :, :] @ W_O[i * d_head:(i + 1) * d_head] for i in range(n_heads)]
        return np.mean(parts, axis=0)
    """, tests=_OUTPUT)

bug("output_heads_summed", "output_projection",
    """output_projection adds the heads together before projecting, so every head meets the same rows of W_O
    and the model cannot tell them apart. Concatenate the heads (concat_heads) so head i meets its own rows of
    W_O (rows i*d_head to (i+1)*d_head).""",
    """
    def output_projection(heads, W_O):
        d_head = heads.shape[-1]
        return heads.sum(axis=-3) @ W_O[:d_head]
    """, tests=_OUTPUT)

# ---------------------------------------------------------------------------------------------------------
# multi_head_attention
# ---------------------------------------------------------------------------------------------------------
bug("mha_shared_projection", "multi_head_attention",
    """Every head uses the same projection (the first d_head columns of W_Q, W_K and W_V), so all heads are
    copies of one head. Project with the full matrices (x @ W_Q is (..., T, d_model)) and then split_heads:
    head i gets its own columns i*d_head:(i+1)*d_head of each W.""",
    """
    def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        d_head = x.shape[-1] // n_heads
        def shared(W):
            one = (x @ W[:, :d_head])[..., None, :, :]  # (..., 1, T, d_head)
            return np.repeat(one, n_heads, axis=-3)  # (..., n_heads, T, d_head)
        heads, weights = scaled_dot_product_attention(shared(W_Q), shared(W_K), shared(W_V), mask)
        return output_projection(heads, W_O), weights
    """, tests=_MHA)

bug("mha_weights_transposed", "multi_head_attention",
    """The weights are applied as x @ W.T (the convention of PyTorch's nn.Linear, which stores W as
    (out, in)). In this course every W is (d_model, d_model) and is applied as x @ W.""",
    """
    def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        Q = split_heads(x @ W_Q.T, n_heads)
        K = split_heads(x @ W_K.T, n_heads)
        V = split_heads(x @ W_V.T, n_heads)
        heads, weights = scaled_dot_product_attention(Q, K, V, mask)
        return output_projection(heads, W_O.T), weights
    """, tests=_MHA)

bug("mha_mask_one_head", "multi_head_attention",
    """The (T, T) mask reaches only head 0; the other heads still attend to blocked pairs. A (T, T) mask must
    apply to every head: pass it to the attention as it is, and it broadcasts over (..., n_heads, T, T).""",
    """
    def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        Q = split_heads(x @ W_Q, n_heads)
        K = split_heads(x @ W_K, n_heads)
        V = split_heads(x @ W_V, n_heads)
        if mask is not None:
            head_mask = np.zeros(Q.shape[:-1] + (K.shape[-2],), dtype=bool)  # (..., n_heads, T, T)
            head_mask[..., 0, :, :] = mask
            mask = head_mask
        heads, weights = scaled_dot_product_attention(Q, K, V, mask)
        return output_projection(heads, W_O), weights
    """, tests=("mha_mask",))

bug("mha_scaled_by_d_model", "multi_head_attention",
    """The scores are divided by sqrt(d_model) instead of sqrt(d_head). Each head's dot product sums over its
    own d_head = d_model // n_heads columns, so the scale is math.sqrt(d_head).""",
    """
    def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        d_model = x.shape[-1]
        Q = split_heads(x @ W_Q, n_heads)
        K = split_heads(x @ W_K, n_heads)
        V = split_heads(x @ W_V, n_heads)
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_model)
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return output_projection(weights @ V, W_O), weights
    """, tests=_MHA)

bug("mha_in_place", "multi_head_attention",
    """multi_head_attention folds the 1/sqrt(d_head) scale into W_Q with `W_Q /= ...`, which changes the
    caller's W_Q: every later call is scaled again. Compute a new array (x @ W_Q / math.sqrt(d_head)).""",
    """
    def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        d_head = x.shape[-1] // n_heads
        W_Q /= math.sqrt(d_head)
        Q = split_heads(x @ W_Q, n_heads)
        K = split_heads(x @ W_K, n_heads)
        V = split_heads(x @ W_V, n_heads)
        scores = Q @ np.swapaxes(K, -1, -2)
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return output_projection(weights @ V, W_O), weights
    """, tests=_MHA)

bug("mha_no_W_O", "multi_head_attention",
    """The layer returns the concatenated heads without the output projection W_O. Concatenation only puts the
    heads side by side, each output column coming from one head; W_O is the learned map that mixes them, and it
    belongs to the layer.""",
    """
    def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        Q = split_heads(x @ W_Q, n_heads)
        K = split_heads(x @ W_K, n_heads)
        V = split_heads(x @ W_V, n_heads)
        heads, weights = scaled_dot_product_attention(Q, K, V, mask)
        return concat_heads(heads), weights
    """, tests=_MHA)

bug("mha_W_O_rows_misplaced", "multi_head_attention",
    """W_O is applied head by head, but each head meets the rows of W_O that belong to another head (the row
    blocks in reverse order). Row block i of W_O (rows i*d_head to (i+1)*d_head) belongs to head i, exactly where
    head i's columns sit in the concatenation.""",
    """
    def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        Q = split_heads(x @ W_Q, n_heads)
        K = split_heads(x @ W_K, n_heads)
        V = split_heads(x @ W_V, n_heads)
        heads, weights = scaled_dot_product_attention(Q, K, V, mask)
        d_head = heads.shape[-1]
        out = 0.0
        for i in range(n_heads):
            j = n_heads - 1 - i
            out = out + heads[..., i, :, :] @ W_O[j * d_head:(j + 1) * d_head]
        return out, weights
    """, tests=_MHA)

bug("mha_np_sqrt_promotes", "multi_head_attention",
    """The scale is a numpy float64 (np.sqrt of d_head), and a numpy float64 turns float32 scores into float64:
    float32 input must give float32 results. A Python float does not promote, so take the square root with the
    math module.""",
    """
    def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        d_head = x.shape[-1] // n_heads
        Q = split_heads(x @ W_Q, n_heads)
        K = split_heads(x @ W_K, n_heads)
        V = split_heads(x @ W_V, n_heads)
        scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(d_head)
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return output_projection(weights @ V, W_O), weights
    """, tests=("mha_values",))

bug("mha_K_fixed_axes", "multi_head_attention",
    """K is transposed with fixed axes (transpose(0, 2, 1)), which is right for one sequence (n_heads, T,
    d_head) but fails on a batch (B, n_heads, T, d_head), which has four axes. Swap the last two axes, counted
    from the end, so any number of leading axes passes through.""",
    """
    def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        d_head = x.shape[-1] // n_heads
        Q = split_heads(x @ W_Q, n_heads)
        K = split_heads(x @ W_K, n_heads)
        V = split_heads(x @ W_V, n_heads)
        scores = Q @ K.transpose(0, 2, 1) / math.sqrt(d_head)
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return output_projection(weights @ V, W_O), weights
    """, tests=_MHA)

bug("mha_mask_large_negative", "multi_head_attention",
    """The layer's own attention gives blocked scores a large negative number instead of -inf. Where some keys
    stay open this happens to give weight 0, but a query whose keys are all blocked gets uniform weights, so
    blocked keys receive weight. Blocked must mean weight exactly 0 in every row, as in lesson 01.""",
    """
    def multi_head_attention(x, W_Q, W_K, W_V, W_O, n_heads, mask=None):
        d_head = x.shape[-1] // n_heads
        Q = split_heads(x @ W_Q, n_heads)
        K = split_heads(x @ W_K, n_heads)
        V = split_heads(x @ W_V, n_heads)
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)
        if mask is not None:
            scores = np.where(mask, -1e9, scores)
        weights = softmax(scores, axis=-1)
        return output_projection(weights @ V, W_O), weights
    """, tests=("mha_mask",))

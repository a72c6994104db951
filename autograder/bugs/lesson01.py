"""Catalogued learner bugs of lesson 01: softmax and scaled dot-product attention."""

import math  # noqa: F401 - used inside the bug sources' namespace

import numpy as np  # noqa: F401

from autograder.bugs import declarer

bug = declarer(__name__)

# ---------------------------------------------------------------------------------------------------------
# Lesson 01: softmax and scaled dot-product attention
# ---------------------------------------------------------------------------------------------------------
bug("softmax_no_max_subtraction", "softmax",
    """softmax overflows for large scores: exp(1e4) is inf and inf/inf is NaN. Subtract the maximum along
    `axis` (with keepdims=True) before calling exp; the result is unchanged because softmax(x - c) =
    softmax(x).""",
    """
    def softmax(x, axis=-1):
        e = np.exp(x)
        return e / e.sum(axis=axis, keepdims=True)
    """, tests=("softmax_stable",))

bug("softmax_ignores_axis", "softmax",
    """softmax normalises over the wrong axis: the `axis` argument is ignored. Use it in both the max and the
    sum, with keepdims=True so the result broadcasts back.""",
    """
    def softmax(x, axis=-1):
        row_max = x.max(axis=-1, keepdims=True)
        e = np.exp(x - np.where(np.isfinite(row_max), row_max, 0))
        total = e.sum(axis=-1, keepdims=True)
        return e / np.where(total > 0, total, 1)
    """, tests=("softmax_values",))

bug("softmax_no_keepdims", "softmax",
    """softmax divides by a sum taken without keepdims=True, so the sum broadcasts against the wrong axis.
    Keep the reduced axis: x.sum(axis=axis, keepdims=True).""",
    """
    def softmax(x, axis=-1):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / np.expand_dims(e.sum(axis=axis), 0)
    """, tests=("softmax_values", "softmax_stable"))

_SDPA_TESTS = ("attention_values", "attention_mask")

bug("attention_no_scaling", "scaled_dot_product_attention",
    """The scores are not scaled: divide Q @ K^T by the square root of d_k, the width of a query or key (the
    last axis of Q). Without it the scores' spread grows like sqrt(d_k) and softmax saturates.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2)
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return weights @ V, weights
    """, tests=_SDPA_TESTS)

bug("attention_scaled_by_d_k", "scaled_dot_product_attention",
    """The scores are divided by d_k instead of sqrt(d_k). The variance of q.k is d_k, so its standard
    deviation is sqrt(d_k): divide by math.sqrt(d_k).""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / Q.shape[-1]
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return weights @ V, weights
    """, tests=_SDPA_TESTS)

bug("attention_scaled_by_seq_len", "scaled_dot_product_attention",
    """The scores are scaled by the sequence length (K.shape[-2]) instead of the key width d_k (the last
    axis of Q and K). The dot product sums over d_k terms; that is what sets the scale.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(K.shape[-2])
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return weights @ V, weights
    """, tests=_SDPA_TESTS)

bug("attention_softmax_query_axis", "scaled_dot_product_attention",
    """softmax is taken over the query axis (axis=-2), so each *column* sums to 1. Every query needs a
    distribution over the keys: softmax over the last axis (axis=-1), so each row sums to 1.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-2)
        return weights @ V, weights
    """, tests=_SDPA_TESTS)

bug("attention_mask_inverted", "scaled_dot_product_attention",
    """The mask's polarity is inverted: in this course True marks a *blocked* pair, so the True positions
    must get -inf before softmax, and the False ones stay open.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        weights = softmax(scores, axis=-1)
        return weights @ V, weights
    """, tests=("attention_mask",))

bug("attention_mask_after_softmax", "scaled_dot_product_attention",
    """The mask is applied after softmax without renormalising, so the remaining weights of a row no longer
    sum to 1. Put -inf into the blocked scores *before* softmax.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
        weights = softmax(scores, axis=-1)
        if mask is not None:
            weights = np.where(mask, 0.0, weights)
        return weights @ V, weights
    """, tests=("attention_mask",))

bug("attention_returns_scores", "scaled_dot_product_attention",
    """The returned weights are the raw scores: return softmax(scores), the weights that multiply V.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return weights @ V, scores
    """, tests=_SDPA_TESTS)

bug("attention_unnormalised_weights", "scaled_dot_product_attention",
    """The weights are exp(scores) without dividing by their row sum, so rows do not sum to 1: use the
    softmax, which normalises each row.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return weights @ V, weights
    """, tests=_SDPA_TESTS)

bug("attention_weights_transposed", "scaled_dot_product_attention",
    """The weights are transposed: they must be (..., T_q, T_k), one row per query, and the output is
    weights @ V with shape (..., T_q, d_v). Check the order of the matmul and any swapaxes.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        weights_t = np.swapaxes(weights, -1, -2)
        return np.swapaxes(V, -1, -2) @ weights_t, weights_t
    """, tests=_SDPA_TESTS)

bug("attention_in_place", "scaled_dot_product_attention",
    """The function modifies its input Q in place (Q /= ...). A caller's arrays must come back unchanged:
    compute Q / math.sqrt(d_k) into a new array.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        Q /= math.sqrt(Q.shape[-1])
        scores = Q @ np.swapaxes(K, -1, -2)
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return weights @ V, weights
    """, tests=_SDPA_TESTS)



def _hard_coded_source():
    """A function that returns the numbers the visible self-check's example produces, whatever its input."""
    from autograder import course, reference

    selfcheck = course.import_selfcheck(course.selfcheck_module(course.lesson_numbered(__name__)))
    out, weights = reference.scaled_dot_product_attention(*selfcheck.attention_example())
    return f"""
    def scaled_dot_product_attention(Q, K, V, mask=None):
        # numbers copied from a run on the self-check's example
        out = np.array({out.tolist()!r})
        weights = np.array({weights.tolist()!r})
        return out, weights
    """


bug("attention_hard_coded", "scaled_dot_product_attention",
    """The function returns fixed numbers that only fit the self-check's example. It must compute the
    attention of whatever Q, K, V it is given.""",
    _hard_coded_source(), tests=_SDPA_TESTS)


# ---------------------------------------------------------------------------------------------------------
# Rows far apart, fully blocked rows, dtypes, batch axes
# ---------------------------------------------------------------------------------------------------------
bug("softmax_global_max", "softmax",
    """softmax subtracts the maximum of the whole array instead of each row's own maximum along `axis`. When
    rows lie far apart (one row near 0, another near -2000), every exponent of the low row underflows to 0 and
    the row becomes 0/0 = NaN. The shift that keeps softmax safe is per row: reduce along `axis`.""",
    """
    def softmax(x, axis=-1):
        e = np.exp(x - np.max(x))
        return e / np.sum(e, axis=axis, keepdims=True)
    """, tests=("softmax_stable",))

bug("softmax_blocked_row_nan", "softmax",
    """A row whose scores are all -inf (every key blocked) gives NaN: its maximum is -inf, and -inf - (-inf) is
    NaN. The contract asks for all-zero weights in such a row. Shift a row only by a finite maximum, and give a
    row whose exponentials sum to 0 the weight 0 rather than dividing 0 by 0.""",
    """
    def softmax(x, axis=-1):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)
    """, tests=("softmax_stable",))

bug("softmax_casts_to_float64", "softmax",
    """softmax turns float32 input into float64: the input is converted to a float64 array first. A float32
    array must give float32 weights; work on the input as it is, without converting its dtype.""",
    """
    def softmax(x, axis=-1):
        x = np.asarray(x, dtype=np.float64)
        row_max = np.max(x, axis=axis, keepdims=True)
        e = np.exp(x - np.where(np.isfinite(row_max), row_max, 0))
        total = np.sum(e, axis=axis, keepdims=True)
        return e / np.where(total > 0, total, 1)
    """, tests=("softmax_values",))

bug("attention_np_sqrt_promotes", "scaled_dot_product_attention",
    """The scale is a numpy float64 (np.sqrt of d_k), and a numpy float64 turns float32 scores into float64:
    float32 input must give float32 results. A Python float does not promote, so take the square root with the
    math module.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return weights @ V, weights
    """, tests=("attention_values",))

bug("attention_computed_in_float32", "scaled_dot_product_attention",
    """The attention is computed in float32 whatever the input, so float64 input loses half its digits. Keep
    the input's dtype: cast nothing.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        Q, K, V = (a.astype(np.float32) for a in (Q, K, V))
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return weights @ V, weights
    """, tests=("attention_values",))

bug("attention_mask_large_negative", "scaled_dot_product_attention",
    """Blocked scores get a large negative number instead of -inf. In a row where some keys are open this
    happens to give weight 0, but in a row where every key is blocked all scores are equal and the row gets
    uniform weights: blocked keys receive weight. Blocked must mean weight exactly 0 in every row: -inf, with
    a softmax that gives an all -inf row all-zero weights.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = np.where(mask, -1e9, scores)
        weights = softmax(scores, axis=-1)
        return weights @ V, weights
    """, tests=("attention_mask",))

bug("attention_K_T", "scaled_dot_product_attention",
    """K is transposed with axes counted from the front: K.T reverses *all* its axes (and swapaxes(0, 1) names
    fixed ones), right for one sequence (T_k, d_k), but on a batch (B, T_k, d_k) K.T gives (d_k, T_k, B) and
    moves the batch axis, so the product fails or mixes batch elements. Transpose only the last two axes (T_k
    and d_k), counted from the end, so leading batch axes stay where they are.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ K.T / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return weights @ V, weights
    """, tests=_SDPA_TESTS)

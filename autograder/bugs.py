"""The catalog of realistic learner bugs: data, not prose.

Each entry is the wrong function a learner writes, the lesson and contract function it belongs to, and the
diagnosis the learner should read. The hidden tests use the catalog to name a bug (a learner's result that
equals a catalogued bug's result on the same input gets that bug's diagnosis); the mutation tests build one
submission per entry and prove, through ``nbgrader autograde``, that it loses points with that diagnosis.

``source`` is executed with ``np``, ``math`` and the reference functions in scope, so a bug in a composite
function (``multi_head_attention``) calls correct helpers and differs only by its own mistake.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Bug:
    id: str
    lesson: str
    function: str
    diagnosis: str
    source: str
    # grade_ids of the test cells that must lose points (the broken function's tests); () = derive from lesson
    tests: tuple = ()
    # False when only the hidden tests can see the bug (e.g. values hard-coded for the visible inputs)
    visible: bool = True

    def make(self):
        """The wrong function itself, defined with correct reference helpers around it."""
        from autograder import reference
        namespace = {"np": np, "math": math}
        namespace.update({n: getattr(reference, n) for n in reference.__all__})
        exec(compile(textwrap.dedent(self.source), f"<bug {self.id}>", "exec"), namespace)
        return namespace[self.function]


CATALOG: list = []


def bug(id, lesson, function, diagnosis, source, tests=(), visible=True):
    CATALOG.append(Bug(id, lesson, function, " ".join(diagnosis.split()), textwrap.dedent(source).strip() + "\n",
                       tuple(tests), visible))


def for_function(name: str) -> list:
    return [b for b in CATALOG if b.function == name]


def by_id(bug_id: str) -> Bug:
    for b in CATALOG:
        if b.id == bug_id:
            return b
    raise KeyError(f"no bug {bug_id!r} in the catalog; known: {', '.join(b.id for b in CATALOG)}")


# ---------------------------------------------------------------------------------------------------------
# Lesson 01: softmax and scaled dot-product attention
# ---------------------------------------------------------------------------------------------------------
bug("softmax_no_max_subtraction", "01", "softmax",
    """softmax overflows for large scores: exp(1e4) is inf and inf/inf is NaN. Subtract the maximum along
    `axis` (with keepdims=True) before calling exp; the result is unchanged because softmax(x - c) =
    softmax(x).""",
    """
    def softmax(x, axis=-1):
        e = np.exp(x)
        return e / e.sum(axis=axis, keepdims=True)
    """, tests=("softmax_stable",))

bug("softmax_ignores_axis", "01", "softmax",
    """softmax normalises over the wrong axis: the `axis` argument is ignored. Use it in both the max and the
    sum, with keepdims=True so the result broadcasts back.""",
    """
    def softmax(x, axis=-1):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    """, tests=("softmax_values",))

bug("softmax_no_keepdims", "01", "softmax",
    """softmax divides by a sum taken without keepdims=True, so the sum broadcasts against the wrong axis.
    Keep the reduced axis: x.sum(axis=axis, keepdims=True).""",
    """
    def softmax(x, axis=-1):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / np.expand_dims(e.sum(axis=axis), 0)
    """, tests=("softmax_values",))

_SDPA_TESTS = ("attention_values", "attention_mask")

bug("attention_no_scaling", "01", "scaled_dot_product_attention",
    """The scores are not scaled: divide Q @ K^T by sqrt(d_k), where d_k = Q.shape[-1]. Without it the
    scores' spread grows like sqrt(d_k) and softmax saturates.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2)
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return weights @ V, weights
    """, tests=_SDPA_TESTS)

bug("attention_scaled_by_d_k", "01", "scaled_dot_product_attention",
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

bug("attention_scaled_by_seq_len", "01", "scaled_dot_product_attention",
    """The scores are scaled by the sequence length (K.shape[-2]) instead of the key width d_k = Q.shape[-1]
    (the last axis). The dot product sums over d_k terms; that is what sets the scale.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(K.shape[-2])
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return weights @ V, weights
    """, tests=_SDPA_TESTS)

bug("attention_softmax_query_axis", "01", "scaled_dot_product_attention",
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

bug("attention_mask_inverted", "01", "scaled_dot_product_attention",
    """The mask's polarity is inverted: in this course True marks a *blocked* pair, so the True positions
    must get -inf before softmax (np.where(mask, -np.inf, scores)), not the False ones.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        weights = softmax(scores, axis=-1)
        return weights @ V, weights
    """, tests=("attention_mask",))

bug("attention_mask_after_softmax", "01", "scaled_dot_product_attention",
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

bug("attention_returns_scores", "01", "scaled_dot_product_attention",
    """The returned weights are the raw scores: return softmax(scores), the weights that multiply V.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
        if mask is not None:
            scores = np.where(mask, -np.inf, scores)
        weights = softmax(scores, axis=-1)
        return weights @ V, scores
    """, tests=_SDPA_TESTS)

bug("attention_unnormalised_weights", "01", "scaled_dot_product_attention",
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

bug("attention_weights_transposed", "01", "scaled_dot_product_attention",
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

bug("attention_in_place", "01", "scaled_dot_product_attention",
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

bug("attention_hard_coded", "01", "scaled_dot_product_attention",
    """The function returns values that only fit the visible check's example. It must compute the attention
    of whatever Q, K, V it is given.""",
    """
    def scaled_dot_product_attention(Q, K, V, mask=None):
        import selfcheck
        return selfcheck.EXAMPLE_ATTENTION_OUT.copy(), selfcheck.EXAMPLE_ATTENTION_WEIGHTS.copy()
    """, tests=_SDPA_TESTS, visible=False)

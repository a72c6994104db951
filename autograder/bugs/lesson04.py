"""Catalogued learner bugs of lesson 04: the per-head scale of the scores and the dot-product experiment."""

import math  # noqa: F401 - used inside the bug sources' namespace

import numpy as np  # noqa: F401

from autograder.bugs import declarer

bug = declarer(__name__)

_SCORES = ("head_scores",)


def _scores_source(scale_expr):
    return f"""
    def multi_head_scores(x, W_Q, W_K, n_heads):
        d_model = x.shape[-1]
        d_head = d_model // n_heads
        Q = split_heads(x @ W_Q, n_heads)
        K = split_heads(x @ W_K, n_heads)
        return Q @ np.swapaxes(K, -1, -2) / {scale_expr}
    """


bug("scores_no_scaling", "multi_head_scores",
    """The scores are not scaled at all: divide each head's Q K^T by math.sqrt(d_head). Unscaled, their
    standard deviation grows like sqrt(d_head) and softmax saturates.""",
    _scores_source("1"), tests=_SCORES)

bug("scores_scaled_by_d_k", "multi_head_scores",
    """The scores are divided by d_head instead of sqrt(d_head). The variance of q.k is d_head, so its
    standard deviation, the number to divide by, is sqrt(d_head).""",
    _scores_source("d_head"), tests=_SCORES)

bug("scores_scaled_by_d_model", "multi_head_scores",
    """The scores are scaled by sqrt(d_model) instead of the per-head sqrt(d_head). Inside one head the dot
    product sums over d_head = d_model // n_heads terms, so its spread is sqrt(d_head); dividing by
    sqrt(d_model) shrinks every score by a further sqrt(n_heads) and flattens the weights.""",
    _scores_source("math.sqrt(d_model)"), tests=_SCORES)

bug("scores_scaled_by_seq_len", "multi_head_scores",
    """The scores are scaled by the sequence length (x.shape[-2], the T axis) instead of the head width
    d_head. The dot product sums over the d_head entries of q and k; that sum is what sets the scale.""",
    _scores_source("math.sqrt(x.shape[-2])"), tests=_SCORES)

bug("std_experiment_one_query", "dot_product_std",
    """The experiment draws one query and measures it against n_samples keys, so every dot product shares the
    same q: the spread measures the length of that one q, which changes from seed to seed, instead of the
    spread of q.k over independent pairs. Each sample needs its own q as well as its own k.""",
    """
    def dot_product_std(d_k, n_samples, scaled, rng):
        q = rng.standard_normal(d_k)
        k = rng.standard_normal((n_samples, d_k))
        dots = k @ q
        if scaled:
            dots = dots / math.sqrt(d_k)
        return float(np.std(dots))
    """, tests=("std_experiment",))

bug("std_experiment_variance", "dot_product_std",
    """The experiment returns the variance of q.k (about d_k) rather than its standard deviation (about
    sqrt(d_k)): use np.std, or take the square root of the variance.""",
    """
    def dot_product_std(d_k, n_samples, scaled, rng):
        q = rng.standard_normal((n_samples, d_k))
        k = rng.standard_normal((n_samples, d_k))
        dots = np.sum(q * k, axis=-1)
        if scaled:
            dots = dots / math.sqrt(d_k)
        return float(np.var(dots))
    """, tests=("std_experiment",))

bug("std_experiment_scaled_by_d_k", "dot_product_std",
    """With scaled=True the experiment divides q.k by d_k instead of sqrt(d_k), so the scaled spread falls
    like 1/sqrt(d_k) instead of staying near 1.""",
    """
    def dot_product_std(d_k, n_samples, scaled, rng):
        q = rng.standard_normal((n_samples, d_k))
        k = rng.standard_normal((n_samples, d_k))
        dots = np.sum(q * k, axis=-1)
        if scaled:
            dots = dots / d_k
        return float(np.std(dots))
    """, tests=("std_experiment",))

bug("std_experiment_global_rng", "dot_product_std",
    """The experiment draws from numpy's global random state instead of the `rng` it is given, so the same
    seed does not give the same result. Draw q and k with rng.standard_normal(...).""",
    """
    def dot_product_std(d_k, n_samples, scaled, rng):
        q = np.random.standard_normal((n_samples, d_k))
        k = np.random.standard_normal((n_samples, d_k))
        dots = np.sum(q * k, axis=-1)
        if scaled:
            dots = dots / math.sqrt(d_k)
        return float(np.std(dots))
    """, tests=("std_experiment",))

bug("scores_np_sqrt_promotes", "multi_head_scores",
    """The scale is a numpy float64 (np.sqrt of the head width), and a numpy float64 turns float32 scores into
    float64: float32 input must give float32 scores. A Python float does not promote, so take the square root
    with the math module.""",
    _scores_source("np.sqrt(d_head)"), tests=_SCORES)

bug("scores_computed_in_float32", "multi_head_scores",
    """The scores are computed in float32 whatever the input, so float64 input loses half its digits. Keep the
    input's dtype: cast nothing.""",
    """
    def multi_head_scores(x, W_Q, W_K, n_heads):
        x, W_Q, W_K = (a.astype(np.float32) for a in (x, W_Q, W_K))
        d_head = x.shape[-1] // n_heads
        Q = split_heads(x @ W_Q, n_heads)
        K = split_heads(x @ W_K, n_heads)
        return Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_head)
    """, tests=_SCORES)

bug("scores_fixed_axes", "multi_head_scores",
    """K is transposed with fixed axes (transpose(0, 2, 1)), which swaps T and d_head for one sequence
    (n_heads, T, d_head) but moves the head axis when a batch axis comes first. Swap the last two axes, counted
    from the end, so any number of leading axes passes through.""",
    """
    def multi_head_scores(x, W_Q, W_K, n_heads):
        d_head = x.shape[-1] // n_heads
        Q = split_heads(x @ W_Q, n_heads)
        K = split_heads(x @ W_K, n_heads)
        return Q @ K.transpose(0, 2, 1) / math.sqrt(d_head)
    """, tests=_SCORES)

bug("std_experiment_pairwise_matrix", "dot_product_std",
    """The experiment builds the (n_samples, n_samples) matrix of every query against every key and keeps only
    its diagonal (np.diag(q @ k.T)): the values are right, but it holds n_samples^2 numbers to use n_samples of
    them. Multiply each query by its own key, entry by entry, and sum over the d_k axis.""",
    """
    def dot_product_std(d_k, n_samples, scaled, rng):
        q = rng.standard_normal((n_samples, d_k))
        k = rng.standard_normal((n_samples, d_k))
        dots = np.diag(q @ k.T)
        if scaled:
            dots = dots / math.sqrt(d_k)
        return float(np.std(dots))
    """, tests=("std_experiment",))

bug("std_experiment_theory_formula", "dot_product_std",
    """The experiment returns what theory predicts, sqrt(d_k) (or 1 when scaled), instead of measuring it. The
    point of the experiment is to check footnote 4 of the paper, not to restate it: a measurement from
    n_samples random pairs lands near the prediction but never on it, and with a handful of pairs it lands well
    off, differently for every seed. Draw the pairs from rng, compute each q.k, and return the spread you
    measured.""",
    """
    def dot_product_std(d_k, n_samples, scaled, rng):
        return 1.0 if scaled else math.sqrt(d_k)
    """, tests=("std_experiment",), visible=False)

"""Hidden tests of lesson 04 (d_k scaling): ``multi_head_scores`` and the learner's experiment
``dot_product_std``.

One function per graded test cell, named by the cell's grade_id. The scores are graded on seeded random inputs
whose sizes are all different and chosen so that every wrong scale (none, d_head, d_model, T) gives a different
number. The experiment is random by nature: it is graded against theory with a tolerance far wider than its
sampling error (std of q.k = sqrt(d_k), or 1 after scaling), and for reproducibility (the same seed gives the
same result).
"""

from __future__ import annotations

import math

import numpy as _np

from autograder import reference
from autograder.bugs import by_id
from autograder.checks.dtypes import dtype_kept
from autograder.checks.registry import hidden_test
from autograder.checks.runner import Case, WrongAnswer, call_measuring_memory, check, learner_error, rng_for



def _rng(test_id: str):
    return rng_for(test_id)


def _layout(rng):
    """T, n_heads, d_head, B all different, with every candidate scale distinct: 1, d_head, sqrt(d_head),
    sqrt(d_model), sqrt(T)."""
    while True:
        T, n_heads, d_head, B = (int(v) for v in rng.choice(_np.arange(2, 10), size=4, replace=False))
        d_model = n_heads * d_head
        scales = [1.0, float(d_head), math.sqrt(d_head), math.sqrt(d_model), math.sqrt(T)]
        if all(abs(a - b) > 1e-6 for i, a in enumerate(scales) for b in scales[i + 1:]):
            return dict(T=T, n_heads=n_heads, d_head=d_head, B=B, d_model=d_model)


def _inputs(rng, lead, d, dtype=_np.float64):
    x = rng.normal(size=(*lead, d["T"], d["d_model"])).astype(dtype)
    W_Q = (rng.normal(size=(d["d_model"], d["d_model"])) / math.sqrt(d["d_model"])).astype(dtype)
    W_K = (rng.normal(size=(d["d_model"], d["d_model"])) / math.sqrt(d["d_model"])).astype(dtype)
    return x, W_Q, W_K, d["n_heads"]


@hidden_test(uses=('multi_head_scores',), helpers=('split_heads',), visible_check='check_multi_head_scores')
def head_scores(multi_head_scores, split_heads=None):
    """Unbatched, batched, two batch axes, float32; float32 must stay float32 and float64 float64. Graded with
    the reference split_heads bound in: this lesson gives split_heads, and lesson 02 grades it."""
    rng = _rng("head_scores")
    d = _layout(rng)
    cases = [
        Case(_inputs(rng, (), d), label="unbatched"),
        Case(_inputs(rng, (d["B"],), d), label="batched"),
        Case(_inputs(rng, (d["B"], 2 if d["B"] != 2 else 3), d), label="two batch axes"),
        Case(_inputs(rng, (d["B"],), d, _np.float32), label="float32"),
    ]
    bind = {"split_heads": reference.split_heads}
    check("multi_head_scores", multi_head_scores, cases, rtol=1e-4, atol=1e-6, bind=bind)
    dtype_kept("multi_head_scores", multi_head_scores,
               [Case(_inputs(rng, (), d, dtype), label=f"unbatched, {_np.dtype(dtype).name}")
                for dtype in (_np.float32, _np.float64)], bind=bind)


# --------------------------------------------------------------------------------------------- the experiment
_D_KS = (4, 32, 256)
_N_SAMPLES = 4000
# Relative standard error of a sample std is sqrt((kurtosis - 1) / (4 n)); q.k has kurtosis 3 + 6/d_k, at
# most 4.5 here, so at n = 4000 it is under 1.5%. 10% is more than 6 standard errors: a correct experiment
# with any seed passes, while every wrong one is off by a factor of 2 or more.
_REL_TOL = 0.10


def _value(fn, d_k, scaled, seed):
    try:
        got = fn(d_k, _N_SAMPLES, scaled, _np.random.default_rng(seed))
    except NotImplementedError:
        raise WrongAnswer("dot_product_std is not implemented yet: replace `raise NotImplementedError()` in its "
                          "cell with your code, run that cell, then run this one again.") from None
    except Exception as exc:
        raise learner_error("dot_product_std", exc, f"(d_k={d_k}, n_samples={_N_SAMPLES}, scaled={scaled}, rng)") \
            from None
    if type(got) in (float, int) or type(got) in {type(_np.float64(0)), type(_np.float32(0))}:
        value = float(got)
        if value == value:
            return value
    raise WrongAnswer(f"dot_product_std should return one number (a float), got {type(got).__name__}"
                      + (" NaN" if type(got) is float else ""))


def _diagnose(d_k, scaled, got, expected):
    """The catalogued bug whose typical result is ``got``, else a plain statement of the numbers."""
    ratio = got / expected
    guesses = [("std_experiment_variance", expected ** 2)]
    if scaled:
        guesses.append(("std_experiment_scaled_by_d_k", 1 / math.sqrt(d_k)))
    for bug_id, typical in guesses:
        if abs(got / typical - 1) <= _REL_TOL:
            b = by_id(bug_id)
            return f"{b.diagnosis} [{b.id}]"
    if scaled and abs(got / math.sqrt(d_k) - 1) <= _REL_TOL:
        return ("with scaled=True the dot products are not divided by sqrt(d_k): the std still grows like "
                "sqrt(d_k) instead of staying near 1")
    if abs(ratio * math.sqrt(3) - 1) <= _REL_TOL or abs(ratio * 3 - 1) <= _REL_TOL:
        return ("the entries of q and k do not have variance 1 (uniform numbers on [-1, 1] have variance "
                "1/3): draw them with rng.standard_normal")
    return "the measured standard deviation is not what q.k of unit-variance vectors gives"


@hidden_test(uses=('dot_product_std',), visible_check='check_dot_product_std')
def std_experiment(dot_product_std):
    """std of q.k about sqrt(d_k) unscaled and about 1 scaled, within 10%, for several d_k; and the same seed
    twice gives the same value (the experiment draws from the rng it is given)."""
    if not callable(dot_product_std):
        raise WrongAnswer(f"dot_product_std should be a function, got {type(dot_product_std).__name__}")
    seed = int(_rng("std_experiment").integers(1, 2**31))
    for d_k in _D_KS:
        for scaled in (False, True):
            got = _value(dot_product_std, d_k, scaled, seed + d_k)
            expected = 1.0 if scaled else math.sqrt(d_k)
            if not abs(got / expected - 1) <= _REL_TOL:
                raise WrongAnswer(f"{_diagnose(d_k, scaled, got, expected)} (d_k={d_k}, n_samples={_N_SAMPLES}, "
                                  f"scaled={scaled}: got {got:.4g}, expected about {expected:.4g}, within "
                                  f"{_REL_TOL:.0%})")
    again = [_value(dot_product_std, _D_KS[0], False, seed) for _ in range(2)]
    if again[0] != again[1]:
        b = by_id("std_experiment_global_rng")
        raise WrongAnswer(f"{b.diagnosis} [{b.id}] (two calls with rng=np.random.default_rng({seed}) gave "
                          f"{again[0]:.6g} and {again[1]:.6g})")
    no_pairwise_matrix(dot_product_std)


# The lesson asks for one q.k per pair, not np.diag(q @ k.T): the values are the same, but the (n_samples,
# n_samples) product holds n_samples^2 numbers to use n_samples of them. Only the memory shows it, and it shows it
# without doubt: at n_samples = 4000 and d_k = 4 the right computation holds three (4000, 4) arrays, under 0.4 MB,
# while the product alone is 122 MB; the limit, a quarter of that product, is 80 times the first and 4 times below
# the second. (Time would say the same, but on a shared machine time is noise; memory is counted exactly.)
_PAIRS_N, _PAIRS_D_K = 4000, 4


def no_pairwise_matrix(dot_product_std):
    """The experiment never holds an (n_samples, n_samples) array (measured with tracemalloc in the kernel)."""
    rng = _np.random.default_rng(int(_rng("std_experiment_memory").integers(1, 2**31)))
    case = Case((_PAIRS_D_K, _PAIRS_N, False, rng), label=f"d_k={_PAIRS_D_K}, n_samples={_PAIRS_N}, scaled=False")
    _, peak = call_measuring_memory(dot_product_std, case, "dot_product_std")
    if peak < 0:
        raise WrongAnswer("dot_product_std stopped Python's memory tracing (tracemalloc.stop()), so its memory "
                          "cannot be measured; remove that call")
    square = _PAIRS_N * _PAIRS_N * 8
    if peak > square // 4:
        b = by_id("std_experiment_pairwise_matrix")
        raise WrongAnswer(f"{b.diagnosis} [{b.id}] (on input {case.describe()}: peak {peak / 2**20:.1f} MB; one "
                          f"({_PAIRS_N}, {_PAIRS_N}) float64 matrix is {square / 2**20:.1f} MB)")

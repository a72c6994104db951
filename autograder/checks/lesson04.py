"""Hidden tests of lesson 04 (d_k scaling): ``multi_head_scores`` and the learner's experiment
``dot_product_std``.

One function per graded test cell, named by the cell's grade_id. The scores are graded on seeded random inputs
whose sizes are all different and chosen so that every wrong scale (none, d_head, d_model, T) gives a different
number. The experiment is random by nature: it is graded against theory with a tolerance far wider than its
sampling error (std of q.k = sqrt(d_k), or 1 after scaling), for reproducibility (the same seed gives the same
result), and, because a number that matches theory proves nothing by itself, on inputs where theory is the wrong
answer: with five samples a measured standard deviation lands tens of percent from sqrt(d_k), differently for every
seed, so a function that returns the theory's formula instead of measuring fails while every honest experiment
passes. Its memory (no (n_samples, n_samples) product) is counted with tracemalloc where the function runs in this
process; in the kernel, whose own count a notebook could forge, it runs at an n_samples whose (n, n) float64
matrix is larger than the kernel may hold.
"""

from __future__ import annotations

import math

import numpy as _np

from autograder import reference
from autograder.bugs import by_id
from autograder.checks import bug_match
from autograder.checks.registry import hidden_test
from autograder.checks.runner import (Case, against_reference, call_measuring_memory, call_within_memory, dtype_kept,
                                      learner_error, memory_limit, rng_for, side_beyond)
from autograder.checks.verdict import WrongAnswer



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
    stand_ins = {"split_heads": reference.split_heads}
    against_reference("multi_head_scores", multi_head_scores, cases, rtol=1e-4, atol=1e-6, stand_ins=stand_ins)
    dtype_kept("multi_head_scores", multi_head_scores,
               [Case(_inputs(rng, (), d, dtype), label=f"unbatched, {_np.dtype(dtype).name}")
                for dtype in (_np.float32, _np.float64)], stand_ins=stand_ins)


# --------------------------------------------------------------------------------------------- the experiment
_D_KS = (2, 8, 32)
_N_SAMPLES = 4000
# Relative standard error of a sample std is sqrt((kurtosis - 1) / (4 n)); q.k has kurtosis 3 + 6/d_k, at
# most 6 here, so at n = 4000 it is under 1.8%. 10% is more than 5.5 standard errors: a correct experiment
# with any seed passes, while every wrong formula is off by a factor of 1.4 or more.
_REL_TOL = 0.10
# Independence: the results of _N_SEEDS seeds at d_k = _D_K_SPREAD must each land within _REL_TOL. An
# experiment that reuses one q for every k measures |q| (a chi-distributed number) instead of sqrt(d_k): it lands
# within 10% for one seed with probability about 0.15, for all of them about 0.15 ** 12 < 1e-9.
_D_K_SPREAD = 2
_N_SEEDS = 12
# Theory is the wrong answer for a few samples: at n_samples = 5 the std of q.k measured for _N_SEEDS seeds at
# d_k = 2 scatters with a coefficient of variation near 0.45 (never below 0.11 in 200,000 simulated sets of 12
# seeds), whichever way the pairs are drawn; a formula gives the same number for every seed (variation 0). The
# limit, 0.05, fails a formula and passes every honest experiment for every grading salt.
_FEW_SAMPLES = 5
_MIN_VARIATION = 0.05


def _value(fn, d_k, scaled, seed, n_samples=_N_SAMPLES):
    try:
        got = fn(d_k, n_samples, scaled, _np.random.default_rng(seed))
    except NotImplementedError:
        raise WrongAnswer("dot_product_std is not implemented yet: replace `raise NotImplementedError()` in its "
                          "cell with your code, run that cell, then run this one again.") from None
    except Exception as exc:
        raise learner_error("dot_product_std", exc, f"(d_k={d_k}, n_samples={n_samples}, scaled={scaled}, rng)") \
            from None
    if type(got) in (float, int) or type(got) in {type(_np.float64(0)), type(_np.float32(0))}:
        value = float(got)
        if value == value:
            return value
    raise WrongAnswer(f"dot_product_std should return one number (a float), got {type(got).__name__}"
                      + (" NaN" if type(got) is float else ""))


# The typical result of each catalogued formula bug, (d_k, scaled) -> (value, tolerance): named only when *every*
# measured value lies within the tolerance of it (no two of these agree at every d_k, and the correct value
# differs from each). A sample variance scatters twice as much as a sample std.
_TYPICAL = {
    "std_experiment_variance": lambda d_k, scaled: (1.0 if scaled else float(d_k), 2 * _REL_TOL),
    "std_experiment_scaled_by_d_k": lambda d_k, scaled: (1 / math.sqrt(d_k) if scaled else math.sqrt(d_k), _REL_TOL),
}


def _same_as_bug(bug, results, n_samples=_N_SAMPLES):
    """True when the catalogued bug gives exactly the learner's numbers for the same seeds."""
    wrong = bug.make()
    for (d_k, scaled, seed), got in results.items():
        try:
            with _np.errstate(all="ignore"):
                theirs = float(wrong(d_k, n_samples, scaled, _np.random.default_rng(seed)))
        except Exception:
            return False
        if not abs(theirs - got) <= 1e-9 * abs(got):
            return False
    return True


def _diagnose(results, typical=True, n_samples=_N_SAMPLES):
    """The catalogued bug whose typical value every result of ``results`` {(d_k, scaled, seed):
    value} agrees with (``typical``: tried first, it costs nothing), or that gives exactly those results for the
    same seeds (each run with ``n_samples``); else None."""
    for bug_id, value in _TYPICAL.items() if typical else ():
        if all(abs(got / value(d_k, scaled)[0] - 1) <= value(d_k, scaled)[1]
               for (d_k, scaled, _), got in results.items()):
            return by_id(bug_id)
    return bug_match.first_fit("dot_product_std", lambda b: _same_as_bug(b, results, n_samples))


def _wrong(bug, otherwise: str, detail: str) -> WrongAnswer:
    """The failure: ``bug`` named (when the results are a catalogued bug's), else ``otherwise``; then ``detail``."""
    return WrongAnswer.naming(bug, detail) if bug is not None else WrongAnswer(f"{otherwise} ({detail})")


def _table(results):
    return "; ".join(f"d_k={d_k}, scaled={scaled}: got {got:.4g}, expected about "
                     f"{1.0 if scaled else math.sqrt(d_k):.4g}" for (d_k, scaled, _), got in results.items())


@hidden_test(uses=('dot_product_std',), visible_check='check_dot_product_std')
def std_experiment(dot_product_std):
    """std of q.k about sqrt(d_k) unscaled and about 1 scaled, within 10%, for several d_k; the n_samples pairs
    are independent (a dozen seeds at d_k = 2 all land within 10%); the same seed twice gives the same value
    (the experiment draws from the rng it is given); and with five samples the results scatter from seed to seed
    as measurements do (a formula does not)."""
    if not callable(dot_product_std):
        raise WrongAnswer(f"dot_product_std should be a function, got {type(dot_product_std).__name__}")
    no_pairwise_matrix(dot_product_std)  # first: an (n_samples, n_samples) product makes every later call slow
    seed = int(_rng("std_experiment").integers(1, 2**31))
    results = {(d_k, scaled, seed + d_k): _value(dot_product_std, d_k, scaled, seed + d_k)
               for d_k in _D_KS for scaled in (False, True)}
    wrong = {key: got for key, got in results.items()
             if not abs(got / (1.0 if key[1] else math.sqrt(key[0])) - 1) <= _REL_TOL}
    if wrong:
        raise _wrong(_diagnose(results), "the measured standard deviation is not what q.k of independent "
                     "unit-variance vectors gives: check how q and k are drawn, the sum over the d_k axis, the scale "
                     "and the statistic returned", f"n_samples={_N_SAMPLES}: {_table(wrong)}, within {_REL_TOL:.0%}")
    spread = {(_D_K_SPREAD, False, seed + i): _value(dot_product_std, _D_K_SPREAD, False, seed + i)
              for i in range(_N_SEEDS)}
    expected = math.sqrt(_D_K_SPREAD)
    if any(not abs(got / expected - 1) <= _REL_TOL for got in spread.values()):
        values = ", ".join(f"{got:.3g}" for got in spread.values())
        raise _wrong(_diagnose(spread, typical=False),
                     f"the result scatters from seed to seed far more than the sampling error of {_N_SAMPLES} "
                     "independent pairs allows: check that every pair has its own q and its own k",
                     f"d_k={_D_K_SPREAD}, n_samples={_N_SAMPLES}, {_N_SEEDS} seeds: got {values}; each should be "
                     f"within {_REL_TOL:.0%} of {expected:.4g}")
    again = [_value(dot_product_std, _D_KS[0], False, seed) for _ in range(2)]
    if again[0] != again[1]:
        b = by_id("std_experiment_global_rng")
        raise WrongAnswer.naming(b, f"two calls with rng=np.random.default_rng({seed}) gave "
                                    f"{again[0]:.6g} and {again[1]:.6g}")
    measured(dot_product_std, seed)


def measured(dot_product_std, seed):
    """With _FEW_SAMPLES pairs, the results of _N_SEEDS seeds vary as measurements do: theory is not the answer."""
    few = {(_D_K_SPREAD, False, seed + 100 + i): _value(dot_product_std, _D_K_SPREAD, False, seed + 100 + i,
                                                         _FEW_SAMPLES) for i in range(_N_SEEDS)}
    values = _np.array(list(few.values()))
    variation = float(values.std() / abs(values.mean())) if values.mean() != 0 else 0.0
    if not variation >= _MIN_VARIATION:
        shown = ", ".join(f"{got:.3g}" for got in values)
        raise _wrong(_diagnose(few, typical=False, n_samples=_FEW_SAMPLES),
                     "with a handful of samples a measured standard deviation lands well off sqrt(d_k), differently "
                     "for every seed, but these results hardly vary: check that the result is computed from the pairs "
                     "drawn from rng", f"d_k={_D_K_SPREAD}, n_samples={_FEW_SAMPLES}, {_N_SEEDS} seeds: got {shown}; "
                     f"measurements from {_FEW_SAMPLES} pairs vary from seed to seed by tens of percent")


# The lesson asks for one q.k per pair, not np.diag(q @ k.T): the values are the same, but the (n_samples,
# n_samples) product holds n_samples^2 numbers to use n_samples of them. Only the memory shows it, and it shows it
# without doubt: at n_samples = 1000 and d_k = 4 the right computation holds three (1000, 4) arrays, under 0.1 MB,
# while the product alone is 7.6 MB; the limit, a quarter of that product, is 20 times the first and 4 times below
# the second. (Time would say the same, but on a shared machine time is noise; memory is counted exactly.) In the
# kernel, whose count a notebook could rewrite, the experiment runs at the n_samples whose (n, n) float64 matrix is
# larger than the kernel may hold: the product fails with MemoryError, while the right computation holds under 2 MB.
_PAIRS_N, _PAIRS_D_K = 1000, 4


def no_pairwise_matrix(dot_product_std):
    """The experiment never holds an (n_samples, n_samples) array: counted with tracemalloc when it runs in this
    process; in the kernel, it runs at an n_samples whose (n, n) float64 matrix the kernel cannot hold."""
    rng = _np.random.default_rng(int(_rng("std_experiment_memory").integers(1, 2**31)))
    limit = memory_limit(dot_product_std)
    n = _PAIRS_N if limit is None else side_beyond(limit)
    case = Case((_PAIRS_D_K, n, False, rng), label=f"d_k={_PAIRS_D_K}, n_samples={n}, scaled=False")
    b = by_id("std_experiment_pairwise_matrix")
    if limit is not None:
        _, ran_out = call_within_memory(dot_product_std, case, "dot_product_std")
        if ran_out:
            raise WrongAnswer.naming(b, f"on input {case.describe()}: it ran out of memory; one ({n}, "
                                        f"{n}) float64 matrix is {n * n * 8 / 2**30:.1f} GB, more than the "
                                        f"{limit / 2**30:.1f} GB the kernel may hold")
        return
    _, peak = call_measuring_memory(dot_product_std, case, "dot_product_std")
    if peak < 0:
        raise WrongAnswer("dot_product_std stopped Python's memory tracing (tracemalloc.stop()), so its memory "
                          "cannot be measured; remove that call")
    square = _PAIRS_N * _PAIRS_N * 8
    if peak > square // 4:
        raise WrongAnswer.naming(b, f"on input {case.describe()}: peak {peak / 2**20:.1f} MB; one "
                                    f"({_PAIRS_N}, {_PAIRS_N}) float64 matrix is {square / 2**20:.1f} MB")

"""Lesson 09's catalogued bugs (``autograder/bugs/lesson09.py``) each lose points: every one, built with
``bug.make()``, differs from the reference on seeded random inputs of the kinds the hidden tests use (batched
(B, T, d_model) and unbatched, float64, every size different), or raises, or modifies its input.

sample_next's bugs are compared by their distribution: 4000 seeded draws against ``next_token_probabilities``
(a draw outside its support, or a total-variation distance or a chi-square far beyond sampling noise). generate's
bugs run a small random model (n_vocab 11, d_model 8, 2 heads, 2 blocks, 16 positions), greedy and seeded.
"""

import copy
import inspect
import math

import numpy as np
import pytest

from autograder import bugs, course
from autograder.reference import lesson09 as ref09

GRADE_IDS = {"layer_norm": "layer_norm_values", "layer_norm_backward": "layer_norm_backward_values",
             "gelu_backward": "gelu_backward_values", "mlp_backward": "mlp_backward_values",
             "cross_entropy": "cross_entropy_values", "embedding_backward": "embedding_backward_values",
             "block_backward": "block_backward_values", "sample_next": "sample_next_values",
             "generate": "generate_values", "ablate_head": "ablate_head_values",
             "k_composition": "k_composition_values"}
MIN_BUGS = {name: 5 for name in GRADE_IDS} | {"block_backward": 8, "generate": 7}
DRAWS = 4000


# ---------------------------------------------------------------------------------------------- the catalogue
@pytest.fixture(scope="module")
def lesson09():
    """{function: [its lesson 09 bugs]}."""
    by_function = {}
    for b in bugs.CATALOG:
        if course.lesson_number(b.lesson) == "09":
            by_function.setdefault(b.function, []).append(b)
    return by_function


def test_every_bug_names_its_hidden_test_and_every_function_has_enough(lesson09):
    everyone = [b for found in lesson09.values() for b in found]
    assert sorted(lesson09) == sorted(GRADE_IDS)
    assert len({b.id for b in everyone}) == len(everyone)
    for b in everyone:
        assert b.tests == (GRADE_IDS[b.function],), b.id
        assert b.id.startswith(b.function + "_"), b.id
        assert b.visible and not b.given, b.id
        assert "np." not in b.diagnosis and "==" not in b.diagnosis, f"{b.id}: code in the diagnosis"
        assert inspect.signature(b.make()) == inspect.signature(getattr(ref09, b.function)), b.id
    short = {f: len(found) for f, found in lesson09.items() if len(found) < MIN_BUGS[f]}
    assert not short, f"functions with too few bugs: {short}"


# -------------------------------------------------------------------------------------------------- inputs
def _block(rng, d_model, d_ff):
    n = lambda *shape, scale=1.0: rng.normal(size=shape) * scale  # noqa: E731
    return {"gamma_1": 1 + n(d_model, scale=0.3), "beta_1": n(d_model, scale=0.3),
            "W_Q": n(d_model, d_model, scale=d_model ** -0.5), "W_K": n(d_model, d_model, scale=d_model ** -0.5),
            "W_V": n(d_model, d_model, scale=d_model ** -0.5), "W_O": n(d_model, d_model, scale=d_model ** -0.5),
            "gamma_2": 1 + n(d_model, scale=0.3), "beta_2": n(d_model, scale=0.3),
            "W_1": n(d_model, d_ff, scale=d_model ** -0.5), "b_1": n(d_ff, scale=0.3),
            "W_2": n(d_ff, d_model, scale=d_ff ** -0.5), "b_2": n(d_model, scale=0.3)}


def _cases(function):
    """Positional argument tuples for ``function``: batched, unbatched and, where it matters, extreme."""
    rng = np.random.default_rng(9)
    n = rng.normal
    if function == "layer_norm":
        return [(n(size=(3, 5, 8)), 1 + 0.3 * n(size=8), 0.3 * n(size=8)),
                (n(size=(6, 10)) * 2 + 1, 1 + 0.3 * n(size=10), 0.3 * n(size=10)),
                (1e-3 * n(size=(2, 4, 12)) + 5, 1 + 0.3 * n(size=12), 0.3 * n(size=12))]  # variance near eps
    if function == "layer_norm_backward":
        return [(n(size=(3, 5, 8)), 1 + 0.3 * n(size=8), n(size=(3, 5, 8))),
                (n(size=(6, 10)) * 2 + 1, 1 + 0.3 * n(size=10), n(size=(6, 10))),
                (1e-3 * n(size=(2, 4, 12)) + 5, 1 + 0.3 * n(size=12), n(size=(2, 4, 12)))]
    if function == "gelu_backward":
        return [(2 * n(size=(3, 5, 16)), n(size=(3, 5, 16))), (2 * n(size=(7, 9)), n(size=(7, 9)))]
    if function == "mlp_backward":
        return [(n(size=(3, 5, 8)), n(size=(8, 32)) / 3, n(size=32) * 0.3, n(size=(32, 8)) / 6, n(size=8) * 0.3,
                 n(size=(3, 5, 8))),
                (n(size=(6, 12)), n(size=(12, 48)) / 3, n(size=48) * 0.3, n(size=(48, 12)) / 6, n(size=12) * 0.3,
                 n(size=(6, 12)))]
    if function == "cross_entropy":
        return [(2 * n(size=(3, 5, 11)), rng.integers(0, 11, size=(3, 5))),
                (2 * n(size=(7, 13)), rng.integers(0, 13, size=7)),
                (1000 * n(size=(4, 9)), rng.integers(0, 9, size=4))]  # logits around 1000
    if function == "embedding_backward":  # repeated tokens, and the last two kinds never occur
        return [(rng.integers(0, 11, size=(3, 7)), n(size=(3, 7, 6)), 13),
                (np.array([4, 2, 4, 0, 14, 2, 4, 9, 1]), n(size=(9, 5)), 17)]
    if function == "block_backward":
        return [(n(size=(2, 5, 8)), _block(rng, 8, 32), 2, n(size=(2, 5, 8)), np.triu(np.ones((5, 5), bool), k=1)),
                (n(size=(6, 12)), _block(rng, 12, 48), 3, n(size=(6, 12)), None)]
    if function == "ablate_head":
        return [(n(size=(2, 5, 12)), 3, 1), (n(size=(7, 10)), 2, 0)]
    if function == "k_composition":
        return [tuple(n(size=(12, 12)) for _ in range(4)) + (3,), tuple(n(size=(8, 8)) for _ in range(4)) + (2,)]
    raise KeyError(function)


# ----------------------------------------------------------------------------------------------- comparing
class _Raised:
    def __init__(self, error):
        self.error = error

    def __repr__(self):
        return f"raised {type(self.error).__name__}: {self.error}"


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, _Raised) or isinstance(b, _Raised):
        return isinstance(a, _Raised) and isinstance(b, _Raised) and type(a.error) is type(b.error)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-6, atol=1e-9, equal_nan=True))


def _outcome(fn, args):
    """(what fn returned or raised, whether it left its arguments as they were)."""
    kept = copy.deepcopy(args)
    try:
        with np.errstate(all="ignore"):
            out = fn(*args)
    except Exception as error:  # noqa: BLE001 - a bug that raises where the reference does not loses points
        out = _Raised(error)
    return out, _same(kept, args)


DETERMINISTIC = [f for f in GRADE_IDS if f not in ("sample_next", "generate")]


@pytest.mark.parametrize("function", DETERMINISTIC)
def test_each_bug_differs_from_the_reference(lesson09, function):
    cases = _cases(function)
    expected = [_outcome(getattr(ref09, function), copy.deepcopy(args)) for args in cases]
    assert all(untouched and not isinstance(out, _Raised) for out, untouched in expected)
    alike, seen = [], {}
    for b in lesson09[function]:
        outcomes = [_outcome(b.make(), copy.deepcopy(args)) for args in cases]
        if all(_same(out, want) and untouched for (out, untouched), (want, _) in zip(outcomes, expected)):
            alike.append(b.id)
        for other, theirs in seen.items():  # two bugs that always agree could not be told apart by the hidden tests
            assert not all(_same(o, t) and u == v for (o, u), (t, v) in zip(outcomes, theirs)), (b.id, other)
        seen[b.id] = outcomes
    assert not alike, f"bugs that behave as the reference on every case: {alike}"


# ----------------------------------------------------------------------------------------------- sampling
SETTINGS = [(0.5, None), (1.5, None), (0.5, 3), (1.5, 5), (0.5, 5), (1.5, 3)]  # (temperature, top_k)

# the case the comment above each bug names (its first): a draw of 4000 must show the bug there
SHOWN_BY = {"sample_next_top_k_plus_one": (0.5, 3), "sample_next_top_k_smallest": (1.5, 5),
            "sample_next_ignores_top_k": (1.5, 3), "sample_next_top_k_masked_with_zero": (0.5, 5),
            "sample_next_uniform_over_top_k": (0.5, 3), "sample_next_temperature_after_softmax": (0.5, None),
            "sample_next_temperature_multiplied": (1.5, None), "sample_next_always_greedy": (1.5, None),
            "sample_next_temperature_zero_as_default": (0.0, None)}


def _logits(n_vocab):
    return np.random.default_rng(n_vocab).normal(size=n_vocab) * 1.5


def _departure(sample_next, logits, temperature, top_k, seed=5):
    """How far ``DRAWS`` draws of sample_next stand from next_token_probabilities: (outside the support, total
    variation, chi-square over the support, degrees of freedom); None where sample_next raised."""
    p = ref09.next_token_probabilities(logits, temperature, top_k)
    rng = np.random.default_rng(seed)
    try:
        with np.errstate(all="ignore"):
            draws = np.array([sample_next(logits, rng, temperature, top_k) for _ in range(DRAWS)])
    except Exception:  # noqa: BLE001 - raising where the reference draws loses points
        return None
    if draws.min() < 0 or draws.max() >= len(p):
        return None
    freq = np.bincount(draws, minlength=len(p)) / DRAWS
    support = p > 0
    chi2 = DRAWS * float((((freq - p) ** 2)[support] / p[support]).sum())
    return float(freq[~support].sum()), 0.5 * float(np.abs(freq - p).sum()), chi2, int(support.sum()) - 1


def _differs(departure) -> bool:
    if departure is None:
        return True
    outside, tv, chi2, df = departure
    return outside > 0 or tv > 0.08 or chi2 > df + 10 * math.sqrt(2 * max(df, 1)) + 20  # p far below 1e-6


def test_the_reference_passes_the_distribution_test():
    for i, (temperature, top_k) in enumerate(SETTINGS[:3]):
        logits = _logits((12, 23, 30)[i])
        departure = _departure(ref09.sample_next, logits, temperature, top_k)
        assert not _differs(departure), (temperature, top_k, departure)


def test_each_sample_next_bug_changes_the_distribution(lesson09):
    found = {b.id: b for b in lesson09["sample_next"]}
    assert sorted(found) == sorted(SHOWN_BY), "name the case that shows each sample_next bug in SHOWN_BY"
    # every bug shows on one of SETTINGS, but the one that mistakes temperature 0 (greedy: all on the largest logit)
    assert all(case in SETTINGS for case in SHOWN_BY.values() if case[0] != 0)
    alike = {}
    for bug_id, (temperature, top_k) in SHOWN_BY.items():
        wrong = found[bug_id].make()
        for n_vocab in (17, 26):  # 10 to 30 tokens
            if not _differs(departure := _departure(wrong, _logits(n_vocab), temperature, top_k)):
                alike[bug_id] = (n_vocab, departure)
    assert not alike, f"bugs that sample as the reference does: {alike}"


# --------------------------------------------------------------------------------------------- generation
def _model(seed=0, n_vocab=11, d_model=8, n_blocks=2, T_max=16):
    rng = np.random.default_rng(seed)
    return {"E": rng.normal(size=(n_vocab, d_model)), "P": 0.5 * rng.normal(size=(T_max, d_model)),
            "blocks": [_block(rng, d_model, 4 * d_model) for _ in range(n_blocks)],
            "gamma_f": 1 + 0.3 * rng.normal(size=d_model), "beta_f": 0.3 * rng.normal(size=d_model),
            "W_U": 2 * rng.normal(size=(d_model, n_vocab)) / math.sqrt(d_model)}


# (prompt, n_new, temperature, top_k, seed): greedy, then seeded draws
GENERATIONS = [([3, 1, 4, 1], 6, 0.0, None, 0), ([7, 2, 9], 8, 0.0, None, 0), ([3, 1, 4, 1], 6, 1.0, None, 1),
               ([7, 2, 9], 8, 0.8, 4, 2), ([5, 0], 10, 1.3, None, 3)]


def _generated(generate, params, case):
    prompt, n_new, temperature, top_k, seed = case
    try:
        return generate(params, 2, list(prompt), n_new, np.random.default_rng(seed), temperature, top_k)
    except Exception as error:  # noqa: BLE001
        return _Raised(error)


def test_the_model_is_the_lessons_shape():
    params = _model()
    assert sorted(params["blocks"][0]) == sorted(ref09.BLOCK_KEYS)
    # greedy generation from the cache equals greedy decoding with the whole model recomputed
    tokens = ref09.generate(params, 2, [3, 1, 4, 1], 6, np.random.default_rng(0), 0.0)
    for t in range(4, len(tokens)):
        assert tokens[t] == int(np.argmax(ref09.gpt_logits(params, 2, np.array(tokens[:t]))[-1]))
    assert len(set(tokens[4:])) > 1  # the model does not just repeat one token


def test_each_generate_bug_differs_greedy_or_seeded(lesson09):
    params = _model()
    expected = [_generated(ref09.generate, params, case) for case in GENERATIONS]
    assert not any(isinstance(e, _Raised) for e in expected)
    alike, seen = [], {}
    for b in lesson09["generate"]:
        got = [_generated(b.make(), params, case) for case in GENERATIONS]
        if all(_same(g, e) for g, e in zip(got, expected)):
            alike.append(b.id)
        for other, theirs in seen.items():
            assert not all(_same(g, t) for g, t in zip(got, theirs)), (b.id, other)
        seen[b.id] = got
    assert not alike, f"bugs that generate as the reference does: {alike}"

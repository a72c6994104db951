"""Hidden tests of lesson 03 (parameter count): ``mha_param_count``, the d_model=512 exercise,
``gqa_param_count`` and ``kv_cache_bytes_per_token``.

One function per graded test cell, named by the cell's grade_id. The sizes are seeded random (different on every
test, never the visible example's), plus the real models the lesson discusses. Counts are compared as exact
Python integers: a result must be a genuine ``int`` (or numpy integer); an object with a rigged ``__eq__`` or a
float is refused with a message.
"""

from __future__ import annotations

import numpy as _np

from autograder import reference
from autograder.checks import bug_match
from autograder.checks.registry import hidden_test
from autograder.checks.runner import standing_in, learner_error, rng_for
from autograder.checks.verdict import WrongAnswer

_NUMPY_INTS: frozenset = frozenset(type(_np.zeros(1, dtype=c)[0]) for c in "bhilqBHILQ")



_INSPECT = {
    "mha_param_count": "which matrices the layer owns, how large each is, and how many bias vectors there are",
    "gqa_param_count": "the width of W_K and W_V (how many key/value heads, of which head width) and the biases",
    "kv_cache_bytes_per_token": "what is stored per layer and per key/value head, and the bytes of each value",
}


def _rng(test_id: str):
    return rng_for(test_id)


def _as_int(got, what):
    """``got`` as an exact Python int, or a WrongAnswer saying why it cannot be one."""
    if type(got) is int:
        return int.__int__(got)
    if type(got) in _NUMPY_INTS:
        return int(got)
    if type(got) is float and float.is_integer(got):
        raise WrongAnswer(f"{what} returned the float {got!r}; a count is a whole number: return an int "
                          "(use // for division, or int(...))")
    raise WrongAnswer(f"{what} should return an int, got {type(got).__name__}")


def _describe(args, kwargs):
    return "(" + ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]) + ")"


def _count_of(fn, name, args, kwargs):
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise WrongAnswer(f"{name} is not implemented yet: replace `raise NotImplementedError()` in its cell "
                          "with your code, run that cell, then run this one again.") from None
    except WrongAnswer:
        raise
    except Exception as exc:
        raise learner_error(name, exc, _describe(args, kwargs)) from None


def _matching_bug(name, observed):
    """The catalog bug of ``name`` that gives the learner's count on every case of ``observed`` [(args, kwargs,
    count)], or None (also when bugs with different diagnoses fit)."""
    return bug_match.agreed_fit(name, lambda b: all(_bug_count(b, args, kwargs) == got
                                                    for args, kwargs, got in observed))


def _bug_count(b, args, kwargs):
    try:
        wrong = b.make()(*args, **kwargs)
    except Exception:
        return None
    return wrong if type(wrong) is int else None


def check_counts(name, fn, cases, stand_ins=None, inspect=None):
    """Grade an integer-valued function on ``cases`` [(args, kwargs)] against the reference of the same name.

    After the first wrong count the remaining cases still run, as evidence: a catalogued bug is named only when
    it gives the learner's count on every case."""
    if not callable(fn):
        raise WrongAnswer(f"{name} should be a function, got {type(fn).__name__}")
    ref = getattr(reference, name)
    observed, problem = [], None
    for args, kwargs in cases:
        if problem is None:
            with standing_in(fn, stand_ins or {}):
                got = _as_int(_count_of(fn, name, args, kwargs), name)
        else:
            try:
                with standing_in(fn, stand_ins or {}):
                    got = _as_int(fn(*args, **kwargs), name)
            except Exception:
                break
        observed.append((args, kwargs, got))
        expected = ref(*args, **kwargs)
        if problem is None and got != expected:
            problem = f"on input {_describe(args, kwargs)}: got {got:,}, expected {expected:,}"
    if problem is not None:
        b = _matching_bug(name, observed)
        if b is not None:
            raise WrongAnswer.naming(b, problem)
        raise WrongAnswer(f"{name} is wrong {problem}. Inspect {inspect or _INSPECT[name]}.", uncatalogued=True)


def _mha_cases(rng, bias):
    cases = []
    for _ in range(4):
        n_heads = int(rng.integers(2, 17))
        d_head = int(rng.integers(3, 97))
        cases.append(((n_heads * d_head, n_heads), {"bias": bias}))
    cases += [((768, 12), {"bias": bias}), ((4096, 32), {"bias": bias}), ((96, 1), {"bias": bias})]
    return cases


@hidden_test(uses=('mha_param_count',), visible_check='check_mha_param_count')
def param_count(mha_param_count):
    """Without bias: random layouts (several head counts for one d_model) and real models."""
    rng = _rng("param_count")
    cases = _mha_cases(rng, False)
    d_model = int(rng.choice([120, 360, 840]))
    cases += [((d_model, h), {}) for h in (1, 3, 5, 8) if d_model % h == 0]  # bias left at its default
    check_counts("mha_param_count", mha_param_count, cases)
    _raises_value_error(mha_param_count, rng)


def _raises_value_error(mha_param_count, rng):
    """n_heads that does not divide d_model: no such layer, a ValueError (the lesson asks for it)."""
    n_heads = int(rng.integers(3, 9))
    args = (n_heads * int(rng.integers(4, 40)) + 1, n_heads)
    try:
        got = mha_param_count(*args)
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as exc:
        raise WrongAnswer(f"mha_param_count{args} raised {type(exc).__name__}: {exc}; when n_heads does not divide "
                          "d_model it should raise ValueError, the error for a value that cannot be used") from None
    b = _matching_bug("mha_param_count", [(args, {}, got)])
    if b is not None and b.id == "param_count_no_divisibility_check":
        raise WrongAnswer.naming(b, f"on input {_describe(args, {})}: got {got!r}")
    raise WrongAnswer(f"mha_param_count{args} returned {got!r}; {args[1]} heads cannot share {args[0]} columns "
                      "equally, so it should raise ValueError", uncatalogued=True)


@hidden_test(uses=('mha_param_count',), visible_check='check_mha_param_count_bias')
def param_count_bias(mha_param_count):
    """With bias=True: one bias vector per projection."""
    check_counts("mha_param_count", mha_param_count, _mha_cases(_rng("param_count_bias"), True))


@hidden_test(uses=('exercise_512',), helpers=('mha_param_count',), visible_check='check_exercise_512')
def exercise_values(exercise_512, mha_param_count=None):
    """(d_head, params with 8 heads, params of one full-width head) for d_model = 512, graded with the
    reference count bound in, so a wrong ``mha_param_count`` does not cost these points too."""
    if not callable(exercise_512):
        raise WrongAnswer(f"exercise_512 should be a function, got {type(exercise_512).__name__}")
    with standing_in(exercise_512, {"mha_param_count": reference.mha_param_count}):
        got = _count_of(exercise_512, "exercise_512", (), {})
    b = bug_match.first_fit("exercise_512", lambda b: type(got) is tuple and
                            [(type(v), v) for v in got] == [(type(v), v) for v in b.make()()])
    if b is not None:
        raise WrongAnswer.naming(b, f"exercise_512() returned {got!r}")
    if type(got) is not tuple or len(got) != 3:
        raise WrongAnswer("exercise_512 should return a tuple of three numbers: (d_head, params_8_heads, "
                          f"params_1_head), got {type(got).__name__}")
    d_head, eight, one = (_as_int(v, "exercise_512") for v in got)
    if d_head != 512 // 8:
        raise WrongAnswer(f"d_head for d_model=512 and 8 heads is d_model // n_heads, not {d_head}")
    for label, value, h in (("params_8_heads", eight, 8), ("params_1_head", one, 1)):
        expected = reference.mha_param_count(512, h)
        if value != expected:
            raise WrongAnswer(f"{label} is {value:,}; count W_Q, W_K, W_V and W_O for d_model=512, n_heads={h} "
                              "(no bias)")


@hidden_test(uses=('gqa_param_count',), helpers=('mha_param_count',), visible_check='check_gqa_param_count')
def gqa_count(gqa_param_count, mha_param_count=None):
    """Random GQA layouts (MQA, GQA, and n_kv_heads == n_heads), with and without bias, and Llama-2 70B."""
    rng = _rng("gqa_count")
    cases = []
    for bias in (False, True):
        for _ in range(3):
            n_kv_heads = int(rng.integers(2, 6))
            n_heads = n_kv_heads * int(rng.integers(2, 5))
            d_head = int(rng.integers(3, 41))
            cases.append(((n_heads * d_head, n_heads, n_kv_heads), {"bias": bias}))
        cases.append(((7 * 11, 7, 1), {"bias": bias}))  # multi-query attention
    cases += [((8192, 64, 8), {}), ((72, 6, 6), {})]
    check_counts("gqa_param_count", gqa_param_count, cases,
                 stand_ins={"mha_param_count": reference.mha_param_count})


@hidden_test(uses=('kv_cache_bytes_per_token',), visible_check='check_kv_cache_bytes')
def kv_cache_bytes(kv_cache_bytes_per_token):
    """Random layer/head/width counts, default 2 bytes and explicit byte widths, and Llama-2 70B."""
    rng = _rng("kv_cache_bytes")
    cases = []
    for nbytes in (None, 1, 4):
        n_layers, n_kv_heads, d_head = (int(v) for v in rng.choice(_np.arange(2, 50), size=3, replace=False))
        kwargs = {} if nbytes is None else {"bytes_per_value": nbytes}
        cases.append(((n_layers, n_kv_heads, d_head), kwargs))
    cases += [((80, 8, 128), {}), ((32, 32, 128), {"bytes_per_value": 2})]
    check_counts("kv_cache_bytes_per_token", kv_cache_bytes_per_token, cases)

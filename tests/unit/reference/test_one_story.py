"""Every lesson's softmax and attention do what lesson 01 teaches, to the last case.

Lessons 04 and 07 give lesson 01's functions in a locked cell; lessons 02, 05 and 06 have them pasted (their
sources hold the model answers); lesson 05's find-the-bug ``masked_attention``, once fixed, is lesson 01's masked
attention. Each is parsed out of its lesson's source and run beside lesson 01's model answer on the inputs lesson
01's contract covers: rows far apart, scores near 1e4, a row of -inf (all-zero weights, not NaN), any axis, a
batch, a (T_q, T_k) mask with a query whose keys are all blocked, float32 kept. No kernel.
"""

from __future__ import annotations

import ast
import functools
import math
import re

import numpy as np
import pytest

from autograder import course
from autograder.course import notebooks

# the name a lesson defines -> the lesson-01 function it must behave as
AS_LESSON_01 = {"softmax": "softmax", "scaled_dot_product_attention": "scaled_dot_product_attention",
                "masked_attention": "scaled_dot_product_attention"}


@functools.lru_cache(maxsize=None)
def _defined(lesson: str) -> dict:
    """{name: function} of every top-level function of the lesson's code cells named in AS_LESSON_01, each defined
    with the lesson's own others (its attention calls its own softmax)."""
    namespace = {"np": np, "math": math}
    found = {}
    for cell in notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells:
        if cell.cell_type != "code":
            continue
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.FunctionDef) and node.name in AS_LESSON_01:
                exec(compile(ast.Module([node], []), f"<{lesson}:{node.name}>", "exec"), namespace)
                found[node.name] = namespace[node.name]
    return found


LESSON_01 = _defined("01_warmup")
OTHERS = [(lesson, name) for lesson in course.lesson_names() if lesson != "01_warmup" for name in _defined(lesson)]


def _scores(rng, dtype):
    """(4, 6) scores: an ordinary row, a row near -2000, a row near 1e4, a row with blocked keys; the last is
    then copied as a row of -inf (every key blocked)."""
    s = rng.normal(size=(5, 6)) * 3
    s[1] -= 2000
    s[2] += 1e4
    s[3, [0, 2, 5]] = -np.inf
    s[4] = -np.inf
    return s.astype(dtype)


def _softmax_inputs(rng):
    for dtype in (np.float64, np.float32):
        s = _scores(rng, dtype)
        yield (s,), {}
        yield (s.T.copy(),), {"axis": 0}
        yield (np.stack([s, s[::-1]]),), {}  # (B, T_q, T_k)


def _attention_inputs(rng):
    mask = rng.random((3, 5)) < 0.4  # (T_q, T_k), True = blocked
    mask[0, 1] = False
    mask[2] = True  # query 2 may see no key at all
    for dtype in (np.float64, np.float32):
        Q, K, V = (rng.normal(size=(2, t, d)).astype(dtype) for t, d in ((3, 4), (5, 4), (5, 6)))
        yield (Q, K, V, mask), {}  # a batch, one (T_q, T_k) mask for all
        yield (Q[0], K[0], V[0], mask), {}  # one sequence
        yield (Q, K, V, np.stack([mask, ~mask])), {}  # a mask per batch element, some rows fully blocked


def _same(got, expected, what):
    got, expected = (got if isinstance(got, tuple) else (got,)), (expected if isinstance(expected, tuple)
                                                                   else (expected,))
    assert len(got) == len(expected), what
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype, f"{what}: dtype {g.dtype}, lesson 01 gives {e.dtype}"
        np.testing.assert_allclose(g, e, rtol=1e-6 if e.dtype == np.float32 else 1e-12, atol=0, equal_nan=False,
                                   err_msg=what)


@pytest.mark.parametrize("lesson, name", OTHERS, ids=[f"{lesson}:{name}" for lesson, name in OTHERS])
def test_a_lessons_softmax_and_attention_are_lesson_01s(lesson, name):
    fn, model = _defined(lesson)[name], LESSON_01[AS_LESSON_01[name]]
    rng = np.random.default_rng(0)
    inputs = _softmax_inputs(rng) if AS_LESSON_01[name] == "softmax" else _attention_inputs(rng)
    for i, (args, kwargs) in enumerate(inputs):
        with np.errstate(all="ignore"):
            got, expected = fn(*args, **kwargs), model(*args, **kwargs)
        _same(got, expected, f"{lesson}'s {name} differs from lesson 01's on input {i}")


def test_every_lesson_that_defines_them_is_compared():
    """The parse finds every definition the sources hold (a cell the parse missed would go untested)."""
    pattern = re.compile(rf"^def ({'|'.join(AS_LESSON_01)})\(", re.M)
    for lesson in course.lesson_names():
        if lesson == "01_warmup":
            continue
        written = set(pattern.findall((course.SOLUTIONS / f"{lesson}.py").read_text(encoding="utf-8")))
        assert written == {name for les, name in OTHERS if les == lesson}, lesson
    assert set(LESSON_01) == {"softmax", "scaled_dot_product_attention"}

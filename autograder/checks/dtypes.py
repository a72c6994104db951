"""The dtype contract of every graded function that computes on arrays: float32 in, float32 out; float64 kept.

Values alone cannot see it: a function that promotes float32 to float64 (``np.sqrt(d_head)`` is a numpy float64,
``np.zeros(shape)`` is float64) returns *more* precise numbers, and one that computes in float32 stays within
a loose tolerance. So ``dtype_kept`` calls the learner's function on a float32 case and a float64 case and asks
for the reference's dtype in every output. A learner's result whose dtype and values both equal a catalogued
bug's gets that bug's diagnosis; otherwise the message says which direction went wrong, on which input, and what
usually causes it.
"""

from __future__ import annotations

import numpy as np

from autograder import reference
from autograder.checks import bug_match, compare
from autograder.checks.runner import Case, call_learner, fresh_copy, as_outputs, bound
from autograder.checks.verdict import WrongAnswer


def _input_dtype(case: Case):
    for a in (*case.args, *case.kwargs.values()):
        if compare.is_array(a) and a.dtype.kind == "f":
            return a.dtype
    return None


def _catalogued(name, case, got, labels, rtol, atol):
    """The catalog bug of ``name`` whose result on ``case`` has the learner's dtypes and values, or None."""

    def fits(bug) -> bool:
        wrong = as_outputs(bug.make()(*[fresh_copy(a) for a in case.args], **case.kwargs), labels)
        return all(compare.is_array(w) and compare.is_array(g) and w.dtype == g.dtype
                   and compare.same_values(g, w, rtol=rtol, atol=atol) for g, w in zip(got, wrong))

    return bug_match.first_fit(name, fits)


def _advice(given, got, expected) -> str:
    if given == np.float32 and got == np.float64:
        return ("float32 input must give float32 results. Something in the computation is a float64 numpy value "
                "and promotes the arrays: a scale like np.sqrt(n) of a Python number (math.sqrt gives a Python "
                "float, which does not promote), or an array created without dtype= (np.zeros(shape), "
                "np.full(shape, ...) are float64); create such arrays with the input's dtype")
    if given == np.float64 and got == np.float32:
        return ("float64 input must keep float64 precision, but something casts it down to float32 (an astype, "
                "or an array created with dtype=np.float32); keep the input's dtype")
    return f"the result's dtype should follow the input's ({expected})"


def dtype_kept(name, fn, cases, *, outputs=("result",), rtol=1e-4, atol=1e-6, bind=None, ref=None):
    """Every float output of ``fn`` on each case has the dtype the reference gives; raise ``WrongAnswer`` if not.

    ``cases`` hold float32 and float64 inputs (at least one of each); ``rtol``/``atol`` only serve to recognise a
    catalogued bug's values.
    """
    ref = ref or getattr(reference, name)
    for case in cases:
        with bound(fn, bind or {}), np.errstate(all="ignore"):
            got = as_outputs(call_learner(fn, case, name), outputs)
        expected = as_outputs(ref(*[fresh_copy(a) for a in case.args], **case.kwargs), outputs)
        for label, g, e in zip(outputs, got, expected):
            if not compare.is_array(g) or g.dtype == e.dtype:
                continue  # not an array at all: the value check says so
            what = f"{name}'s {label}" if len(outputs) > 1 else name
            bug = _catalogued(name, case, got, outputs, rtol, atol)
            if bug is not None:
                raise WrongAnswer.naming(bug, f"on input {case.describe()}: {what} is {g.dtype}, "
                                              f"expected {e.dtype}")
            given = _input_dtype(case)
            raise WrongAnswer(f"{what} is {g.dtype} for {given} input, expected {e.dtype} (on input "
                              f"{case.describe()}): {_advice(given, g.dtype, e.dtype)}", uncatalogued=True)

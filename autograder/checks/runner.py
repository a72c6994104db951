"""Run a learner's function beside the reference on seeded cases, and explain any difference.

A hidden test is a list of ``Case`` objects and one call to ``against_reference``, which raises ``WrongAnswer`` (an
``AssertionError``, so nbgrader scores the cell 0) with a message that says which input exposed the problem and,
when the learner's results are those of a catalogued bug (``bug_match``), names that bug. ``call_learner``,
``as_outputs`` and ``fresh_copy`` are the pieces a lesson's own tests use when they compare in their own way.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autograder import reference
from autograder.checks import bug_match, compare
from autograder.checks.verdict import KernelGone, LearnerCall, Refusal, Refused, WrongAnswer, remote_frames
from autograder.kernel.protocol import learner_frames


def learner_error(name: str, exc: Exception, on_input: str, hint: str = "", bug=None) -> WrongAnswer:
    """The WrongAnswer for an exception the learner's function raised: what, on which input, and where in
    the learner's own cells (no frame of numpy or of the grading code)."""
    remote = remote_frames(exc)  # raised in the kernel: its frames came as text
    frames = "\n".join(remote[:-1]) if remote is not None else "\n".join(learner_frames(exc.__traceback__))
    where = f"\nWhere, in your code:\n{frames}" if frames else ""
    undefined = getattr(exc, "name", None) if isinstance(exc, NameError) else None
    return WrongAnswer(f"{name} raised {type(exc).__name__}: {exc} on input {on_input}.{hint}{where}", bug=bug,
                       raised=type(exc).__name__, undefined=undefined if isinstance(undefined, str) else None)


@dataclass
class Case:
    """One call: positional arguments, keyword arguments and a short description for messages."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    label: str = ""

    def describe(self) -> str:
        parts = [_brief(a) for a in self.args] + [f"{k}={_brief(v)}" for k, v in self.kwargs.items()]
        return (self.label + ": " if self.label else "") + "(" + ", ".join(parts) + ")"


def _brief(a) -> str:
    """An argument as a message shows it: an array by shape and dtype, a dict of arrays (a layer's weights) or a list
    of them (a model's layers) by what it holds, a generator by its kind, anything else by repr."""
    if compare.is_array(a):
        return f"array{compare.shape_of(a)} {a.dtype}"
    if isinstance(a, dict) and any(compare.is_array(v) or isinstance(v, (dict, list)) for v in a.values()):
        return "{" + ", ".join(f"{k}: {_brief(v)}" for k, v in a.items()) + "}"
    if isinstance(a, list) and a and all(isinstance(v, dict) for v in a):
        return f"[{len(a)} x {_brief(a[0])}]"
    if isinstance(a, np.random.Generator):
        return "a numpy Generator"
    return repr(a)


@contextlib.contextmanager
def standing_in(fn, names: dict):
    """Temporarily put the stand-ins ``names`` in the module namespace ``fn`` looks its helpers up in.

    Used so a learner's composite function is graded with the reference version of the helpers it calls:
    an earlier bug must not cost points twice. A refusal already bound there (``Refusal``) stays: a
    test's own ``stand_ins`` never lifts what the test's declared helpers refuse.
    """
    remote = isinstance(fn, LearnerCall)  # the learner's function runs in the kernel: the grader answers
    g = fn.stand_ins_bound if remote else getattr(fn, "__globals__", None)
    if g is not None:
        names = {k: v for k, v in names.items() if not isinstance(g.get(k), Refusal)}
    if names and remote:
        with fn.standing_in(names):
            yield
        return
    if not names or g is None:
        yield
        return
    missing = object()
    saved = {k: g.get(k, missing) for k in names}
    g.update(names)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is missing:
                g.pop(k, None)
            else:
                g[k] = v


@dataclass(frozen=True)
class Raised:
    """What a call raised instead of returning. Two calls behave alike when they raise the same kind of error (its
    type's name: an error from the kernel is rebuilt under that name); the text is never compared, since numpy
    words one shape error alike whichever product of the function failed."""

    error: Exception

    def alike(self, other: Exception) -> bool:
        return type(other).__name__ == type(self.error).__name__


# A signature run (``signature.recording``) in this thread or context: the salt ``rng_for`` draws at instead of the
# environment's, and ``record(result)``, called with each result ``_attempt`` returns; None otherwise.
SIGNATURE_RUN: contextvars.ContextVar[Any] = contextvars.ContextVar("signature_run", default=None)


def _attempt(fn, case: Case, name: str):
    """The learner's ``fn`` called on ``case``: its result, or ``Raised`` for an error its code raised. The
    untouched stub and a refused stand-in raise their ``WrongAnswer`` at once. A signature run
    (``SIGNATURE_RUN``) records what it returns."""
    got = _attempted(fn, case, name)
    run = SIGNATURE_RUN.get()
    if run is not None:
        run.record(got)
    return got


def _attempted(fn, case: Case, name: str):
    try:
        return fn(*case.args, **case.kwargs)
    except NotImplementedError:
        raise WrongAnswer(f"{name} is not implemented yet: replace `raise NotImplementedError()` in its cell "
                          "with your code, run that cell, then run this one again.", unanswered=True) from None
    except WrongAnswer:
        raise
    except Refused as exc:  # it handed its own work to a stand-in: no credit for what that computed
        raise refused_answer(name, case, exc) from None
    except KernelGone:  # not the code's doing: the kernel is gone, the test ends unrun
        raise
    except Exception as exc:  # noqa: BLE001 - the learner's code failed: what it raised is its behaviour
        return Raised(exc)


def call_learner(fn, case: Case, name: str):
    """The learner's ``fn`` called on ``case``; what it raises becomes a ``WrongAnswer`` that says on which input.
    One call is too little evidence to name a bug by: ``against_reference`` names one from every case."""
    got = _attempt(fn, case, name)
    if isinstance(got, Raised):
        raise learner_error(name, got.error, case.describe(), shape_hint(got.error)) from None
    return got


_SHAPE_ERRORS = ("matmul", "could not be broadcast", "axes don't match", "cannot reshape", "shapes not aligned")


def shape_hint(exc: Exception, *, batch_only: bool = False) -> str:
    """What numpy's shape error usually means in this course, or "" for any other error. ``batch_only``: the
    function gave right results on input with fewer axes, so the batch axis is the one it mishandles."""
    if not any(s in str(exc) for s in _SHAPE_ERRORS):
        return ""
    hint = " Two arrays in one product, broadcast or reshape do not fit: print the shapes on the line that failed."
    if batch_only:
        hint += (" Your function gave the right result on input with fewer axes and fails on a batch, so an axis is "
                 "counted from the front: .T reverses *all* axes and transpose(0, 2, 1) names fixed ones, so a "
                 "leading batch axis moves. Count axes from the end (-1, -2, ...) so any leading axes pass through.")
    return hint


def refused_answer(name: str, case: Case, exc) -> WrongAnswer:
    """The WrongAnswer for a learner's ``name`` that called a stand-in which refused (``Refused``): the
    catalogued bug that calls the same function on ``case`` names it; else the refusal says what happened."""

    def calls_the_same(bug) -> bool:
        wrong = bug.make()
        with standing_in(wrong, {exc.name: Refusal(exc.name, exc.graded)}):
            try:
                wrong(*[fresh_copy(a) for a in case.args], **case.kwargs)
            except Refused as other:
                return other.name == exc.name
        return False

    bug = bug_match.first_fit(name, calls_the_same)
    if bug is not None:
        return WrongAnswer.naming(bug, f"on input {case.describe()}")
    return WrongAnswer(f"{exc} (on input {case.describe()}).")


def memory_limit(fn):
    """Bytes the process that runs ``fn`` may hold: the kernel's limit for a learner function graded in the
    kernel (``RemoteFunction.memory_limit``, set by the grader), None for a function that runs in this process."""
    return fn.memory_limit if isinstance(fn, LearnerCall) else None


def side_beyond(limit: int) -> int:
    """The smallest n whose (n, n) float64 array is larger than ``limit`` bytes: a process held to ``limit`` (its
    address space, where the interpreter and numpy already take their share) cannot allocate it, so a function
    that builds one fails with MemoryError. Computing attention at that size touches n * n scores once: about 3 s
    of one core at the default limit of 2048 MB, the price of a memory point the kernel cannot forge."""
    return math.isqrt(limit // 8) + 1


def call_within_memory(fn, case: Case, name: str):
    """(the learner's result, False), or (None, True) when ``fn`` ran out of memory on ``case`` (MemoryError: in
    the kernel, an allocation beyond its limit); any other error as ``call_learner`` reports it."""
    ran_out = []

    def guarded(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except MemoryError:
            ran_out.append(True)

    result = call_learner(guarded, case, name)
    return result, bool(ran_out)


def call_measuring_memory(fn, case: Case, name: str):
    """(result, peak bytes Python allocated during the call; -1 when the call stopped memory tracing), for a
    function that runs in this process (an instructor's kernel, nbval, the salt sweep).

    A learner function graded in the kernel is never measured: whatever the kernel reported, the notebook could
    rewrite. Its memory is tested where the kernel cannot forge it, by inputs too large for the forbidden array
    under the kernel's limit (``memory_limit``, ``side_beyond``)."""
    if memory_limit(fn) is not None:
        raise TypeError(f"{name} runs in the kernel: its memory is not measured there")
    import _tracemalloc  # the C module: the ``tracemalloc`` wrappers are attributes a notebook could rebind

    was_tracing = _tracemalloc.is_tracing()
    if not was_tracing:
        _tracemalloc.start()
    _tracemalloc.reset_peak()
    base = _tracemalloc.get_traced_memory()[0]
    try:
        out = call_learner(fn, case, name)
        peak = _tracemalloc.get_traced_memory()[1] - base if _tracemalloc.is_tracing() else -1
    finally:
        if not was_tracing:
            _tracemalloc.stop()
    return out, peak


def as_outputs(result, labels):
    """A result as a tuple of its parts (``labels`` names them); a WrongAnswer when it has the wrong number."""
    if len(labels) == 1:
        return (result,)
    if isinstance(result, dict):  # gradients keyed by what they are the gradient of: in the order of ``labels``
        if sorted(result) != sorted(labels):
            raise WrongAnswer(f"expected a dict with the keys {list(labels)}, got the keys {list(result)}")
        return tuple(result[k] for k in labels)
    if not isinstance(result, tuple) or len(result) != len(labels):
        raise WrongAnswer(f"expected a tuple of {len(labels)} results ({', '.join(labels)}), "
                          f"got {type(result).__name__}")
    return result


def known_bug(name: str, case: Case, got: tuple, labels, *, rtol, atol, modified=None):
    """The catalog bug of function ``name`` whose result on ``case`` equals ``got``, or None.

    ``modified``: index of an input the learner's function changed in place; the bug must change it too.
    """
    return bug_match.first_fit(name, lambda bug: _reproduces(bug, case, got, labels, rtol, atol, modified))


def _reproduces(bug, case: Case, got, labels, rtol, atol, modified) -> bool:
    """Whether ``bug`` behaves on ``case`` as the learner's function did: gives ``got`` (and changes input
    ``modified`` in place, when one was), or raises the same kind of error when ``got`` is ``Raised``."""
    args = [fresh_copy(a) for a in case.args]
    try:
        result = bug.make()(*args, **case.kwargs)
    except Exception as exc:  # noqa: BLE001 - raising is behaviour too
        return isinstance(got, Raised) and got.alike(exc)
    if isinstance(got, Raised):
        return False
    wrong = as_outputs(result, labels)
    if modified is not None and compare.unchanged(case.args[modified], args[modified]):
        return False
    return all(compare.same_values(g, w, rtol=rtol, atol=atol) for g, w in zip(got, wrong))


def fresh_copy(a):
    """A copy of an input array to hand to a function (it may change its arguments); other values as they are."""
    return compare.snapshot(a) if compare.is_array(a) else a


def matching_bug(name: str, observed, labels, *, rtol, atol):
    """The one catalog bug of ``name`` that reproduces *every* observation, or None.

    ``observed``: [(case, the learner's outputs, index of the input it changed in place or None)], every case
    the learner's function was run on. A bug is named only when it gives the learner's results on all of them
    (and changes the same input): two bugs that agree on one input rarely agree on several inputs of different
    sizes. When two bugs with different diagnoses still fit every observation, none is named; nor when the
    learner's function raised on every case: an error, of whatever kind, is what any wrong code may raise, and
    only results tell one mistake from another.
    """
    if all(isinstance(got, Raised) for _, got, _ in observed):
        return None
    return bug_match.agreed_fit(name, lambda bug: all(_reproduces(bug, case, got, labels, rtol, atol, modified)
                                                      for case, got, modified in observed))


def _changed_input(before, case):
    for i, snap in enumerate(before):
        if snap is not None and not compare.unchanged(snap, case.args[i]):
            return i
    return None


def _axes(case: Case) -> int:
    """The most axes of any array of ``case``: a batch has more than one sequence."""
    return max((len(compare.shape_of(a)) for a in (*case.args, *case.kwargs.values()) if compare.is_array(a)),
               default=0)


def against_reference(name, fn, cases, *, outputs=("result",), rtol=1e-6, atol=1e-9, stand_ins=None, ref=None, inspect=""):
    """Grade ``fn`` (the learner's ``name``) on ``cases`` against the reference; raise ``WrongAnswer`` if wrong.

    ``outputs`` names the parts of the result (e.g. ``("out", "weights")``); ``stand_ins`` maps function names to the
    reference helpers used while ``fn`` runs. After the first wrong result or error the remaining cases still
    run, as evidence: a catalogued bug is named only when it behaves as the learner's function did on all of them
    (the same results, or the same kind of error); otherwise the message says what differs or what was raised, on
    which input, and (``inspect``) what to look at.
    """
    if not callable(fn):
        raise WrongAnswer(f"{name} should be a function, got {type(fn).__name__}")
    ref = ref or getattr(reference, name)
    observed, problem, right = [], None, []
    for case in cases:
        before = [compare.snapshot(a) if compare.is_array(a) else None for a in case.args]
        try:
            with standing_in(fn, stand_ins or {}), np.errstate(all="ignore"):
                got = _attempt(fn, case, name)
            got = got if isinstance(got, Raised) else as_outputs(got, outputs)
        except WrongAnswer:
            if problem is None:
                raise
            break  # the evidence ends here, not the verdict
        modified = _changed_input(before, case)
        pristine = case if modified is None else Case(
            tuple(before[j] if before[j] is not None else a for j, a in enumerate(case.args)), case.kwargs,
            case.label)
        observed.append((pristine, got, modified))
        why = _difference(name, ref, pristine, got, modified, outputs, rtol, atol)
        if why is None:
            right.append(case)
        elif problem is None:
            problem = (case, why)
    if problem is None:
        return
    case, why = problem
    bug = matching_bug(name, observed, outputs, rtol=rtol, atol=atol)
    if isinstance(why, Raised):
        batch_only = any(_axes(c) < _axes(case) for c in right)
        hint = f" {bug.diagnosis} [{bug.id}]" if bug else shape_hint(why.error, batch_only=batch_only)
        raise learner_error(name, why.error, case.describe(), hint, bug) from None
    if bug is not None:
        raise WrongAnswer.naming(bug, f"on input {case.describe()}")
    raise WrongAnswer(why + (f". Inspect {inspect}." if inspect else ""), uncatalogued=True)


def _difference(name, ref, case, got, modified, outputs, rtol, atol):
    """What is wrong with the learner's ``got`` on ``case``: ``Raised``, a sentence, or None when it is right."""
    if isinstance(got, Raised):
        return got
    if modified is not None:
        return (f"{name} modified its input argument {modified + 1} in place on {case.describe()}; "
                "work on new arrays (e.g. `x = x / s`, not `x /= s`)")
    widened = _widened(case)
    if widened is None:
        expected = as_outputs(ref(*[fresh_copy(a) for a in case.args], **case.kwargs), outputs)
    else:  # float32 (or narrower) input: the exact answer, in float64, with a tolerance the input's precision allows
        expected = as_outputs(ref(*widened.args, **widened.kwargs), outputs)
    for label, g, e in zip(outputs, got, expected):
        tolerance = atol if widened is None else atol + rtol * compare.magnitude(e)
        why = compare.mismatch(g, e, rtol=rtol, atol=tolerance,
                               what=f"{name}'s {label}" if len(outputs) > 1 else name)
        if why is not None:
            return f"{why} on input {case.describe()}"
    return None


def _widened(case: Case):
    """``case`` with its floating-point arrays of less than 64 bits made float64 (fresh copies), or None when it has
    none. Expected values of a float32 case are computed from it: a float32 reference is itself off by a few units
    of float32's precision, most where terms cancel, so any correct order of float32 operations may differ from it
    by twice as much. Compared against the exact values, with a tolerance scaled to the array's magnitude (an
    entry that cancels to near 0 carries the rounding of the large terms it came from), every correct order
    passes."""
    def narrow(a):
        return compare.is_array(a) and a.dtype.kind == "f" and a.dtype.itemsize < 8

    if not any(narrow(a) for a in (*case.args, *case.kwargs.values())):
        return None

    def wide(a):
        return np.array(a, dtype=np.float64) if narrow(a) else fresh_copy(a)

    return Case(tuple(wide(a) for a in case.args), {k: wide(v) for k, v in case.kwargs.items()}, case.label)


def rng_for(test_id: str):
    """The random generator of one hidden test: seeded by its name and the grading salt.

    ``MHA_GRADING_SALT`` is drawn afresh by each grading process (autograder/nbgrader_config.py), so hidden
    inputs cannot be known before grading; without it (running a solution notebook locally) the salt is 0. Inside
    a signature run (``SIGNATURE_RUN``, ``signature.recording``) the salt is that run's fixed one.
    """
    run = SIGNATURE_RUN.get()
    salt = run.salt if run is not None else int(os.environ.get("MHA_GRADING_SALT", "0") or 0)
    return np.random.default_rng([*test_id.encode(), salt % (2 ** 63)])


def random_mask(rng, shape, blocked_row=False):
    """A random boolean mask (True = blocked) that leaves at least one key open in every row; with
    ``blocked_row``, one query of the first batch element has every key blocked (its weights must all be 0)."""
    mask = rng.random(shape) < 0.4
    open_key = rng.integers(0, shape[-1], size=shape[:-1])
    np.put_along_axis(mask, open_key[..., None], False, axis=-1)
    if blocked_row:
        mask[(0,) * (len(shape) - 2) + (int(rng.integers(0, shape[-2])),)] = True
    return mask


def distinct_dims(rng, names, low=2, high=9):
    """Draw one size per name, all different, so no two axes can be confused."""
    pool = list(range(low, high + 1))
    if len(pool) < len(names):
        raise ValueError("not enough distinct sizes")
    picked = rng.choice(pool, size=len(names), replace=False)
    return {n: int(v) for n, v in zip(names, picked)}


# ------------------------------------------------------------------ the dtype contract
# The dtype contract of every graded function that computes on arrays: float32 in, float32 out; float64 kept.
# 
# Values alone cannot see it: a function that promotes float32 to float64 (``np.sqrt(d_head)`` is a numpy float64,
# ``np.zeros(shape)`` is float64) returns *more* precise numbers, and one that computes in float32 stays within
# a loose tolerance. So ``dtype_kept`` calls the learner's function on a float32 case and a float64 case and asks
# for the reference's dtype in every output. A learner's result whose dtype and values both equal a catalogued
# bug's gets that bug's diagnosis; otherwise the message says which direction went wrong, on which input, and what
# usually causes it.


def _input_dtype(case: Case):
    for a in (*case.args, *case.kwargs.values()):
        if compare.is_array(a) and a.dtype.kind == "f":
            return a.dtype
    return None


def _dtype_bug(name, case, got, labels, rtol, atol):
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


def dtype_kept(name, fn, cases, *, outputs=("result",), rtol=1e-4, atol=1e-6, stand_ins=None, ref=None):
    """Every float output of ``fn`` on each case has the dtype the reference gives; raise ``WrongAnswer`` if not.

    ``cases`` hold float32 and float64 inputs (at least one of each); ``rtol``/``atol`` only serve to recognise a
    catalogued bug's values.
    """
    ref = ref or getattr(reference, name)
    for case in cases:
        with standing_in(fn, stand_ins or {}), np.errstate(all="ignore"):
            got = as_outputs(call_learner(fn, case, name), outputs)
        expected = as_outputs(ref(*[fresh_copy(a) for a in case.args], **case.kwargs), outputs)
        for label, g, e in zip(outputs, got, expected):
            if not compare.is_array(g) or g.dtype == e.dtype:
                continue  # not an array at all: the value check says so
            what = f"{name}'s {label}" if len(outputs) > 1 else name
            bug = _dtype_bug(name, case, got, outputs, rtol, atol)
            if bug is not None:
                raise WrongAnswer.naming(bug, f"on input {case.describe()}: {what} is {g.dtype}, "
                                              f"expected {e.dtype}")
            given = _input_dtype(case)
            raise WrongAnswer(f"{what} is {g.dtype} for {given} input, expected {e.dtype} (on input "
                              f"{case.describe()}): {_advice(given, g.dtype, e.dtype)}", uncatalogued=True)

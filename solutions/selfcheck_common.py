"""What every lesson's self-checks share: how a check calls your function, fails and passes.

Each lesson has its own module, ``selfcheck_NN.py``; its ``check_*`` functions call your function on small examples
and either print a line starting with a tick or raise an ``AssertionError`` that says what looks wrong and what
usually causes it. The checks test properties and known values; they do not contain a solution. Passing them is a
good sign, not a guarantee: the graded tests use other, random inputs.

Names follow the course glossary: T_q queries, T_k keys, d_k key width, d_v value width, d_model, n_heads,
d_head = d_model // n_heads; a mask is boolean and True marks a blocked (query, key) pair.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SelfCheckFailed", "fail", "call", "peak_bytes", "ok", "close", "effective_scale", "pasted", "check_pasted",
           "own"]


class SelfCheckFailed(AssertionError):
    """Your function gave a result that the lesson's self-check can show is wrong."""


def fail(message):
    raise SelfCheckFailed((_blame_pasted() or _blame_callee()) + message)


# ------------------------------------------------------------------ this lesson's functions, each with its checks
_OWN = {}  # name -> the checks that take that function alone, declared by a lesson's self-check module
_checked = [None]  # the notebook function a check called last (``call``)
_checking_callee = False


def own(name, *checks):
    """Declare that this lesson has the learner write ``name``, checked by ``checks`` (each taking it alone): a
    check of another function that calls it, and fails because it is wrong, then names it."""
    _OWN[name] = checks


def _names_used(code) -> set:
    """The global names a function's code (and the code nested in it) looks up."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names_used(const)
    return names


def _blame_callee():
    """'This comes from your `f` ...' when the function this check called uses ``f``, another of the lesson's
    functions (``own``), directly or through another, and ``f`` fails its own checks now (the deepest such one);
    else ''. So a check never blames a caller for its callee's mistake."""
    global _checking_callee
    fn = _checked[0]
    if _checking_callee or _checking_pasted or fn is None or not hasattr(fn, "__code__"):
        return ""
    _checking_callee = True
    try:
        name = _failing_callee(fn, {fn})
    finally:
        _checking_callee = False
        _checked[0] = fn
    if name is None:
        return ""
    return (f"This comes from your `{name}`, which {getattr(fn, '__name__', 'this function')} calls and which fails "
            f"its own self-check: fix `{name}` first (run its cell and its check), then run this check again. What "
            "this check saw: ")


def _failing_callee(fn, seen):
    """The name of the deepest of the lesson's functions (``own``) that ``fn`` calls, directly or not, and that
    fails its own checks; None when each passes."""
    import contextlib
    import io

    used, notebook = _names_used(fn.__code__), getattr(fn, "__globals__", {})
    for name, checks in _OWN.items():
        callee = notebook.get(name)
        if name not in used or callee in seen or not callable(callee):
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                for check in checks:
                    check(callee)
        except Exception:  # a failed check, a stub or a crash: the callee is not right yet; is its own callee?
            deeper = _failing_callee(callee, seen | {callee}) if hasattr(callee, "__code__") else None
            return deeper or name
    return None


# ------------------------------------------------------------------ functions pasted from earlier lessons
_PASTED = {}  # name -> (lesson it comes from, the checks it must pass), declared by a lesson's self-check module
_checking_pasted = False


def pasted(lesson, name, *checks):
    """Declare that this lesson's paste cell holds ``name`` from lesson ``lesson``, checked by ``checks``."""
    _PASTED[name] = (lesson, checks)


def _from_lesson(lesson, name, problem):
    return (f"This comes from your lesson {lesson}: `{name}`, pasted into the paste cell, fails lesson {lesson}'s "
            f"self-check. Fix it there (and in lesson {lesson}), run the paste cell and its check again. {problem}")


def check_pasted(**functions):
    """Lesson NN's self-checks on the functions of this lesson's paste cell; a failure names the lesson."""
    global _checking_pasted
    for name, fn in functions.items():
        lesson, checks = _PASTED[name]
        _checking_pasted = True
        try:
            for check in checks:
                check(fn)
        except NotImplementedError:
            raise
        except Exception as exc:
            raise SelfCheckFailed(_from_lesson(lesson, name, f"{type(exc).__name__}: {exc}")) from None
        finally:
            _checking_pasted = False


def _blame_pasted():
    """'This comes from your lesson NN ...' when a pasted function the notebook holds now fails its own checks
    (a check of a later function that uses it then fails because of it), else ''."""
    global _checking_pasted
    if _checking_pasted or not _PASTED:
        return ""
    import contextlib
    import io
    import sys

    notebook = vars(sys.modules.get("__main__", sys))
    _checking_pasted = True
    try:
        for name, (lesson, checks) in _PASTED.items():
            fn = notebook.get(name)
            if not callable(fn):
                continue
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    for check in checks:
                        check(fn)
            except Exception:  # a failed check, a stub or a crash: the pasted function is not right
                return _from_lesson(lesson, name, "This check uses it, so its result says little yet. What it "
                                                  "saw: ")
    finally:
        _checking_pasted = False
    return ""


_SHAPE_ERRORS = ("matmul", "could not be broadcast", "axes don't match", "cannot reshape", "shapes not aligned")


def call(fn, name, *args, **kwargs):
    _checked[0] = fn
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as exc:
        helper = _stub_in(exc, fn)
        if helper not in (None, name, getattr(fn, "__name__", name)):
            fail(f"{name} calls `{helper}`, which is not implemented yet: write it (or paste it) in its cell, run "
                 "that cell, then run this check again")
        raise NotImplementedError(
            f"{name} is not implemented yet: write its body in the cell above (replace "
            "`raise NotImplementedError()`), run that cell, then run this check again.") from None
    except ValueError as exc:
        if not any(s in str(exc) for s in _SHAPE_ERRORS):
            raise
        shapes = ", ".join(str(np.shape(a)) for a in args if isinstance(a, np.ndarray))
        batch = (" It runs on one sequence of this batch alone, so an axis is counted from the front: .T "
                 "reverses *all* axes and transpose(0, 2, 1) names fixed ones, so a leading batch axis moves; count "
                 "axes from the end (-1, -2, ...) so leading axes pass through") if _runs_unbatched(fn, args, kwargs) \
            else ""
        if batch and any(isinstance(a, np.ndarray) and a.dtype == bool and a.ndim > 2
                         for a in (*args, *kwargs.values())):
            batch = (" It runs on one sequence of this batch alone. A batched mask (B, T_q, T_k) meets the scores "
                     "(B, n_heads, T_q, T_k) only with a head axis of its own: np.expand_dims(mask, -3) makes it "
                     "(B, 1, T_q, T_k), which broadcasts over the heads. Otherwise an axis is counted from the front "
                     "(.T reverses *all* axes); count axes from the end (-1, -2, ...)")
        fail(f"{name} failed on inputs of shapes {shapes} with numpy's error: {exc}. Two arrays in one product, "
             f"broadcast or reshape do not fit: print the shapes on the line that failed.{batch}")


def _stub_in(exc, fn):
    """The name of the notebook's function (one defined beside ``fn``) whose ``raise NotImplementedError()`` raised
    ``exc``, or None when the error came from elsewhere."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or tb.tb_frame.f_globals is not getattr(fn, "__globals__", None):
        return None
    return tb.tb_frame.f_code.co_name


def _runs_unbatched(fn, args, kwargs):
    """Whether ``fn`` runs on one sequence of the batch: every array of more than two axes keeps only its last
    two (its first sequence, its first head). False when nothing is batched or that call fails too."""
    def first(a):
        return a[(0,) * (a.ndim - 2)] if isinstance(a, np.ndarray) and a.ndim > 2 else a

    if not any(isinstance(a, np.ndarray) and a.ndim > 2 for a in (*args, *kwargs.values())):
        return False
    try:
        with np.errstate(all="ignore"):
            fn(*[first(a) for a in args], **{k: first(v) for k, v in kwargs.items()})
    except Exception:  # noqa: BLE001 - it fails on one sequence too: the batch is not the problem
        return False
    return True


def peak_bytes(fn, name, *args, **kwargs):
    """The most bytes Python allocated at once while ``call(fn, name, *args, **kwargs)`` ran (tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        call(fn, name, *args, **kwargs)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def ok(message):
    print("\u2714 " + message)


def close(a, b, tol=1e-6):
    return np.shape(a) == np.shape(b) and bool(np.all(np.abs(np.asarray(a, float) - np.asarray(b, float)) <= tol))


def effective_scale(weights, scores):
    """The c with weights proportional to exp(c * scores) along each row (None if not of that form)."""
    w = np.asarray(weights, float)
    if np.any(w <= 0):
        return None
    logs = np.log(w)
    dl = (logs - logs[..., :1]).ravel()[1:]
    ds = (scores - scores[..., :1]).ravel()[1:]
    keep = np.abs(ds) > 1e-3
    if not np.any(keep):
        return None
    c = dl[keep] / ds[keep]
    return float(np.median(c)) if np.allclose(c, np.median(c), rtol=1e-3, atol=1e-6) else None

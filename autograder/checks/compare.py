"""Tamper-resistant comparison of a learner's result with the reference.

In grading, the learner's results arrive from the kernel as plain arrays and values; run in an instructor's own
notebook, the hidden tests share a kernel with the learner's code, which may have rebound ``numpy.allclose``,
``numpy.testing`` or builtins, or return an object whose ``__eq__`` always says True. So nothing here calls a
numpy module function or ``==`` on a learner object: arrays are read through methods of the built-in
``numpy.ndarray`` type (``ravel``, ``tolist``, ``shape``, ``dtype``), whose attributes cannot be rebound, and
the numbers are compared as Python floats with arithmetic operators.
"""

from __future__ import annotations

import numpy as _np

_NDARRAY = type(_np.empty(0))  # the real type, even if ``numpy.ndarray`` was rebound


def is_array(x) -> bool:
    return type(x) is _NDARRAY


def shape_of(x) -> tuple:
    return tuple(int(n) for n in _NDARRAY.__dict__["shape"].__get__(x))


def flat_floats(x) -> list:
    """The entries of a real ndarray as a flat list of Python floats (or complex, for a complex array)."""
    return _NDARRAY.tolist(_NDARRAY.ravel(x))


def snapshot(x):
    """An independent copy of an input array, to prove later that a function did not modify it."""
    return _NDARRAY.copy(x)


def mismatch(got, expected, *, rtol=1e-6, atol=1e-9, what="result", nan_equal=False):
    """Why ``got`` is not ``expected`` (a sentence), or None when they agree.

    ``expected`` is a real ndarray produced by the reference. ``got`` is whatever the learner returned.
    ``nan_equal``: NaN in both at the same place counts as equal (used to recognise a known bug's output).
    """
    if _is_number(expected) and _is_number(got):  # one number (a loss): compared as 0-d arrays
        got, expected = _np.asarray(got), _np.asarray(expected, dtype=_np.float64)
    elif _is_number(expected):
        return f"{what} should be one number (a float), but it is a {type(got).__name__}"
    if not is_array(got):
        return (f"{what} should be a numpy array, but it is a {type(got).__name__}; "
                "return the array itself (not a list, a tuple or a wrapper object)")
    gs, es = shape_of(got), shape_of(expected)
    if gs != es:
        return f"{what} has shape {gs}, expected {es}"
    kind = got.dtype.kind
    if kind not in "fiu":
        return f"{what} has dtype {got.dtype}, expected a floating-point array"
    g, e = flat_floats(got), flat_floats(expected)
    if g == e:  # list equality: every entry exactly equal (a NaN never equals itself, so NaN takes the loop)
        return None
    worst, worst_i = -1.0, -1
    for i in range(len(e)):
        a, b = g[i], e[i]
        if nan_equal and a != a and b != b:
            continue
        if a != a:  # NaN
            return (f"{what} contains NaN at flat index {i}; NaN usually comes from exp() overflowing "
                    "(subtract the row maximum before exp) or from 0/0 in a fully blocked row")
        if b != b:  # NaN expected (a known bug's result) but a number got: not that bug
            return f"{what} is {a:.6g} at flat index {i}, where NaN was expected"
        diff = a - b if a >= b else b - a
        if diff > atol + rtol * (b if b >= 0 else -b):
            if diff > worst:
                worst, worst_i = diff, i
    if worst_i >= 0:
        if got.dtype != expected.dtype and _agree_to_precision_of(got.dtype, g, e):
            return (f"{what} has dtype {got.dtype}, expected {expected.dtype}: its values agree only to "
                    f"{got.dtype}'s precision (largest difference {worst:.3g} at flat index {worst_i}); compute "
                    f"in {expected.dtype} as the lesson asks")
        shown = 6
        while f"{g[worst_i]:.{shown}g}" == f"{e[worst_i]:.{shown}g}" and shown < 17:  # never "got x, expected x"
            shown += 3
        return (f"{what} differs from the expected values: largest difference {worst:.3g} at flat index "
                f"{worst_i} (got {g[worst_i]:.{shown}g}, expected {e[worst_i]:.{shown}g})")
    return None


def _is_number(x) -> bool:
    """A Python or numpy real number, or a 0-d real array: what a function returns as one value."""
    if is_array(x):
        return shape_of(x) == () and x.dtype.kind in "fiu"
    return type(x) in (int, float) or (isinstance(x, (_np.floating, _np.integer)) and not isinstance(x, bool))


def _agree_to_precision_of(dtype, g, e) -> bool:
    """Whether every entry of ``g`` is ``e`` rounded to ``dtype`` (a float type narrower than ``e``'s)."""
    if _np.dtype(dtype).kind != "f":
        return False
    eps = float(_np.finfo(dtype).eps)
    return all(a == b or abs(a - b) <= 4 * eps * max(abs(b), float(_np.finfo(dtype).tiny)) for a, b in zip(g, e))


def magnitude(a) -> float:
    """The largest finite absolute value of the array ``a`` (0 when it has none)."""
    finite = _np.abs(_np.asarray(a, dtype=_np.float64))
    finite = finite[_np.isfinite(finite)]
    return float(finite.max()) if finite.size else 0.0


def same_values(a, b, *, rtol=1e-6, atol=1e-9) -> bool:
    """Equal shapes and values, NaN matching NaN (to recognise a known bug's output, NaN and all)."""
    return mismatch(a, b, rtol=rtol, atol=atol, nan_equal=True) is None


def unchanged(before, after) -> bool:
    """True when ``after`` holds exactly the values of the snapshot ``before`` (NaN-aware, exact)."""
    if not is_array(after) or shape_of(after) != shape_of(before):
        return False
    x, y = flat_floats(before), flat_floats(after)
    if x == y:  # list equality: exactly equal everywhere (NaN never equals itself, so NaN takes the loop)
        return True
    for i in range(len(x)):
        if x[i] != y[i] and not (x[i] != x[i] and y[i] != y[i]):
            return False
    return True

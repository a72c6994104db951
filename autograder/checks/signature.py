"""A salt-independent "wrong-number signature" of a hidden test a learner's function failed with a wrong result.

A hidden test draws its inputs from ``runner.rng_for``, seeded by the grading salt each grading process draws afresh,
so two learners graded by different processes see different inputs and their wrong outputs cannot be compared. The
signature runs the test once more at ``SIGNATURE_SALT``, one fixed salt, the same for every grading process and run,
records every result the learner's function gave (``runner._attempt``: what it returned, or the ``runner.Raised``
error), and hashes them, quantised (``digest``). Two functions that give the same wrong numbers on the same inputs get
the same signature, whatever their variables are called or in which order their independent statements run; when
no catalogued bug explains those numbers, equal signatures are strong evidence of shared work (the similarity report
reads them). A signature changes no score: ``hidden_tests.Session`` keeps the verdict the first run decided and only
adds the signature to it (``Verdict.signature``, carried to ``state.Item.signature``).

``signature_of(test, values)`` runs a ``registry.HiddenTest`` on ``values`` ({learner name: function or value}, as the
test is called) inside ``recording()``; it works on ``hidden_tests.RemoteFunction`` stand-ins in the grader and on
plain functions in this process alike (``tests/unit/checks/test_signature.py``,
``tests/grading/test_signature_grading.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
from typing import Any, Iterator

import numpy as np

from autograder.checks import runner

SIGNATURE_SALT = 20240601  # the salt of every signature's inputs: fixed, so signatures compare across a class and runs
DIGITS = 4  # significant digits a float keeps
FLUSH = 1e-9  # an array's entries below this share of its largest magnitude are rounding noise: counted as 0
LENGTH = 16  # hex characters of a signature


class _Recording:
    """What ``recording`` collects: the salt ``runner.rng_for`` uses, and every learner result ``runner._attempt``
    returned, in order (arrays copied as they were returned: a test may change them afterwards)."""

    def __init__(self, salt: int):
        self.salt = salt
        self.results: list = []

    def record(self, got) -> None:
        self.results.append(_kept(got))


def _kept(value):
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    if isinstance(value, (tuple, list)):
        return type(value)(_kept(v) for v in value) if type(value) in (tuple, list) else value
    if type(value) is dict:
        return {k: _kept(v) for k, v in value.items()}
    return value


@contextlib.contextmanager
def recording(salt: int = SIGNATURE_SALT) -> Iterator[list]:
    """While inside, in this thread (context) only: ``runner.rng_for`` draws at ``salt`` instead of the environment's
    grading salt, and every result of a learner's function that ``runner._attempt`` returns is appended to the list
    this yields."""
    run = _Recording(salt)
    token = runner.SIGNATURE_RUN.set(run)
    try:
        yield run.results
    finally:
        runner.SIGNATURE_RUN.reset(token)


def signature_of(test, values: dict) -> str | None:
    """The signature of ``test`` (a ``registry.HiddenTest``) run once on ``values`` at ``SIGNATURE_SALT``: the
    ``digest`` of what the learner's functions gave, whether the test fails there (its ``WrongAnswer`` is swallowed) or
    passes; None when the run ended any other way (the kernel gone, the test unable to use a result) or recorded no
    evidence. What the test prints is dropped."""
    with recording() as recorded:
        try:
            with contextlib.redirect_stdout(io.StringIO()), np.errstate(all="ignore"):
                test(values)
        except AssertionError:  # a WrongAnswer, or a test's own assertion: the results are the evidence
            pass
        except Exception:  # noqa: BLE001 - the run did not end as a test ends: no signature
            return None
    return digest(recorded)


# ------------------------------------------------------------------ the digest


def digest(recorded: list) -> str | None:
    """A short hex digest of ``recorded`` (learner results, in order), or None when nothing was recorded or every
    result is an error (``runner.Raised``: what any wrong code may raise, no evidence of shared work).

    Quantised, so the same numbers written by other code give the same digest: floats (scalars and arrays, float32
    or float64 alike) to ``DIGITS`` significant digits (an array's entries below ``FLUSH`` of its largest are 0; NaN,
    +inf and -inf kept apart), ints and bools exact, arrays by shape, dtype kind and values, tuples, lists and dicts
    element by element (a dict by its sorted keys), an error by its type's name, anything else by its type's name."""
    if not recorded or all(isinstance(r, runner.Raised) for r in recorded):
        return None
    h = hashlib.sha256()
    for result in recorded:
        _feed(h, result)
    return h.hexdigest()[:LENGTH]


def _token(h, *parts: Any) -> None:
    text = repr(parts).encode()
    h.update(len(text).to_bytes(8, "little") + text)


def _feed(h, value) -> None:
    if isinstance(value, runner.Raised):
        _token(h, "raised", type(value.error).__name__)
    elif isinstance(value, (bool, np.bool_)):
        _token(h, "bool", bool(value))
    elif isinstance(value, (int, np.integer)):
        _token(h, "int", int(value))
    elif isinstance(value, (float, np.floating)):
        _token(h, "float")
        _numbers(h, np.asarray(float(value)))
    elif isinstance(value, (complex, np.complexfloating)):
        _token(h, "complex")
        _numbers(h, np.asarray(complex(value).real))
        _numbers(h, np.asarray(complex(value).imag))
    elif isinstance(value, np.ndarray):
        _array(h, value)
    elif isinstance(value, (tuple, list)):
        _token(h, type(value).__name__, len(value))
        for v in value:
            _feed(h, v)
    elif isinstance(value, dict):
        _token(h, "dict", len(value))
        for key in sorted(value, key=repr):
            _token(h, "key", repr(key))
            _feed(h, value[key])
    else:
        _token(h, "other", type(value).__name__)


def _array(h, a) -> None:
    a = np.asarray(a)
    kind = a.dtype.kind
    _token(h, "array", tuple(int(n) for n in a.shape), kind)
    if kind == "f":
        _numbers(h, a.astype(np.float64))
    elif kind == "c":
        _numbers(h, a.real.astype(np.float64))
        _numbers(h, a.imag.astype(np.float64))
    elif kind in "bu":
        h.update(np.ascontiguousarray(a, dtype="<u8").tobytes())
    elif kind == "i":
        h.update(np.ascontiguousarray(a, dtype="<i8").tobytes())
    # any other kind (strings, objects): its shape and kind only


_NAN, _INF = 32000, 32001  # exponents no finite float64 has: NaN, and +-inf (by the mantissa's sign)


def _numbers(h, a: np.ndarray) -> None:
    """Feed float64 values as (mantissa of ``DIGITS`` digits, power of ten) pairs: 1234.5 and 1234.4999 as (1234, 0)
    alike when ``DIGITS`` is 4 (1.2345e3 rounds to 1.234e3 or 1.235e3, the same way for the same value)."""
    with np.errstate(all="ignore"):
        finite = np.isfinite(a)
        magnitude = np.where(finite, np.abs(a), 0.0)
        top = magnitude.max() if magnitude.size else 0.0
        zero = magnitude <= top * FLUSH  # exact zeros too (and every entry of an all-zero array)
        exponent = np.floor(np.log10(np.where(zero, 1.0, magnitude))).astype(np.int64)
        shift = (DIGITS - 1) - exponent  # scaled in two steps: 10.0 ** 327 alone is inf
        mantissa = np.round(np.where(zero, 0.0, a) * 10.0 ** (shift // 2) * 10.0 ** (shift - shift // 2))
        over = np.abs(mantissa) >= 10 ** DIGITS  # 9999.6 rounded up to 10000: one more digit
        mantissa = np.where(over, np.round(mantissa / 10), mantissa)
        exponent = exponent + over
        mantissa = np.where(finite, mantissa, np.where(np.isnan(a), 0.0, np.sign(a)))
        exponent = np.where(zero & finite, 0, exponent)
        exponent = np.where(np.isnan(a), _NAN, np.where(np.isinf(a), _INF, exponent))
    h.update(np.ascontiguousarray(mantissa, dtype="<i8").tobytes())
    h.update(np.ascontiguousarray(exponent, dtype="<i8").tobytes())

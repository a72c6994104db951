"""The grader's side of a hidden test cell: the test runs here, the learner's functions run in the kernel.

``SafeExecute`` (``execute.py``) opens a ``Session`` for each graded cell that has a registered hidden test
(``autograder/checks/registry.py``, found by the cell's grade_id) and answers the kernel's stdin requests with
``Session.answer``; the protocol is described in ``autograder/kernel/hidden_cell.py``. The test function runs in a
thread of the grader with ``RemoteFunction`` stand-ins for the learner's functions: calling one sends the
inputs to the kernel and returns what the learner's function returned there (and applies any change it made to
its array arguments in place, so the test sees it). Inputs are drawn here with this process's salt; the
reference, the expected values and the bug catalog never leave this process. The verdict (``Session.verdict``, a
``checks.verdict.Verdict``) is written into the cell by ``SafeExecute`` and carried whole to the record: the kernel
cannot turn a failure into a pass.

A test that ended with a wrong result no catalogued bug explains (``UNNAMED``, ``uncatalogued``) runs once more, at
the fixed salt of ``checks.signature``, for the verdict's ``signature`` (the wrong numbers, comparable across
grading processes): in the same thread, before the cell's result goes back to the kernel, so inside the same cell
timeout; only when the cell has run at most ``SIGNATURE_SECONDS`` so far, and starting no learner call after
``SIGNATURE_SECONDS`` (or the first run's time and a second, if less). The verdict, score and message stay the first
run's; a rerun that fails in any way (the kernel gone, out of time) leaves the signature None.

Nothing the kernel reports about itself is trusted: a stand-in that refused (``verdict.Refusal``) is remembered
here, and the learner's call raises that refusal whatever the kernel answers after it; and the kernel's memory is
never asked for: ``RemoteFunction.memory_limit`` is the limit the grader set, which a hidden test uses to choose
inputs too large for the array a function must not build.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import queue
import threading
import time

import numpy as np

from autograder.checks import signature
from autograder.checks.verdict import (INTERFERED, NOT_RUN, PASSED, RESULTS, UNNAMED, CallRefused, KernelGone, Verdict,
                                       WrongAnswer, with_remote_frames)
from autograder.kernel.protocol import Unrecordable, decode, decode_value, encode, encode_value, exception_named

WAIT = 3600  # seconds a side waits for the other; the cell's own timeout stops a kernel long before
SIGNATURE_SECONDS = 5.0  # the longest a cell may have run for its failing test to be run again for a signature,
# and the longest that rerun starts learner calls for (the cell's timeout, by default 60 s, stops it anyway)


class ProtocolError(Exception):
    """The kernel sent something the protocol does not allow."""


DEFAULT_STAND_IN_BUDGET = 2048 << 20  # bytes a helper may build when no kernel limit is set (the default --memory-mb)
_BUDGET_LOCK = threading.Lock()


class StandInTooLarge(CallRefused):
    """A helper the grader answers for the learner's function was asked for more than the kernel's memory limit:
    it fails the function that asked, whatever its code does with the error."""

    def __init__(self, name, budget: int):
        super().__init__(f"{name} was called with sizes whose result would not fit in {budget >> 20} MB, the memory "
                         f"limit of your notebook's kernel: the grader answers {name} for your function, and refuses "
                         "sizes your own kernel could not hold either; call it with the sizes the function was given")


@contextlib.contextmanager
def within_budget(budget: int):
    """While inside, this process may map at most ``budget`` bytes more than it has mapped now (``RLIMIT_AS``), so a
    helper computed here on a learner's behalf (``causal_mask(30000)``: 900 million cells) raises ``MemoryError``
    instead of taking the grader's memory. One helper at a time; the earlier limit is back on leaving."""
    import resource

    with _BUDGET_LOCK:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm") as fh:
            mapped = int(fh.read().split()[0]) * resource.getpagesize()
        limit = mapped + budget
        lowered = (soft == resource.RLIM_INFINITY or soft > limit) and (hard == resource.RLIM_INFINITY or limit <= hard)
        if lowered:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        try:
            yield
        finally:
            if lowered:
                resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


class RemoteFunction:
    """A learner's function, called in the kernel (a ``verdict.LearnerCall``). ``standing_in`` names the functions the grader
    answers for (their stand-ins) while it runs."""

    def __init__(self, name: str, session: "Session"):
        self.__name__ = self.name = name
        self._session = session
        self._stand_ins: dict = {}

    @property
    def stand_ins_bound(self) -> dict:
        """{name: the grader's stand-in} of the helpers bound now."""
        return dict(self._stand_ins)

    @contextlib.contextmanager
    def standing_in(self, stand_ins: dict):
        saved = self._stand_ins
        self._stand_ins = {**saved, **stand_ins}
        try:
            yield
        finally:
            self._stand_ins = saved

    def __call__(self, *args, **kwargs):
        return self._session.call(self, args, kwargs)

    @property
    def memory_limit(self):
        """Bytes the kernel may hold (its address-space limit, set by the grader), or None when unknown."""
        return self._session.memory_limit

    def __repr__(self):
        return f"<the notebook's {self.name}>"


class Session:
    """One hidden test cell being graded."""

    def __init__(self, test, memory_limit=None):
        self.test = test
        self.memory_limit = memory_limit  # bytes the kernel may hold (the sandbox's limit), or None
        self._refusals: list = []  # calls the grader refused (verdict.CallRefused), in the order it did
        self._verdict: Verdict | None = None  # how the test ended, once it has (decided here, never by the kernel)
        self.printed = ""  # what the test printed for the learner
        self.self_check: str | None = None  # for an uncatalogued failure: what the learner's own self-check said
        self._state = "new"
        self._opened = time.monotonic()  # the cell started with the session (``SafeExecute``)
        self._rerun_until: float | None = None  # during the signature's rerun: no learner call starts after this
        self._closed = False
        self._to_kernel: queue.Queue = queue.Queue()
        self._from_kernel: queue.Queue = queue.Queue()

    # ---------------------------------------------------------------- the kernel's messages (stdin requests)

    def answer(self, prompt: str) -> str:
        """The reply to one input request of the kernel (blocks until the test thread has one)."""
        try:
            message = decode(prompt)
            op = message["op"]
            if self._state == "new" and op == "names":
                self._state = "named"
                return encode({"op": "names", "names": list(self.test.names)})
            if self._state == "named" and op == "ready":
                self._state = "running"
                values = {name: self._value(name, message.get("values", {}).get(name)) for name in self.test.names}
                threading.Thread(target=self._run, args=(values,), daemon=True).start()
            elif self._state == "running" and op in ("result", "raised", "stand_in"):
                self._from_kernel.put(message)
            elif self._state == "running" and op == "self_check" and self._verdict and self._verdict.uncatalogued:
                self.self_check = str(message.get("said", ""))[:2000]
                return encode({"op": "done", "passed": False})
            else:
                raise ProtocolError(f"unexpected {op!r} in state {self._state}")
        except Exception as exc:  # noqa: BLE001 - a malformed or out-of-turn message from the notebook
            self._finish(Verdict(INTERFERED, message="the notebook interfered with the hidden test's channel "
                                                             f"({type(exc).__name__}); the test cannot pass"))
            self._from_kernel.put(KernelGone())
            return encode({"op": "done", "passed": False})
        try:
            return encode(self._to_kernel.get(timeout=WAIT))
        except queue.Empty:
            return encode({"op": "done", "passed": False})

    def _value(self, name, data):
        if data is None or data == {"function": True} or data == {"unrecordable": "_Absent"}:
            return RemoteFunction(name, self)  # an absent name fails in the kernel with the learner's NameError
        return decode_value(data)

    def close(self):
        """The cell is over: release a test still waiting for the kernel."""
        self._closed = True
        self._from_kernel.put(KernelGone())
        self._to_kernel.put({"op": "done", "passed": False})

    # ---------------------------------------------------------------- the test thread

    def _run(self, values):
        printed = io.StringIO()
        started = time.monotonic()
        try:
            with contextlib.redirect_stdout(printed):  # what the test tells the learner goes into the cell
                self.test(values)
        except KernelGone:
            self._finish(Verdict(NOT_RUN))
        except WrongAnswer as exc:
            self._finish(exc.verdict)
        except AssertionError as exc:  # a test's own assertion: a wrong result, not explained
            self._finish(Verdict(UNNAMED, message=str(exc) or "the hidden test did not pass"))
        except Exception as exc:  # noqa: BLE001 - the test could not use what the notebook returned
            self._finish(Verdict(UNNAMED, message=f"the hidden test could not use your result "
                                                          f"({type(exc).__name__}: {exc})"))
        else:
            self._finish(Verdict(PASSED))
        finally:
            self.printed = printed.getvalue()
        assert self._verdict is not None
        try:
            self._sign(values, time.monotonic() - started)
        finally:
            self._to_kernel.put({"op": "done", "passed": self._verdict.passed,
                                 "visible_check": self.test.visible_check, "self_check": self._verdict.uncatalogued})

    def _sign(self, values, took: float) -> None:
        """For a wrong result no bug explains, the verdict's ``signature``: the test run once more at the signature's
        fixed salt (``checks.signature.signature_of``); nothing else of the verdict changes, and any failure of the
        rerun leaves it None."""
        ended = self._verdict
        if ended is None or ended.result != UNNAMED or not ended.uncatalogued:
            return
        if self._closed or time.monotonic() - self._opened > SIGNATURE_SECONDS:
            return
        self._rerun_until = time.monotonic() + min(SIGNATURE_SECONDS, took + 1.0)
        try:
            found = signature.signature_of(self.test, values)
        except Exception:  # noqa: BLE001 - the rerun only adds evidence: whatever broke it, no signature
            found = None
        finally:
            self._rerun_until = None
        if found is not None and not self._closed and self._verdict is ended:
            self._verdict = dataclasses.replace(ended, signature=found)

    def _finish(self, ended: Verdict) -> None:
        if self._verdict is None:  # the first ending counts: a channel broken after the test ended changes nothing
            self._verdict = ended

    @property
    def finished(self) -> bool:
        """Whether the test reached an end (passed, failed, or found the kernel gone)."""
        return self._verdict is not None

    def verdict(self) -> Verdict:
        """How the test ended (one of ``RESULTS``): ``NOT_RUN`` when it did not reach its end (the kernel died or
        timed out); for an uncatalogued failure, the message begins with what the learner's own self-check said."""
        if self._verdict is None:
            return Verdict(NOT_RUN)
        if not self._verdict.uncatalogued:
            return self._verdict
        said = self.self_check or "What your self-check says could not be read."
        return dataclasses.replace(self._verdict, message=f"{said}\nThe hidden tests found: {self._verdict.message}")

    def call(self, fn: RemoteFunction, args, kwargs):
        """What the learner's ``fn`` returned in the kernel; raises what it raised, or the refusal of a stand-in it
        called (even when the notebook caught that error and went on)."""
        if self._rerun_until is not None and time.monotonic() > self._rerun_until:
            raise KernelGone()  # the signature's rerun is out of time: it ends here, before the kernel is asked
        refused_before = len(self._refusals)
        self._to_kernel.put({"op": "call", "name": fn.name, "args": [encode_value(a) for a in args],
                             "kwargs": {k: encode_value(v) for k, v in kwargs.items()}, "stand_ins": sorted(fn._stand_ins),
                             **({"quiet": True} if self._rerun_until is not None else {})})
        while True:
            try:
                message = self._from_kernel.get(timeout=WAIT)
            except queue.Empty:
                raise KernelGone() from None
            if isinstance(message, KernelGone):
                raise message
            if message["op"] == "stand_in":
                self._to_kernel.put(self._stand_in(fn, message))
                continue
            if len(self._refusals) > refused_before:
                raise self._refusals[refused_before]
            if message["op"] == "raised":
                exc = exception_named(str(message.get("type", "Exception")), str(message.get("message", "")))
                if isinstance(exc, NameError) and isinstance(message.get("name"), str):
                    exc.name = message["name"]  # the name it said was not defined
                raise with_remote_frames(exc, list(message.get("traceback", []))[-12:])
            for index, data in (message.get("changed") or {}).items():
                i = int(index)
                new = decode_value(data)
                if i < len(args) and type(args[i]) is np.ndarray and getattr(new, "shape", None) == args[i].shape:
                    args[i][...] = new
                elif i < len(args) and type(args[i]) is type(new) is np.random.Generator:
                    args[i].bit_generator.state = new.bit_generator.state  # the draws the learner made
            return decode_value(message.get("value"))

    def _stand_in(self, fn: RemoteFunction, message) -> dict:
        """A bound helper was called inside the learner's function: answer with the grader's version."""
        helper = fn._stand_ins.get(message.get("name"))
        if helper is None:
            return {"op": "stand_in_raised", "type": "NameError",
                    "message": f"{message.get('name')!r} is not a helper of this test"}
        try:
            args = [decode_value(a) for a in message.get("args", [])]
            kwargs = {k: decode_value(v) for k, v in message.get("kwargs", {}).items()}
            if any(isinstance(v, Unrecordable) for v in (*args, *kwargs.values())):
                raise TypeError("an argument is not a numpy array or a plain value")
            with within_budget(self.memory_limit or DEFAULT_STAND_IN_BUDGET):
                try:
                    drawn_before = {i: encode_value(a) for i, a in enumerate(args) if type(a) is np.random.Generator}
                    value = helper(*args, **kwargs)
                    # a generator the helper drew from goes back advanced: the learner's next draw continues it
                    changed = {str(i): encode_value(args[i]) for i, b in drawn_before.items()
                               if encode_value(args[i]) != b}
                    answer = {"op": "stand_in_result", "value": encode_value(value), "changed": changed}
                except MemoryError:
                    raise StandInTooLarge(message.get("name"), self.memory_limit or DEFAULT_STAND_IN_BUDGET) from None
                finally:
                    value = None  # what it built is freed before the grader's own limit comes back
            return answer
        except Exception as exc:  # noqa: BLE001 - as the helper would raise in the learner's kernel
            if isinstance(exc, CallRefused):  # the learner's function may not hand this work on
                self._refusals.append(exc)
            return {"op": "stand_in_raised", "type": type(exc).__name__, "message": str(exc)[:2000]}

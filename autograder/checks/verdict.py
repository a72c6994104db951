"""What crosses between a hidden test and the grader that runs it, declared once: how a test ended (``Verdict``), the
errors a test raises or meets (``WrongAnswer``, ``KernelGone``, ``CallRefused`` and the stand-in's ``Refused``),
the stand-in that refuses (``Refusal``) and what a learner's function called in the kernel offers a test
(``LearnerCall``).

A ``Verdict`` is made once, where the test runs: ``hidden_tests.Session`` in the grader (from the ``WrongAnswer`` a
test raised, or from how the cell ended), or ``salt_sweep`` in the proofs. It is carried whole, as data, through
the execution report in the graded notebook (``execute.ExecutionReport``) to the state record (``items.record``),
the insights and the feedback. The catalogued bug, the error the learner's code raised and the name a ``NameError``
named are fields of it: nothing downstream reads a message to learn what a test decided, so a message can be
reworded freely.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ContextManager, Mapping, Protocol, runtime_checkable

# How a hidden test ended: the result words, declared here only.
PASSED = "passed"  # every case right
BUG = "bug"  # wrong, as the catalogued bug ``Verdict.bug`` is
UNNAMED = "unnamed"  # wrong in a way no catalogued bug explains
UNANSWERED = "unanswered"  # the function is still the untouched stub
INTERFERED = "interfered"  # the notebook broke the hidden test's channel
NOT_RUN = "not run"  # the test did not reach its end: the kernel died, timed out or was stopped
RESULTS = (PASSED, BUG, UNNAMED, UNANSWERED, INTERFERED, NOT_RUN)

MAX_MESSAGE = 4000  # characters of a verdict's message kept in the execution report and the record


@dataclass(frozen=True)
class Verdict:
    """How one hidden test ended.

    ``result``: one of ``RESULTS``; ``bug``: the catalogued bug's id, for ``BUG`` only; ``raised``: the type name of
    the error the learner's code raised when that is what failed the test; ``undefined``: the name a ``NameError``
    said was not defined; ``uncatalogued``: a wrong result no bug explains, for which the learner's own self-check is
    asked what it sees; ``message``: what the learner reads in the cell; ``signature``: for an uncatalogued
    ``UNNAMED`` result, the digest of what the learner's function gave on the test's inputs at one fixed salt
    (``checks.signature``: equal across grading runs for equal wrong numbers), else None. It changes no score."""

    result: str
    bug: str | None = None
    raised: str | None = None
    undefined: str | None = None
    uncatalogued: bool = False
    message: str | None = None
    signature: str | None = None

    def __post_init__(self):
        if self.result not in RESULTS:
            raise ValueError(f"a verdict's result is one of {RESULTS}, not {self.result!r}")
        if (self.bug is not None) != (self.result == BUG):
            raise ValueError(f"a verdict names a bug exactly when its result is {BUG!r}")

    @property
    def passed(self) -> bool:
        return self.result == PASSED

    def to_json(self) -> dict:
        data = asdict(self)
        if data["message"] is not None:
            data["message"] = data["message"][:MAX_MESSAGE]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Verdict":
        """The verdict ``to_json`` wrote (the grader wrote it after the kernel was gone, over anything the
        submission held there); a ValueError for anything else."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a verdict is a mapping, not {type(data).__name__}")

        def text(key):
            value = data.get(key)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"a verdict's {key} is text")
            return value

        return cls(str(data.get("result")), bug=text("bug"), raised=text("raised"), undefined=text("undefined"),
                   uncatalogued=bool(data.get("uncatalogued", False)), message=text("message"),
                   signature=text("signature"))


class WrongAnswer(AssertionError):
    """A hidden test found the learner's function wrong; the message is for the learner (an ``AssertionError``, so
    a test that runs in the learner's own kernel fails the cell as nbgrader expects).

    What the test decided travels beside the message, never inside it: ``bug`` (a catalogued ``Bug`` the results
    match), ``raised`` (the error the learner's code raised), ``undefined`` (the name a ``NameError`` named),
    ``uncatalogued`` (no bug explains the difference: the grader asks the learner's self-check) and ``unanswered``
    (the function is the untouched stub)."""

    def __init__(self, message, *, bug=None, raised: str | None = None, undefined: str | None = None,
                 uncatalogued: bool = False, unanswered: bool = False):
        super().__init__(message)
        self.bug_id = bug.id if bug is not None else None
        self.raised, self.undefined = raised, undefined
        self.uncatalogued, self.unanswered = uncatalogued, unanswered

    @classmethod
    def naming(cls, bug, detail: str = "", **kwargs) -> "WrongAnswer":
        """The failure of a test whose evidence matches the catalogued ``bug``: its diagnosis and id, then
        ``detail`` (on which input, what was seen) in brackets."""
        return cls(f"{bug.diagnosis} [{bug.id}]" + (f" ({detail})" if detail else ""), bug=bug, **kwargs)

    @property
    def verdict(self) -> Verdict:
        result = BUG if self.bug_id else UNANSWERED if self.unanswered else UNNAMED
        return Verdict(result, bug=self.bug_id, raised=self.raised, undefined=self.undefined,
                       uncatalogued=self.uncatalogued and result == UNNAMED, message=str(self))


class KernelGone(Exception):
    """The kernel stopped answering while a test called the learner's function (it died, timed out, or left the
    protocol): not the learner's code's doing, so the test ends unrun instead of recording an error of the code."""


class CallRefused(Exception):
    """A call the learner's function made was refused by the grader (a function the lesson tells it not to call, or
    a helper asked for more than the kernel's memory limit): the function fails whatever its code does with the
    error, since the grader remembers the refusal (``hidden_tests.Session``)."""


class Refused(CallRefused):
    """A graded function called a function of the lesson that the lesson tells it not to call (raised by a
    ``Refusal``)."""

    def __init__(self, name: str, graded: str, because: str = ""):
        why = f" ({because})" if because else ""
        super().__init__(f"{graded} called {name}, which the lesson asks it not to call{why}: while its hidden test "
                         f"runs, {name} refuses to answer, so {graded} must do that work itself")
        self.name, self.graded, self.because = name, graded, because


class Refusal:
    """The stand-in of ``name`` while a test grades ``graded``, which the lesson tells not to call it (``because``).
    ``calls`` (a list) keeps every refusal, so the test fails even when the learner's code caught the error."""

    def __init__(self, name: str, graded: str, because: str = "", calls=None):
        self.__name__ = self.name = name
        self.graded = graded
        self.because = because
        self.calls = calls if calls is not None else []

    def __call__(self, *args, **kwargs):
        refused = Refused(self.name, self.graded, self.because)
        self.calls.append(refused)
        raise refused

    def __repr__(self):
        return f"<{self.name}, refused to {self.graded}>"


@runtime_checkable
class LearnerCall(Protocol):
    """A learner's function as the grader calls it in the kernel (``hidden_tests.RemoteFunction``). A test puts in
    the stand-ins the grader answers for while it runs (``standing_in``), reads which are in (``stand_ins_bound``) and
    chooses inputs by the kernel's memory limit the grader set (``memory_limit``, bytes; never measured in the
    kernel, whose word the notebook could rewrite)."""

    name: str

    @property
    def memory_limit(self) -> int | None: ...

    @property
    def stand_ins_bound(self) -> dict: ...

    def standing_in(self, stand_ins: dict) -> ContextManager[None]: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


def remote_frames(exc: BaseException) -> list | None:
    """The learner's frames (text) of an error raised by a learner's function in the kernel, or None for an error
    raised in this process (its frames are its ``__traceback__``)."""
    return getattr(exc, "_learner_frames", None)


def with_remote_frames(exc: BaseException, frames: list) -> BaseException:
    """``exc`` (rebuilt from the kernel's report) carrying the learner's frames the kernel sent as text."""
    exc._learner_frames = [str(line) for line in frames]  # type: ignore[attr-defined]
    return exc

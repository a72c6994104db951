"""Hidden tests registered by name: one per graded test cell, named by that cell's grade_id.

A lesson's hidden tests live in ``autograder/checks/lessonNN.py``; each is declared with ``@hidden_test``, which
records the learner names it reads from the notebook (``uses``: the graded functions or values, passed
positionally; ``helpers``: passed by keyword, the learner's own versions of functions of the lesson the test itself
uses), the learner functions it grades together with ``uses`` (``together``: never replaced), the functions the
lesson tells the graded one, in words, not to call (``forbids``, with the lesson's reason) and the visible
self-check that follows it in the cell (``visible_check``: it gives way when the hidden test passes, so a bug
elsewhere costs nothing here).

Isolation: while a test runs, every other function of the lesson (``autograder/checks/stand_ins.py``: pasted from
an earlier lesson, given, ungraded, or graded by another test) is replaced by a stand-in wherever a learner's
function looks it up, so a cell's score depends only on the functions it grades: the reference answers for it, so
a graded function may call any function the lesson gives or has the learner write (a correct solution that reuses
one earns full marks, and a slip in that one costs only its own tests), except one the lesson forbids it: that
stand-in refuses (``stand_ins.Refusal``), so the graded function earns nothing for the work the lesson asked of it.

The hidden cell itself is one line, ``__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("<grade_id>")``; the
grader finds the test from the cell's grade_id, which nbgrader restores before grading (not from the cell's
text), and runs it with the learner's names looked up in the notebook's namespace.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass

from autograder import course
from autograder.checks import stand_ins
from autograder.checks.runner import bound
from autograder.checks.verdict import WrongAnswer


@dataclass(frozen=True)
class HiddenTest:
    lesson: str  # the lesson's id, "01_warmup"
    name: str  # the graded cell's grade_id
    function: object
    uses: tuple
    helpers: tuple = ()
    visible_check: str | None = None
    together: tuple = ()
    forbids: tuple = ()  # the functions the lesson tells the graded ones not to call
    because: str = ""  # the lesson's words for why

    @property
    def names(self) -> tuple:
        return self.uses + self.helpers

    def stand_ins(self, refused=None) -> dict:
        """{name: stand-in} of every learner function of the lesson that this test does not grade: the reference,
        or a ``Refusal`` for a function the lesson forbids (each refusal appended to the list ``refused``)."""
        graded = set(self.uses) | set(self.together)
        lesson = stand_ins.of(self.lesson)
        return {n: stand_ins.Refusal(n, " and ".join(self.uses), self.because, refused) if n in self.forbids else f
                for n, f in lesson.items() if n not in graded}

    def __call__(self, values: dict):
        """Run the test on ``values`` ({learner name: function or value}); raises AssertionError when it fails.

        Each learner function runs with the stand-ins of the functions this test does not grade bound in place; a
        test whose learner code called a refusal fails, even when that code caught the error."""
        refused: list = []
        others = self.stand_ins(refused)
        with contextlib.ExitStack() as stack:
            for name in self.uses:  # a helper shares the graded function's namespace (a notebook's) or is the reference
                if callable(values[name]):
                    stack.enter_context(bound(values[name], {n: f for n, f in others.items() if n != name}))
            result = self.function(*[values[n] for n in self.uses], **{n: values[n] for n in self.helpers})
        if refused:
            raise WrongAnswer(f"{refused[0]}.")
        return result


_TESTS: dict = {}


def hidden_test(*, uses, helpers=(), visible_check=None, together=(), name=None, forbids=(), because=""):
    """Register the decorated function as the hidden test of the cell ``name`` (default: the function's name).
    ``forbids``: functions the lesson's text tells the graded ones not to call, ``because`` its reason in a few
    words (the refusal says it)."""
    if bool(forbids) != bool(because):
        raise ValueError("a hidden test that forbids calls says why (because=...), and only then")

    def register(function):
        lesson = course.lesson_numbered(function.__module__)  # declared in autograder/checks/lessonNN.py
        test = HiddenTest(lesson, name or function.__name__, function, tuple(uses), tuple(helpers), visible_check,
                          tuple(together), tuple(forbids), " ".join(because.split()))
        _TESTS[(lesson, test.name)] = test
        return function

    return register


def tests_of(lesson: str) -> dict:
    """{grade_id: HiddenTest} of one lesson (``01_warmup``); {} for a notebook that is no lesson of the course."""
    if lesson not in course.lesson_names():
        return {}
    importlib.import_module(f"autograder.checks.lesson{course.lesson_number(lesson)}")
    return {name: test for (les, name), test in _TESTS.items() if les == lesson}


def find(lesson: str, grade_id: str):
    return tests_of(lesson).get(grade_id)


def all_tests() -> dict:
    for lesson in course.lesson_names():
        tests_of(lesson)
    return dict(_TESTS)


def run_here(grade_id: str, namespace: dict) -> HiddenTest:
    """Run a hidden test in this process, on the notebook's own namespace (an instructor's kernel, nbval)."""
    for lesson in course.lesson_names():
        test = find(lesson, grade_id)
        if test is not None:
            missing = object()
            values = {n: namespace.get(n, missing) for n in test.names}
            absent = [n for n, v in values.items() if v is missing]
            if absent:
                raise NameError(f"{', '.join(absent)} is not defined: run the cells above this one first")
            test(values)
            return test
    raise LookupError(f"no hidden test is registered for the cell {grade_id!r}")

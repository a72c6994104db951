"""A hidden test run as the grader runs it, without a kernel: the grader's ``Session`` on one side, the kernel's
``hidden_cell.run`` on the other, in this process, on a namespace of learner functions (the kernel's ``input()``
answered by the session, as ``SafeExecute`` does)."""

from __future__ import annotations

import builtins

from autograder.checks import registry
from autograder.grading.pipeline.hidden_tests import Session
from autograder.kernel import hidden_cell


def run(monkeypatch, lesson: str, grade_id: str, namespace: dict, memory_limit=None) -> Session:
    """The closed session of ``grade_id`` run on ``namespace``: its ``verdict()`` is how the test ended."""
    session = Session(registry.find(lesson, grade_id), memory_limit=memory_limit)
    monkeypatch.setenv("MHA_HIDDEN_TESTS", "grader")
    monkeypatch.setattr(hidden_cell, "_namespace", lambda: namespace)
    monkeypatch.setattr(builtins, "input", lambda prompt="": session.answer(prompt))
    try:
        hidden_cell.run(grade_id)
    except hidden_cell.HiddenTestFailed:
        pass
    finally:
        session.close()
    return session

"""Find-the-bug exercises: the student notebook hands out working-looking code that carries one catalogued bug.

A bug declared with ``given=True`` in ``autograder/bugs/lessonNN.py`` is the starting code of the answer cell that
defines its function: the lesson source holds the fixed function (the model answer, between the solution
markers), and the build (``autograder/publish/build.py``) releases the bug's source in that cell instead of nbgrader's
``raise NotImplementedError()`` stub. The learner finds the bug with the course's tools, fixes it in place, and the
hidden tests named in ``bug.tests`` grade the fix; since the given code *is* a catalogued bug, the mutation
harness proves those tests catch it, with its diagnosis.
"""

from __future__ import annotations

import re

from autograder import bugs


def given_bugs(lesson: str) -> list:
    """The bugs handed out in ``lesson`` (``05_exercises``)."""
    return [b for b in bugs.CATALOG if b.given and b.lesson == lesson]


def answer_cell_of(nb, function: str):
    """The one answer cell of ``nb`` that defines ``function``."""
    found = [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")
             and re.search(rf"^def {re.escape(function)}\(", c.source, re.M)]
    if len(found) != 1:
        raise ValueError(f"a given bug needs exactly one answer cell defining {function}(), found {len(found)}")
    return found[0]


def hand_out(lesson: str, nb):
    """``nb`` (a released student notebook) with each given bug's source in its function's answer cell."""
    for b in given_bugs(lesson):
        answer_cell_of(nb, b.function).source = b.source
    return nb


def expected_failures(lesson: str) -> set:
    """grade_ids of the test cells whose visible self-check fails on the untouched notebook (the given bugs')."""
    return {t for b in given_bugs(lesson) for t in b.tests}

"""The catalog of correct solutions written differently from the model answers: data, not prose.

Each entry is the whole source of one graded answer cell as a learner might write it (einsum instead of matmul,
loops, ``moveaxis``, checks that raise on input the lesson's contract rules out, calls to functions the lesson
gives or has the learner write, float64 inside), with a line on how it differs. Every one must earn full marks:
``autograder/proofs/salt_sweep.py`` (``--alternatives``) runs every hidden test of its lesson with it in place of
the model answer, at every grading salt, and ``tests/grading/test_mutations.py`` grades notebooks made of them
through the grading command (``autograder/proofs/mutation.py``: ``fair_rounds``). Each graded answer cell has at least two (``tests/unit/proofs/test_alternatives.py``).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Alternative:
    id: str
    lesson: str  # the lesson's id (01_warmup), from the module that declares it
    cell: str  # the grade_id of the answer cell whose whole source it replaces
    how: str  # how it differs from the model answer
    source: str


CATALOG: list = []
LESSON_MODULES = []  # filled by _load_lessons(): autograder/alternatives/lessonNN.py, one per lesson


def declarer(module: str):
    """The ``alternative(id, cell, how, source)`` that a lesson's module (``alternatives/lesson01.py``, named by
    ``__name__``) declares its alternatives with: each is filed under that lesson's id."""
    from autograder import course

    lesson = course.lesson_numbered(module)

    def alternative(id, cell, how, source):
        CATALOG.append(Alternative(id, lesson, cell, " ".join(how.split()), textwrap.dedent(source).strip() + "\n"))

    return alternative


def of_lesson(lesson: str) -> list:
    return [a for a in CATALOG if a.lesson == lesson]


def _load_lessons():
    import importlib
    import pkgutil

    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("lesson"):
            LESSON_MODULES.append(importlib.import_module(f"{__name__}.{info.name}"))


_load_lessons()

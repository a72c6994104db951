"""Every lesson's model answers, graded once through the real command, for the feedback pages of every lesson
(tests/browser/test_feedback_maths.py): one student, ``model``, hands in the completed notebook of each lesson, so
each lesson's page shows all its markdown and outputs; in lesson 01 she also displays a formula of her own
(IPython's ``Math``, a ``text/latex`` output).
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from autograder import course, grade
from autograder.course import answers
from autograder.course.notebooks import write_notebook
from run_once import once

STUDENT = "model"
MATH_LESSON = "01_warmup"
MATH_CELL = 'from IPython.display import Math, display\ndisplay(Math(r"\\frac{QK^\\top}{\\sqrt{d_k}}"))\n'


def _grade(base: Path) -> dict:
    root, out = base / "class", base / "out"
    lessons = course.lesson_names()
    for lesson in lessons:
        nb = answers.fill(lesson)
        if lesson == MATH_LESSON:
            nb.cells.append(nbformat.v4.new_code_cell(MATH_CELL, id="own-formula"))
        write_notebook(nb, root / STUDENT / f"{lesson}.ipynb")
    settings = grade.Settings(out=str(out), lessons=lessons, workers=2)
    outcome = grade.run(root, settings, progress=False, log=lambda *a: None)
    return {"out": str(out), "scores": {lesson: entry["score"] for row in outcome["rows"]
                                        for lesson, entry in row["lessons"].items()}}


def graded(tmp_path_factory) -> dict:
    result = once(tmp_path_factory, "lesson-pages", _grade)
    return {**result, "out": Path(result["out"])}


def pages(batch) -> dict:
    """lesson -> its feedback page."""
    return {lesson: batch["out"] / "feedback" / STUDENT / f"{lesson}.html" for lesson in course.lesson_names()}

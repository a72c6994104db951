"""Every lesson's real-grading submissions in one class, graded once per session through the real command.

Each lesson's grading module, ``tests/grading/test_grading_lessonNN.py``, declares its submissions in
``submissions()`` (``{name: notebook}``); the student ``model`` hands in every lesson's completed notebook, so each
lesson's feedback page shows all its markdown and outputs (``tests/browser/test_feedback_maths.py``); in lesson 01
she also displays a formula of her own (IPython's ``Math``, a ``text/latex`` output). One run grades them all, so
each lesson's canary and each model answer is graded once, not once per module: a submission that is the model's
notebook of its lesson is the model's, and the others are the students ``NN-name`` (the lesson's number, the
submission's name), each handing in that lesson alone. ``results`` gives a module what ``grading_helpers.grade``
would, each result naming its student (``"student"``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
from grading_helpers import grade_class
from run_once import once

from autograder import course
from autograder.course import answers

MODEL = "model"
MATH_LESSON = "01_warmup"
MATH_CELL = 'from IPython.display import Math, display\ndisplay(Math(r"\\frac{QK^\\top}{\\sqrt{d_k}}"))\n'
GRADING_MODULES = Path(__file__).resolve().parent.parent / "grading"


def model_notebook(lesson: str):
    nb = answers.fill(lesson)
    if lesson == MATH_LESSON:
        nb.cells.append(nbformat.v4.new_code_cell(MATH_CELL, id="own-formula"))
    return nb


def declared() -> dict:
    """{lesson: {name: notebook}}: the submissions each lesson's grading module declares (a module without
    ``submissions()`` grades its own)."""
    found = {}
    for path in sorted(GRADING_MODULES.glob("test_grading_lesson*.py")):
        spec = importlib.util.spec_from_file_location(f"_submissions_of_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if hasattr(module, "submissions"):
            found[module.LESSON] = module.submissions()
    return found


def _grade(base: Path) -> dict:
    handed_in = {MODEL: {lesson: model_notebook(lesson) for lesson in course.lesson_names()}}
    students = {}  # (lesson, name) -> the student who handed it in
    for lesson, submissions in declared().items():
        model = nbformat.writes(handed_in[MODEL][lesson])
        for name, nb in submissions.items():
            student = MODEL if nbformat.writes(nb) == model else f"{course.lesson_number(lesson)}-{name}"
            handed_in.setdefault(student, {})[lesson] = nb
            students[f"{lesson}/{name}"] = student
    graded = grade_class(base, handed_in)
    return {"out": str(base), "students": students, "graded": graded}


def graded(tmp_path_factory) -> dict:
    """The class, graded once per session: ``{"out": its folder, "students", "graded"}``."""
    result = once(tmp_path_factory, "lessons-class", _grade)
    return {**result, "out": Path(result["out"])}


def results(tmp_path_factory, lesson: str) -> dict:
    """{name: result} of the submissions ``lesson``'s module declares, as ``grading_helpers.grade`` gives them (the
    pairs as tuples), each with the student who handed it in (``"student"``)."""
    batch = graded(tmp_path_factory)
    found = {}
    for key, student in batch["students"].items():
        of, name = key.split("/", 1)
        if of == lesson:
            r = batch["graded"][student][lesson]
            found[name] = {**r, "student": student, "total": tuple(r["total"]),
                           "tests": {gid: tuple(pair) for gid, pair in r["tests"].items()}}
    return found


def course_root(tmp_path_factory) -> Path:
    """The class's grading course (its gradebook: ``gradebook.db``)."""
    return graded(tmp_path_factory)["out"] / "course"


def pages(batch) -> dict:
    """lesson -> the model's feedback page."""
    return {lesson: batch["out"] / "feedback" / MODEL / f"{lesson}.html" for lesson in course.lesson_names()}

"""Answer the student notebook: untouched, completed with the model answers, or with one
function replaced by a learner's (possibly wrong) code. Used by the tests, the mutation harness and the
benchmarks, so every claim about grading is made on real notebooks.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import nbformat

from autograder import course
from autograder.course import notebooks

_SOLUTION = re.compile(r"[ \t]*### BEGIN SOLUTION\n(.*?)[ \t]*### END SOLUTION\n?", re.S)


def model_answers(lesson: str) -> dict:
    """grade_id -> the full source of that solution cell with the solution markers removed."""
    nb = notebooks.read_source(course.SOLUTIONS / f"{lesson}.py")
    answers = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            answers[meta["grade_id"]] = _SOLUTION.sub(lambda m: m.group(1), cell.source)
    return answers


def student_notebook(lesson: str, lessons_dir=None) -> nbformat.NotebookNode:
    lessons_dir = Path(lessons_dir or course.LESSONS)
    return nbformat.read(lessons_dir / f"{lesson}.ipynb", as_version=4)


def fill(lesson: str, replacements=None, *, complete=True, lessons_dir=None) -> nbformat.NotebookNode:
    """The student notebook with its answer cells filled.

    ``complete``: every answer cell gets the model answer. ``replacements`` maps a grade_id (or a function
    name defined in an answer cell) to the source that replaces that whole cell.
    """
    nb = student_notebook(lesson, lessons_dir)
    model = model_answers(lesson)  # read once: parsing the lesson source is most of this function's time
    answers = model if complete else {}
    replacements = dict(replacements or {})
    by_function = {}
    for gid, src in model.items():
        for name in re.findall(r"^def (\w+)\(", src, re.M):
            by_function[name] = gid
    for key in list(replacements):
        if key in by_function:
            replacements[by_function[key]] = replacements.pop(key)
    unknown = set(replacements) - set(model)
    if unknown:
        raise KeyError(f"{lesson} has no answer cell or function {sorted(unknown)}")
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in replacements:
            cell.source = textwrap.dedent(replacements[gid]).strip() + "\n"
        elif gid in answers:
            cell.source = answers[gid]
    return nb


def write_submission(course_root, student: str, lesson: str, nb) -> Path:
    """Place ``nb`` where ``nbgrader autograde`` looks for it: submitted/<student>/<lesson>/<lesson>.ipynb."""
    path = Path(course_root) / "submitted" / student / lesson / f"{lesson}.ipynb"
    notebooks.write_notebook(nb, path)
    return path

"""Run ``nbgrader autograde`` / ``generate_feedback`` on a course folder and read the results back."""

from __future__ import annotations

import html
import re
from pathlib import Path

from nbgrader.api import Gradebook

from autograder import course


def db_url(course_root) -> str:
    return f"sqlite:///{Path(course_root) / 'gradebook.db'}"


def autograde(course_root, lesson: str, students=None, *, extra_args=()):
    """``nbgrader autograde`` for one lesson (all submitted students, or those given)."""
    args = ["autograde", lesson, "--force", "--log-level=WARN", *extra_args]
    for s in students or ():
        args.append(f"--student={s}")
    return course.nbgrader(args, course_root)


def generate_feedback(course_root, lesson: str):
    return course.nbgrader(["generate_feedback", lesson, "--force", "--log-level=WARN"], course_root)


def test_scores(course_root, lesson: str, student: str) -> dict:
    """grade_id -> (score, max_score) of every autograded cell of one submission, from the gradebook."""
    with Gradebook(db_url(course_root)) as gb:
        nb = gb.find_submission_notebook(lesson, lesson, student)
        return {g.name: (float(g.score), float(g.max_score)) for g in nb.grades if g.auto_score is not None
                or g.cell_type == "code"}


def total(course_root, lesson: str, student: str) -> tuple:
    """(score, max_score) of one submission."""
    with Gradebook(db_url(course_root)) as gb:
        sub = gb.find_submission(lesson, student)
        return float(sub.score), float(sub.max_score)


def feedback_text(course_root, lesson: str, student: str) -> str:
    """The plain text of the feedback page a learner receives."""
    path = Path(course_root) / "feedback" / student / lesson / f"{lesson}.html"
    raw = path.read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def cell_errors(course_root, lesson: str, student: str) -> dict:
    """grade_id -> the error text of that cell in the autograded notebook (only cells that failed)."""
    import nbformat

    nb = nbformat.read(Path(course_root) / "autograded" / student / lesson / f"{lesson}.ipynb", as_version=4)
    errors = {}
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                errors[gid] = f"{out.get('ename')}: {out.get('evalue')}"
    return errors

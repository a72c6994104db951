"""The written answers' model answers and marking rubrics, for learners who study without an instructor.

``docs/written-answers.md`` is generated from the manually graded cells of the lesson sources (each question and
the model answer and rubric of its answer cell) by ``make lessons`` and checked for drift by
``python -m autograder.publish.build --check``. It lives outside ``lessons/``, so it is never released with the graded
notebooks.
"""

from __future__ import annotations

from pathlib import Path

from autograder import course
from autograder.course import notebooks

TARGET = course.ROOT / "docs" / "written-answers.md"


def written_answers(lesson: str) -> list:
    """[(grade_id, points, question, model answer and rubric)] of every manually graded cell of one lesson."""
    cells = notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells
    found = []
    for i, cell in enumerate(cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "markdown" and meta.get("solution") and meta.get("grade"):
            question = cells[i - 1].source.strip() if i and cells[i - 1].cell_type == "markdown" else ""
            answer = cell.source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0].strip()
            found.append((meta["grade_id"], meta["points"], question, answer))
    return found


def render() -> str:
    lines = ["<!-- Generated from solutions/NN_*.py by `make lessons` (python -m autograder.publish.build); do not edit. -->",
             "# Written answers: model answers and rubrics",
             "",
             "For learners who study on their own. Write your answer in the notebook first, then compare it with the",
             "model answer and mark it with the rubric, as an instructor would. This page is not part of `lessons/`,",
             "the folder instructors release, so it never reaches a graded class with the notebooks.",
             ""]
    for lesson in course.lesson_names():
        for grade_id, points, question, answer in written_answers(lesson):
            lines += [f"## Lesson {course.lesson_number(lesson)}, `{grade_id}` ({points} points)", "",
                      "*The question, as the lesson asks it:*", "",
                      *(f"> {line}".rstrip() for line in question.splitlines()), "", answer, ""]
    return "\n".join(lines)


def write(target: Path | None = None) -> Path:
    target = target or TARGET
    target.write_text(render(), encoding="utf-8")
    return target


def drift(target: Path | None = None) -> bool:
    """Whether the answer key differs from what the lesson sources give."""
    target = target or TARGET
    return not target.exists() or target.read_text(encoding="utf-8") != render()

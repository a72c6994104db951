"""Grade real notebooks through the grading command (``autograder.grade.run``, the pipeline ``make grade`` uses)
and read the results back from its gradebook."""

import nbformat

from autograder import grade as grading_command
from autograder.course.notebooks import write_notebook
from autograder.grading.reports import results as read_back


def grade(tmp_path, lesson, notebooks: dict, feedback=True, **settings):
    """Grade ``{student: notebook}`` for ``lesson`` in a fresh workspace under ``tmp_path``.

    Returns ``{student: {"total": (score, max), "tests": {grade_id: (score, max)}, "feedback": text, "errors",
    "flags"}}``.
    """
    graded = grade_class(tmp_path, {student: {lesson: nb} for student, nb in notebooks.items()}, feedback, **settings)
    return {student: graded[student][lesson] for student in notebooks}


def grade_class(tmp_path, handed_in: dict, feedback=True, **settings):
    """Grade ``{student: {lesson: notebook}}`` in one run of the command, every lesson any student handed in, in a
    fresh workspace under ``tmp_path``; returns ``{student: {lesson: result}}``, each result as ``grade`` gives it."""
    klass = tmp_path / "class"
    for student, notebooks in handed_in.items():
        for lesson, nb in notebooks.items():
            write_notebook(nb, klass / student / f"{lesson}.ipynb")
    lessons = sorted({lesson for notebooks in handed_in.values() for lesson in notebooks})
    s = grading_command.Settings(out=str(tmp_path), lessons=lessons, **{"workers": 2, **settings})  # tmp_path/course
    outcome = grading_command.run(klass, s, progress=False, log=lambda *a: None)
    flags = {row["student"]: row["flags"] for row in outcome["rows"]}

    def lesson_flags(student, lesson):  # the student's flags, but those of the other lessons
        others = tuple(f"{other}: " for other in lessons if other != lesson)
        return " | ".join(f for f in flags.get(student, []) if not f.startswith(others))

    return {student: {lesson: {
        "total": read_back.submission_total(s, lesson, student),
        "tests": read_back.cell_scores(s, lesson, student),
        "feedback": read_back.feedback_text(s, lesson, student) if feedback else "",
        "errors": cell_errors(s, lesson, student),
        "flags": lesson_flags(student, lesson),
    } for lesson in notebooks} for student, notebooks in handed_in.items()}


def lost(result) -> set:
    """grade_ids of the tests that did not get full points."""
    return {gid for gid, (score, mx) in result["tests"].items() if score < mx}


def cell_errors(s, lesson: str, student: str) -> dict:
    """grade_id -> the error of that cell in the graded notebook, for the cells that failed."""
    nb = nbformat.read(s.course_root / "autograded" / student / lesson / f"{lesson}.ipynb", as_version=4)
    return {cell.metadata.get("nbgrader", {}).get("grade_id"): f"{out.get('ename')}: {out.get('evalue')}"
            for cell in nb.cells for out in cell.get("outputs", []) if out.get("output_type") == "error"}


def with_cell(nb, after_grade_id, source):
    """Insert a learner's own code cell (no nbgrader metadata) after the cell ``after_grade_id``."""
    index = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == after_grade_id)
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source))
    for i, cell in enumerate(nb.cells):
        cell["id"] = cell.get("id") or f"extra-{i}"
    return nb

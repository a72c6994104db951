"""Grade real notebooks through the grading command (``autograder.grade.run``, the pipeline ``make grade`` uses)
and read the results back from its gradebook."""

from autograder import course, grade as grading_command, gradebook


def grade(tmp_path, lesson, notebooks: dict, feedback=True, **settings):
    """Grade ``{student: notebook}`` for ``lesson`` in a fresh workspace under ``tmp_path``.

    Returns ``{student: {"total": (score, max), "tests": {grade_id: (score, max)}, "feedback": text, "errors",
    "flags"}}``.
    """
    klass = tmp_path / "class"
    for student, nb in notebooks.items():
        course.write_notebook(nb, klass / student / f"{lesson}.ipynb")
    s = grading_command.Settings(out=str(tmp_path), lessons=[lesson], **{"workers": 2, **settings})  # course: tmp_path/course
    outcome = grading_command.run(klass, s, progress=False, log=lambda *a: None)
    flags = {row["student"]: " | ".join(row["flags"]) for row in outcome["rows"]}
    root = s.course_root
    results = {}
    for student in notebooks:
        results[student] = {
            "total": gradebook.total(root, lesson, student),
            "tests": gradebook.test_scores(root, lesson, student),
            "feedback": gradebook.feedback_text(root, lesson, student) if feedback else "",
            "errors": gradebook.cell_errors(root, lesson, student),
            "flags": flags.get(student, ""),
        }
    return results


def lost(result) -> set:
    """grade_ids of the tests that did not get full points."""
    return {gid for gid, (score, mx) in result["tests"].items() if score < mx}

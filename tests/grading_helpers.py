"""Grade real notebooks through the real nbgrader path and read the results back from the gradebook."""

from autograder import course, gradebook, submissions


def grade(tmp_path, lesson, notebooks: dict, feedback=True):
    """Create a course with ``lesson``, submit ``{student: notebook}``, autograde, generate feedback.

    Returns ``{student: {"total": (score, max), "tests": {grade_id: (score, max)}, "feedback": text}}``.
    """
    root = course.make_course(tmp_path / "course", [lesson])
    for student, nb in notebooks.items():
        submissions.write_submission(root, student, lesson, nb)
    gradebook.autograde(root, lesson)
    if feedback:
        gradebook.generate_feedback(root, lesson)
    results = {}
    for student in notebooks:
        results[student] = {
            "total": gradebook.total(root, lesson, student),
            "tests": gradebook.test_scores(root, lesson, student),
            "feedback": gradebook.feedback_text(root, lesson, student) if feedback else "",
            "errors": gradebook.cell_errors(root, lesson, student),
        }
    return results


def lost(result) -> set:
    """grade_ids of the tests that did not get full points."""
    return {gid for gid, (score, mx) in result["tests"].items() if score < mx}

"""What each graded notebook's tests say about the learner, recorded with its state for the instructor's insights.

``grade_one`` (``autograder/grading/worker.py``) calls ``record`` right after ``nbgrader autograde`` and keeps the
result in the (student, lesson) state record, so ``autograder/grading/insights.py`` rebuilds every figure from the
state alone, after every run, without re-running anything:

* ``items``: per autograded cell (a hidden test), its score and maximum from the gradebook and how it ended:
  ``passed``, ``bug`` (with the catalogued bug's id), ``unnamed`` (a wrong result no catalogued bug explains),
  ``unanswered`` (the function is still the stub), ``interfered`` or ``not run``. The bug is what the hidden test
  decided in the grader (``execute.hidden_outcomes``), never anything the notebook printed;
* ``attempted``: whether any answer cell differs from the released notebook ("not attempted" is the untouched
  notebook, kept apart from "attempted, wrong").
"""

from __future__ import annotations

# how a test ended (``hidden_tests.Session.outcome`` gives all but NOT_RUN for a cell whose test never started)
PASSED, BUG, UNNAMED, UNANSWERED, INTERFERED, NOT_RUN = (
    "passed", "bug", "unnamed", "unanswered", "interfered", "not run")


def _answers(nb) -> dict:
    return {c.metadata["nbgrader"]["grade_id"]: c.source.strip() for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution") and c.metadata["nbgrader"].get("grade_id")}


def attempted(nb, released) -> bool:
    """Whether the learner changed any answer cell of the released notebook."""
    theirs, stubs = _answers(nb), _answers(released)
    return any(theirs.get(gid, source) != source for gid, source in stubs.items())


def record(gb, lesson: str, student: str, nb, released, outcomes: dict) -> dict:
    """{"items": {grade_id: {score, max, result, bug}}, "attempted": bool} of one graded notebook."""
    submission = gb.find_submission_notebook(lesson, lesson, student)
    found = {}
    for grade in sorted(submission.grades, key=lambda g: g.name):
        if grade.auto_score is None or not grade.max_score:  # a written answer, or the zero-point setup cell
            continue
        score, maximum = float(grade.auto_score), float(grade.max_score or 0.0)
        said = outcomes.get(grade.name) or {}
        result = PASSED if score >= maximum else said.get("result") or NOT_RUN  # the gradebook's score decides
        if result == PASSED and score < maximum:  # the test passed but the learner's cell failed around it
            result = UNNAMED
        found[grade.name] = {"score": score, "max": maximum, "result": result,
                             "bug": said.get("bug") if result == BUG else None}
    return {"items": found, "attempted": attempted(nb, released)}

"""Manual grading end to end: lesson 05's written answers pending, graded through nbgrader's API, folded in.

One batch: alice and bob submit lesson 05 with the model answers. Run 1: both await the instructor. Then manual
scores and a comment are set for alice (as formgrader does) and run 2 folds them in and regenerates only her
feedback. Then alice resubmits with one written answer changed: run 3 keeps the manual scores of the unchanged
answers and counts the changed one as pending again.
"""

from __future__ import annotations

import csv
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from run_once import once

from autograder import course
from autograder.course import answers, notebooks
from autograder.grading.settings import COURSE_ID

LESSON = "05_exercises"
# The scores the instructor gives alice: full marks but one point short on explain_w_o (2 points).
MANUAL = {"explain_reshape": 3.0, "explain_w_o": 1.0, "explain_scale": 2.0, "symptom_masked_attention": 1.0,
          "symptom_attention_layer": 1.0}


def _points():
    """(autograded points, manually graded points) of the lesson, read from its source."""
    cells = [c.metadata.get("nbgrader", {}) for c in notebooks.read_source(course.SOLUTIONS / f"{LESSON}.py").cells]
    manual = {m["grade_id"]: m["points"] for m in cells if m.get("grade") and m.get("solution")}
    auto = sum(m["points"] for m in cells if m.get("grade") and not m.get("solution"))
    return auto, manual


AUTO, MANUAL_MAX = _points()
COMMENT = "Say what kind of map W_O is: a learned linear map."
pytestmark = pytest.mark.grading


def _cli(root, out):
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(root), "--out", str(out), "--lessons",
                           LESSON, "--timeout", "60", "--workers", "2", "--quiet"], cwd=course.ROOT,
                          env=notebooks.nbgrader_env(), capture_output=True, text=True, timeout=900)
    with (Path(out) / "grades.csv").open(newline="") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    feedback = {s: (Path(out) / "feedback" / s / f"{LESSON}.html").read_text() for s in rows}
    return {"rc": proc.returncode, "stdout": proc.stdout + proc.stderr, "rows": rows, "feedback": feedback,
            "report": (Path(out) / "report.html").read_text()}


def _batch(base: Path) -> dict:
    from nbgrader.api import Gradebook

    root, out = base / "class", base / "out"
    for student in ("alice", "bob"):
        notebooks.write_notebook(answers.fill(LESSON), root / student / f"{LESSON}.ipynb")
    runs = {"first": _cli(root, out)}
    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}", COURSE_ID) as gb:
        for cell, points in MANUAL.items():  # what formgrader's grade handler does
            found = gb.find_grade(cell, LESSON, LESSON, "alice")
            found.manual_score, found.needs_manual_grade = points, False
        gb.find_comment("explain_w_o", LESSON, LESSON, "alice").manual_comment = COMMENT
        gb.db.commit()
    runs["manual"] = _cli(root, out)
    changed = answers.fill(LESSON, {"explain_w_o": "W_O mixes the heads; it is an average of them."})
    notebooks.write_notebook(changed, root / "alice" / f"{LESSON}.ipynb")
    runs["resubmitted"] = _cli(root, out)
    return runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return once(tmp_path_factory, "manual-grading", _batch)


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def test_written_answers_await_the_instructor_instead_of_scoring_zero(runs):
    first = runs["first"]
    assert first["rc"] == 0, first["stdout"][-3000:]
    for student in ("alice", "bob"):
        row = first["rows"][student]
        assert (row[f"{LESSON} status"], row[f"{LESSON} score"], row[f"{LESSON} max"],
                row[f"{LESSON} pending"]) == ("pending manual", f"{AUTO}", f"{AUTO + sum(MANUAL_MAX.values())}",
                                              f"{sum(MANUAL_MAX.values())}")
        assert row["percent"] == ""  # no final-looking percentage while points are pending
    assert "awaiting the instructor" in first["report"] and "make formgrader" in first["report"]


def test_the_next_run_folds_in_manual_scores_and_regenerates_only_changed_feedback(runs):
    first, manual = runs["first"], runs["manual"]
    assert manual["rc"] == 0 and "graded 0 notebooks" in manual["stdout"]
    assert "feedback regenerated for 1 notebooks" in manual["stdout"]
    alice = manual["rows"]["alice"]
    given, top = sum(MANUAL.values()), AUTO + sum(MANUAL_MAX.values())
    assert set(MANUAL) == set(MANUAL_MAX) and given == sum(MANUAL_MAX.values()) - 1
    assert (alice[f"{LESSON} status"], alice[f"{LESSON} score"], alice[f"{LESSON} autograded"],
            alice[f"{LESSON} manual"], alice[f"{LESSON} pending"], alice["total"]) == \
        ("graded", f"{AUTO + given:g}", f"{AUTO}", f"{given:g}", "0", f"{AUTO + given:g}")
    assert f"{AUTO + given:g} / {top} ({AUTO} autograded + {given:g} manual)" in manual["report"]
    assert COMMENT in manual["feedback"]["alice"] and COMMENT not in first["feedback"]["alice"]
    page_total = f"{AUTO + given:.1f} / {top:.1f}"
    assert page_total in manual["feedback"]["alice"] and page_total not in first["feedback"]["alice"]
    assert _digest(manual["feedback"]["bob"]) == _digest(first["feedback"]["bob"])  # bob's grades did not change
    assert manual["rows"]["bob"][f"{LESSON} pending"] == f"{sum(MANUAL_MAX.values())}"


def test_a_resubmission_keeps_unchanged_manual_grades_and_reopens_changed_answers(runs):
    again = runs["resubmitted"]
    assert again["rc"] == 0 and "graded 1 notebooks" in again["stdout"]
    alice = again["rows"]["alice"]
    # every other written answer unchanged: kept; explain_w_o changed: its points await regrading
    kept = sum(MANUAL.values()) - MANUAL["explain_w_o"]
    assert (alice[f"{LESSON} score"], alice[f"{LESSON} manual"], alice[f"{LESSON} pending"],
            alice[f"{LESSON} status"]) == (f"{AUTO + kept:g}", f"{kept:g}", f"{MANUAL_MAX['explain_w_o']}",
                                           "pending manual")
    assert "resubmitted after manual grading: written answers need regrading (explain_w_o)" in alice["flags"]
    assert "resubmitted after manual grading" in again["report"]

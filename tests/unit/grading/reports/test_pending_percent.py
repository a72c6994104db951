"""One rule for the percent in every output: none while any point awaits the instructor (``results.percent``), in
grades.csv, report.html and the printed distribution; the report says why, and a lesson not handed in yet is shown
as such, not as a score."""

from __future__ import annotations

import csv

from autograder.grading.records.settings import Settings
from autograder.grading.reports import report, results

LESSON = "05_exercises"


def _row(student, score, maximum, pending, status="graded"):
    cell = {"status": status, "score": score, "max": maximum, "auto": score, "manual": None, "pending": pending,
            "reason": "", "lms_id": "", "late": False, "submitted": ""}
    return {"student": student, "folder": student, "lms_id": "", "lessons": {LESSON: cell}, "flags": [],
            "total": score, "max_total": maximum, "pending": pending}


ROWS = [_row("marked", 40.0, 54.0, 0.0), _row("waiting", 43.0, 54.0, 11.0, "pending manual"),
        _row("unknown", None, 54.0, 0.0, "grading error")]


def test_no_percent_while_points_are_pending_and_none_of_marked_points_only():
    assert results.percent(ROWS[0]) == 100 * 40 / 54
    assert results.percent(ROWS[1]) is None  # not 43 / 43 = 100 %, not 43 / 54 either
    assert results.percent(ROWS[2]) is None


def test_grades_csv_the_report_and_the_distribution_agree(tmp_path):
    s = Settings(out=str(tmp_path), lessons=[LESSON])
    with report.write_csv(s, ROWS).open(newline="", encoding="utf-8") as fh:
        got = {r["student"]: r["percent"] for r in csv.DictReader(fh)}
    assert got == {"marked": "74.1", "waiting": "", "unknown": ""}
    page = report.write_report(s, ROWS, []).read_text(encoding="utf-8")
    assert "40 / 54 (74%)" in page
    assert "43 / 54<br>11 awaiting the instructor; percent when every answer is marked" in page
    assert "(100%)" not in page and "(80%)" not in page
    lines = report.distribution(ROWS)
    assert lines[-1].endswith("3 students, 0 flagged, 1 left out (a grading error or a lesson not graded yet), "
                              "1 left out until their written answers are marked")
    assert sum(int(line.split()[-1]) for line in lines if "%" in line and "|" in line) == 1


def test_a_lesson_not_handed_in_is_shown_as_such():
    assert report._cell_text({**ROWS[0]["lessons"][LESSON], "status": "not handed in", "score": None}) == \
        "not handed in"


def test_a_class_whose_every_student_awaits_marks_has_no_distribution_but_says_why():
    waiting = [_row("a", 43.0, 54.0, 11.0, "pending manual"), _row("b", 30.0, 54.0, 2.0, "pending manual"),
               _row("c", None, 54.0, 9.0, "grading error")]
    assert [results.percent(r) for r in waiting] == [None, None, None]
    assert report.distribution(waiting) == [
        "no student has a complete score (2 with written answers awaiting the instructor)"]
    assert report.distribution([]) == ["no students"]

"""Reading the grades back: one row per student, from intake, the state records and the gradebook.

A row holds, per lesson of the term (``autograder/grading/run/term.py``), its status
(``autograder/grading/records/outcome.py``), score, maximum, autograded, manual and pending points, the reason of a
grading error and what the LMS said of the file handed in (``handed_in``), then the student's total (None when any
lesson's score is unknown: a grading error leaves its score empty, never 0), maximum, pending points and flags. A lesson
the student has not handed in yet (and that is not closed) counts in neither the total nor its maximum. ``report``
writes the rows out.
"""

from __future__ import annotations

from autograder.grading.intake import class_roster, lms_layouts
from autograder.grading.records import gradebook, marks, outcome, state
from autograder.grading.records.settings import Settings


def lesson_maxima(s: Settings) -> dict:

    with gradebook.opened(s) as gb:
        return {lesson: float(gb.find_assignment(lesson).max_score) for lesson in s.lessons}


def _lesson_result(grades: dict, s: Settings, roster: class_roster.Roster, student: str, lesson: str,
                   maximum: float):
    """(one lesson's marks and status, flags) of one student, from intake, the state record and the gradebook
    (``grades``: the lesson's, ``marks.lesson_grades``)."""
    entry = roster.entries[student][lesson]
    cell = {"status": outcome.NOT_YET, "score": None, "max": maximum, "auto": None, "manual": None, "pending": 0.0,
            "reason": "", **handed_in(s, entry)}
    flags = []
    if entry.status == outcome.NOT_HANDED_IN:  # no score yet, never 0, until the lesson is closed
        cell.update(status=outcome.NOT_HANDED_IN)
        return cell, [f"{lesson}: not handed in yet (counts nowhere until the lesson is closed)"]
    if entry.late:
        flags.append(f"{lesson}: handed in late" + (f" ({entry.submitted})" if entry.submitted else ""))
    if entry.status != "ok":
        flags.append(f"{lesson}: {entry.status}: {entry.note}")
    if entry.status == outcome.GRADING_ERROR:  # the term's copy is gone (``term.roster``): never a score
        cell.update(status=outcome.GRADING_ERROR, reason=entry.note)
        return cell, [f"{lesson}: grading error (not the learner's; score left empty): {entry.note}"]
    if not entry.gradable:  # the learner's: no notebook, or not a notebook
        cell.update(status=entry.status, score=0.0, auto=0.0)
        return cell, flags
    record = state.read(s, student, lesson)
    if record is None:
        flags.append(f"{lesson}: not graded yet (run the command again)")
        return cell, flags
    flags += [f"{lesson}: {flag}" for flag in record.flags]
    if not record.graded:
        reason = record.reason or "; ".join(record.flags[:1]) or "unknown"
        cell.update(status=outcome.GRADING_ERROR, reason=reason)
        flags.insert(0, f"{lesson}: grading error (not the learner's; score left empty, retried next run): {reason}")
        return cell, flags
    if record.attempted is False:
        flags.append(f"{lesson}: not attempted: every answer is as it was handed out")
    if student not in grades:
        cell.update(status=outcome.GRADING_ERROR, reason="missing from the gradebook")
        flags.insert(0, f"{lesson}: grading error: missing from the gradebook")
        return cell, flags
    got = marks.tally(grades[student])
    cell.update(score=got["score"], auto=got["auto"], manual=got["manual"] if got["manual_cells"] else None,
                pending=got["pending"], status=outcome.PENDING if got["pending"] else outcome.GRADED)
    flags += [f"{lesson}: marks back to pending: {line}"
              for line in marks.reopened_lines(marks.still_pending(record.reopened, got))]
    if got["pending"]:
        flags.append(f"{lesson}: {fmt(got['pending'])} points of written answers awaiting the instructor "
                     f"({', '.join(got['pending_cells'])}; grade them in formgrader, then run again)")
    return cell, flags


def handed_in(s: Settings, entry: class_roster.Entry) -> dict:
    """What a lesson's cell says of the file handed in: ``lms_id``, the student's id in the LMS download it came
    from (Moodle's participant id of that assignment, Canvas's user id; '' if none), ``late`` (the LMS marks it late,
    or its time is after the lesson's ``--due``) and ``submitted`` (the LMS's time of it, ISO 8601, or '')."""
    late = entry.late or lms_layouts.after_due(entry.submitted, s.due.get(entry.lesson, ""))
    return {"lms_id": entry.lms_id, "late": late, "submitted": entry.submitted}


def read_rows(s: Settings, roster: class_roster.Roster) -> list:
    """One row per student: marks read back from the gradebook (each lesson's in one query), status and flags from
    intake and the state."""

    maxima = lesson_maxima(s)
    rows = []
    with gradebook.opened(s) as gb:
        grades = {lesson: marks.lesson_grades(gb, lesson) for lesson in s.lessons}
        for student in roster.students:
            row = {"student": student, "folder": roster.folders.get(student, student),
                   "lms_id": roster.lms_ids.get(student, ""), "lessons": {},
                   "flags": list(roster.flags.get(student, []))}
            for lesson in s.lessons:
                row["lessons"][lesson], flags = _lesson_result(grades[lesson], s, roster, student, lesson,
                                                               maxima[lesson])
                row["flags"] += flags
            counted = [c for c in row["lessons"].values() if c["status"] != outcome.NOT_HANDED_IN]
            scores = [c["score"] for c in counted]
            row["total"] = None if None in scores else sum(scores)
            row["max_total"] = sum(c["max"] for c in counted)  # a lesson not handed in yet counts nowhere
            row["pending"] = sum(c["pending"] for c in counted)
            rows.append(row)
    return rows


def grading_errors(rows: list) -> list:
    """(student, lesson, reason) of every grading error."""
    return [(r["student"], lesson, c["reason"]) for r in rows for lesson, c in r["lessons"].items()
            if c["status"] == outcome.GRADING_ERROR]


def fmt(x) -> str:
    """Points as every output writes them: no trailing zeros, and nothing for an unknown score."""
    return "" if x is None else f"{x:g}"


def percent(row: dict):
    """The student's total as a percent of the maximum of the lessons counted, the one rule of every output: None
    while any point awaits the instructor (a percent of the marked points would look final, and read as 100 % with
    a written answer unmarked), or when a score is unknown."""
    if row["total"] is None or row["pending"] or row["max_total"] <= 0:
        return None
    return 100 * row["total"] / row["max_total"]


# ------------------------------------------------------------ one submission in detail (the mutation harness, tests)

def cell_scores(s: Settings, lesson: str, student: str) -> dict:
    """grade_id -> (score, max_score) of every autograded cell of one submission, from the gradebook."""

    with gradebook.opened(s) as gb:
        nb = gb.find_submission_notebook(lesson, lesson, student)
        return {g.name: (float(g.score), float(g.max_score)) for g in nb.grades
                if g.auto_score is not None or g.cell_type == "code"}


def submission_total(s: Settings, lesson: str, student: str) -> tuple:
    """(score, max_score) of one submission."""

    with gradebook.opened(s) as gb:
        sub = gb.find_submission(lesson, student)
        return float(sub.score), float(sub.max_score)


def feedback_text(s: Settings, lesson: str, student: str) -> str:
    """The plain text of the feedback page the learner receives."""
    import html
    import re

    raw = (s.course_root / "feedback" / student / lesson / f"{lesson}.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


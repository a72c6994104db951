"""The instructor's marks: one submission's points read from nbgrader's gradebook, and every mark kept across regrades.

nbgrader keeps a ``Grade`` per graded cell: ``auto_score`` (tests; ``None`` for a written answer), ``manual_score``
(set in formgrader), ``extra_credit``, ``needs_manual_grade``; and a ``Comment`` per answer cell (``manual_comment``).
A cell that needs a manual grade counts as *pending*: its points are shown as awaiting the instructor, not as 0,
and no percent is given while any is pending (``results.percent``).

**A mark is never lost.** Before a notebook is graded again (a resubmission, or a rebuild after the hidden checks or
the settings changed) its marks are taken (``before_regrade``): every manual score, extra credit and comment, with
the hash of the written answer the score was given for (``answer_hash``: the answer cell's source as submitted,
with line endings, trailing spaces and Unicode forms normalised). After nbgrader graded it (in the same gradebook,
or in a new one), ``carry`` puts every mark back: a score whose answer is unchanged counts again; any other goes
back to *pending*, its score kept in the gradebook, and ``reopened`` says why (the answer's text changed, the
answer cell is gone, an autograded test scored by hand was graded again). Until the regrade is done the marks wait
in a file of their own (``state.write_carried``), so a run killed halfway loses none either.

Each read goes to the database directly: a submission's marks in one query, its fingerprint in two, and every
submission of a lesson at once (``lesson_grades``, ``lesson_comments``, ``lesson_fingerprints``) in as many, where
nbgrader's objects cost a query per grade (docs/speed.md).
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections import namedtuple
from typing import Any

from autograder.grading.records import gradebook, outcome, state
from autograder.grading.records.settings import Settings

TEXT_CHANGED = "its text changed since you marked it"
CELL_GONE = "the answer cell is no longer in the notebook"
NOT_IN_LESSON = "the cell is no longer in the lesson"
TEST_REGRADED = "an autograded test you scored by hand was graded again"
ANSWER_UNKNOWN = "the answer you marked is not on record"
OTHER_HAND_IN = "someone other than the one whose hand-in you marked handed this notebook in"


class MarksUnreadable(RuntimeError):
    """The marks of the gradebook a rebuild replaces could not be read: nothing was changed."""


def _score(x) -> float:
    return float(x or 0.0)


def marks(gb, lesson: str, student: str) -> dict:
    """{score, max, auto, manual, pending, pending_cells} of one submission (score leaves pending cells out), in one
    query; nbgrader's ``MissingEntry`` when the gradebook has no such submission."""
    return tally(_submission(lesson_grades(gb, lesson, student), lesson, student))


def tally(grades) -> dict:
    """``marks`` of one submission's ``grades`` (nbgrader's ``Grade``, or ``lesson_grades``')."""
    out: dict[str, Any] = {"auto": 0.0, "manual": 0.0, "pending": 0.0, "max": 0.0, "pending_cells": [],
                           "manual_cells": []}
    for grade in sorted(grades, key=lambda g: g.name):
        out["max"] += _score(grade.max_score)
        if grade.auto_score is None or grade.manual_score is not None:
            out["manual_cells"].append(grade.name)
        if grade.needs_manual_grade:
            out["pending"] += _score(grade.max_score)
            out["pending_cells"].append(grade.name)
        elif grade.manual_score is not None:
            out["manual"] += _score(grade.score)
        else:
            out["auto"] += _score(grade.score)
    out["score"] = out["auto"] + out["manual"]
    return out


def fingerprint(gb, lesson: str, student: str) -> str:
    """Changes whenever anything a feedback page shows from the gradebook changes (scores, comments); two queries,
    nbgrader's ``MissingEntry`` when the gradebook has no such submission."""
    grades = _submission(lesson_grades(gb, lesson, student), lesson, student)
    return fingerprint_of(grades, lesson_comments(gb, lesson, student).get(student, []))


def _submission(found: dict, lesson: str, student: str) -> list:
    from nbgrader.api import MissingEntry

    if student not in found:
        raise MissingEntry(f"No such submitted notebook: {lesson}/{lesson} for {student}")
    return found[student]


def fingerprint_of(grades, comments) -> str:
    """``fingerprint`` of one submission's ``grades`` and ``comments`` (nbgrader's, or ``lesson_grades``' and
    ``lesson_comments``')."""
    graded = sorted((g.name, g.auto_score, g.manual_score, g.extra_credit, bool(g.needs_manual_grade)) for g in grades)
    said = sorted((c.name, c.auto_comment, c.manual_comment) for c in comments)
    return hashlib.sha256(json.dumps([graded, said], default=str).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------- every submission of a lesson at once
# nbgrader's objects read a submission's grades and comments each in a query of its own, and each grade's maximum and
# score in another (deferred columns): reading a class back that way costs tens of thousands of queries, about 3 ms a
# submission. These read one submission, or a whole lesson, in one query.

Grade = namedtuple("Grade", "name auto_score manual_score extra_credit needs_manual_grade max_score score")
Comment = namedtuple("Comment", "name auto_comment manual_comment")


def _lesson_query(lesson: str, student: str | None, *columns):
    """The rows of ``columns`` over every submitted notebook of ``lesson`` (the notebook of the lesson's name, as
    ``Gradebook.find_submission_notebook`` finds it: by names alone), or ``student``'s alone, each with its student
    id first."""
    from nbgrader.api import Assignment, Notebook, SubmittedAssignment, SubmittedNotebook
    from sqlalchemy import select

    query = (select(SubmittedAssignment.student_id, *columns).select_from(SubmittedNotebook)
             .join(Notebook, Notebook.id == SubmittedNotebook.notebook_id)
             .join(SubmittedAssignment, SubmittedAssignment.id == SubmittedNotebook.assignment_id)
             .join(Assignment, Assignment.id == SubmittedAssignment.assignment_id)
             .where(Notebook.name == lesson, Assignment.name == lesson))
    return query if student is None else query.where(SubmittedAssignment.student_id == student)


def lesson_grades(gb, lesson: str, student: str | None = None) -> dict:
    """{student: [``Grade``]} of every submission of ``lesson`` in the gradebook ``gb``, or of ``student``'s alone (a
    submission without a grade: []), with the values nbgrader's ``Grade`` gives (``score``, ``max_score``
    included), in one query."""
    from nbgrader.api import BaseCell
    from nbgrader.api import Grade as Graded
    from nbgrader.api import SubmittedNotebook

    query = (_lesson_query(lesson, student, Graded.id, BaseCell.name, Graded.auto_score, Graded.manual_score,
                           Graded.extra_credit, Graded.needs_manual_grade, Graded.max_score, Graded.score)
             .outerjoin(Graded, Graded.notebook_id == SubmittedNotebook.id)
             .outerjoin(BaseCell, BaseCell.id == Graded.cell_id))
    found: dict = {}
    for who, grade_id, *values in gb.db.execute(query):
        grades = found.setdefault(who, [])
        if grade_id is not None:
            grades.append(Grade(*values))
    return found


def lesson_comments(gb, lesson: str, student: str | None = None) -> dict:
    """{student: [``Comment``]} of every submission of ``lesson`` that has comments, or of ``student``'s, in one
    query."""
    from nbgrader.api import BaseCell
    from nbgrader.api import Comment as Said
    from nbgrader.api import SubmittedNotebook

    query = (_lesson_query(lesson, student, BaseCell.name, Said.auto_comment, Said.manual_comment)
             .join(Said, Said.notebook_id == SubmittedNotebook.id).join(BaseCell, BaseCell.id == Said.cell_id))
    found: dict = {}
    for who, *values in gb.db.execute(query):
        found.setdefault(who, []).append(Comment(*values))
    return found


def lesson_fingerprints(gb, lesson: str) -> dict:
    """{student: ``fingerprint``} of every submission of ``lesson``, in two queries."""
    comments = lesson_comments(gb, lesson)
    return {student: fingerprint_of(grades, comments.get(student, []))
            for student, grades in lesson_grades(gb, lesson).items()}


def answer_hash(source: str) -> str:
    """The hash of a written answer: its text with line endings, trailing spaces, blank edges and Unicode forms
    normalised, so that saving it again in another editor does not make it a new answer."""
    lines = unicodedata.normalize("NFC", source).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    text = "\n".join(line.rstrip() for line in lines).strip()
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def written_answers(nb) -> dict:
    """grade_id -> ``answer_hash`` of the learner's answer, for every graded solution cell (what a human grades)."""
    answers = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {}) or {}
        if meta.get("grade") and meta.get("solution"):
            answers[meta["grade_id"]] = answer_hash(cell.source)
    return answers


def before_regrade(gb, lesson: str, student: str, record: state.Record | None) -> dict:
    """What a regrade of one submission must keep: ``previous`` (its score, status and work before), ``marks``
    (cell -> manual score, extra credit, comment, and the hash of the answer the score was for) and ``by`` (who
    handed that submission in, ``for_hand_in``). ``record`` is the
    submission's state record; a submission the gradebook does not hold has no marks."""
    from nbgrader.api import MissingEntry

    previous = {"score": record.score, "status": record.status, "attempted": record.attempted,
                "graded_answers": record.graded_answers} if record else {}
    by = record.by if record else ""  # who handed in the notebook the marks were given to
    try:
        nb = gb.find_submission_notebook(lesson, lesson, student)
    except MissingEntry:
        return {"previous": previous, "marks": {}, "by": by}
    if record and record.graded:
        now = marks(gb, lesson, student)  # marks given since the record was written count
        previous.update(score=now["score"], status=outcome.PENDING if now["pending"] else outcome.GRADED)
    answers, graded = (record.answers, record.graded_answers) if record else ({}, {})
    comments = {c.name: c.manual_comment for c in nb.comments if c.manual_comment}
    held = {}
    for grade in nb.grades:
        if grade.manual_score is None and not grade.extra_credit:
            continue
        final = grade.manual_score is not None and not grade.needs_manual_grade
        held[grade.name] = {"score": grade.manual_score, "extra_credit": grade.extra_credit,
                            "max": _score(grade.max_score), "final": final,
                            "answer": (answers if final else graded).get(grade.name)}
    for name, comment in comments.items():
        held.setdefault(name, {"score": None, "extra_credit": None, "final": False, "answer": None})["comment"] = \
            comment
    return {"previous": previous, "marks": held, "by": by}


def carry(gb, lesson: str, student: str, held: dict, answers: dict) -> list:
    """Put the marks of ``before_regrade`` back on the graded submission; return the scores that went back to
    pending: [{"cell", "reason", "score", "max"}]. ``answers``: ``written_answers`` of the graded notebook."""
    nb = gb.find_submission_notebook(lesson, lesson, student)
    grades = {g.name: g for g in nb.grades}
    comments = {c.name: c for c in nb.comments}
    reopened = []
    for name, mark in sorted(held.items()):
        grade, comment = grades.get(name), comments.get(name)
        if mark.get("other"):  # given to another's hand-in: on record here, never on this one (nbgrader keeps a
            # manual score and comment through autograde, so they are taken off)
            if grade is not None:
                grade.manual_score = grade.extra_credit = None
                grade.needs_manual_grade = grade.auto_score is None
            if comment is not None:
                comment.manual_comment = None
            if mark["score"] is not None or mark["extra_credit"] or mark.get("comment"):
                reopened.append({"cell": name, "reason": OTHER_HAND_IN, "score": mark["score"],
                                 "max": mark.get("max"), "extra_credit": mark["extra_credit"],
                                 "comment": mark.get("comment")})
            continue
        if mark.get("comment") and comment is not None:
            comment.manual_comment = mark["comment"]
        if mark["score"] is None and not mark["extra_credit"]:
            continue
        if grade is None:
            reopened.append({"cell": name, "reason": NOT_IN_LESSON, "score": mark["score"], "max": mark.get("max")})
            continue
        grade.manual_score, grade.extra_credit = mark["score"], mark["extra_credit"]
        if mark["score"] is None:
            continue
        if mark["answer"] and answers.get(name) == mark["answer"]:
            grade.needs_manual_grade = False  # the very answer the instructor marked: the mark still holds
            continue
        grade.needs_manual_grade = True
        reason = (TEST_REGRADED if grade.auto_score is not None else CELL_GONE if name not in answers
                  else TEXT_CHANGED if mark["answer"] else ANSWER_UNKNOWN)
        reopened.append({"cell": name, "reason": reason, "score": mark["score"], "max": mark.get("max")})
    gb.db.commit()
    return reopened


def for_hand_in(kept: dict, by: str) -> dict:
    """The marks of ``before_regrade`` that may hold for a hand-in by ``by`` (``class_roster.Entry.by``), given to the
    hand-in of ``kept["by"]`` (kept with them, so a retry or a rebuild decides the same): all of them when either is
    unknown or both are the same; when another handed it in (a Moodle
    participant or an exchange user other than the one marked, a Brightspace submission under the same name) none
    holds, whatever its answers: each goes back to pending with ``OTHER_HAND_IN``, so no mark moves from one
    student to another (a spoof with the marked answers copied included): ``carry`` gives none of them, not even
    a comment, and lists each (score, extra credit, comment) as reopened, so it stays on record."""
    marked_by = kept.get("by", "")
    if not marked_by or not by or marked_by == by:
        return kept
    held = {name: {**mark, "answer": None, "other": True} for name, mark in kept["marks"].items()}
    return {**kept, "marks": held}


def reopened_lines(reopened: list) -> list:
    """One line per mark that went back to pending: the cell, why, and the mark it had."""
    return [f"{r['cell']}: {r['reason']} (your mark, {r['score']:g} of {r['max']:g}, was for that hand-in and is "
            "not given to this one; mark it in formgrader)" if r["reason"] == OTHER_HAND_IN and r["score"] is not None
            and r["max"] is not None
            else f"{r['cell']}: {r['reason']} (your mark, {r['score']:g} of {r['max']:g}, is kept in the gradebook "
            "and counts again once you grade it in formgrader)" if r["score"] is not None and r["max"] is not None
            else f"{r['cell']}: {r['reason']}" for r in reopened]


def still_pending(reopened: list, current: dict) -> list:
    """The marks of ``reopened`` that still await the instructor (``current``: ``marks(...)``): one graded again in
    formgrader since is left out; one whose cell left the lesson stays."""
    return [r for r in reopened if r["cell"] in current["pending_cells"] or r["reason"] == NOT_IN_LESSON]


def graded_answers(current: dict, answers: dict, previous: dict) -> dict:
    """grade_id -> hash of the answer the instructor's manual score is for (``current``: ``marks(...)``)."""
    kept = {}
    for gid in current["manual_cells"]:
        if gid in current["pending_cells"]:
            if gid in previous:
                kept[gid] = previous[gid]
        elif gid in answers:
            kept[gid] = answers[gid]
    return kept


def before_rebuild(s: Settings) -> dict:
    """{(student, lesson): ``before_regrade``} of every graded submission, read before a rebuild replaces the course
    and its gradebook; marks still waiting from an earlier rebuild or regrade (``state.carried``) are kept as they
    are. Raises ``MarksUnreadable`` (nothing changed yet) when the gradebook cannot be read."""
    kept = {key: state.read_carried(s, *key) for key in state.carried(s)}
    graded = state.recorded(s)
    if not graded or (not s.db_url and not (s.course_root / "gradebook.db").exists()):
        return {**{key: {"previous": {}, "marks": {}} for key in graded}, **kept}
    try:
        with gradebook.opened(s) as gb:
            found = {key: before_regrade(gb, key[1], key[0], state.read(s, *key)) for key in graded}
    except Exception as exc:  # noqa: BLE001 - whatever stops the read, the marks must not be dropped
        why = (str(exc).splitlines() or [""])[0][:200]
        raise MarksUnreadable(
            f"the hidden checks, lessons or settings changed, so every notebook must be graded again, but the marks "
            f"in the gradebook ({gradebook.where(s)}) could not be read to carry them over "
            f"({type(exc).__name__}: {why}). Nothing was changed. Make the gradebook readable again (restore it "
            "from a backup, or start the PostgreSQL server), or run with the settings of the last run; "
            "to start afresh and drop the marks, move the OUT folder away.") from exc
    return {**found, **kept}

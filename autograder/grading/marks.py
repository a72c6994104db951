"""One submission's marks read from nbgrader's gradebook: autograded, given by the instructor, and still pending.

nbgrader keeps a ``Grade`` per graded cell: ``auto_score`` (tests; ``None`` for a written answer), ``manual_score``
(set in formgrader), ``needs_manual_grade``. A cell that needs a manual grade counts as *pending*: its points are
shown as awaiting the instructor, not as 0, and percentages leave them out.

**A resubmission after manual grading.** ``nbgrader autograde`` keeps every manual score of a regraded notebook
(``SaveAutoGrades`` never overwrites ``manual_score``) but marks those cells ``needs_manual_grade`` again.
``review_regrade`` then compares each such written answer with the one that was graded (its hash, kept in the
grading command's state): an unchanged answer keeps its manual score and counts again; a changed one stays
pending, its earlier score kept in the gradebook, until the instructor grades it again in formgrader, and the
report says so.
"""

from __future__ import annotations

import hashlib
import json


def _score(x) -> float:
    return float(x or 0.0)


def marks(gb, lesson: str, student: str) -> dict:
    """{score, max, auto, manual, pending, pending_cells} of one submission (score leaves pending cells out)."""
    nb = gb.find_submission_notebook(lesson, lesson, student)
    out = {"auto": 0.0, "manual": 0.0, "pending": 0.0, "max": 0.0, "pending_cells": [], "manual_cells": []}
    for grade in sorted(nb.grades, key=lambda g: g.name):
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
    """Changes whenever anything a feedback page shows from the gradebook changes (scores, comments)."""
    nb = gb.find_submission_notebook(lesson, lesson, student)
    grades = sorted((g.name, g.auto_score, g.manual_score, g.extra_credit, bool(g.needs_manual_grade))
                    for g in nb.grades)
    comments = sorted((c.name, c.auto_comment, c.manual_comment) for c in nb.comments)
    return hashlib.sha256(json.dumps([grades, comments], default=str).encode()).hexdigest()[:16]


def written_answers(nb) -> dict:
    """grade_id -> hash of the learner's answer, for every graded solution cell (what a human may grade)."""
    answers = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {}) or {}
        if meta.get("grade") and meta.get("solution"):
            answers[meta["grade_id"]] = hashlib.sha256(cell.source.strip().encode()).hexdigest()[:16]
    return answers


def review_regrade(gb, lesson: str, student: str, answers: dict, graded_answers: dict) -> list:
    """After autograde: keep the manual scores of unchanged answers; return flags for the changed ones."""
    nb = gb.find_submission_notebook(lesson, lesson, student)
    changed = []
    for grade in nb.grades:
        if grade.manual_score is None or not grade.needs_manual_grade:
            continue
        if grade.name in answers and graded_answers.get(grade.name) == answers[grade.name]:
            grade.needs_manual_grade = False  # the very answer the instructor graded: the grade still holds
        else:
            changed.append(grade.name)
    gb.db.commit()
    if not changed:
        return []
    return [f"resubmitted after manual grading: written answers need regrading ({', '.join(sorted(changed))}); "
            "the earlier manual scores are kept in the gradebook and count as pending until you grade them again "
            "in formgrader"]


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

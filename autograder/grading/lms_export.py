"""Grades for the LMS the class came from, in the CSV its import takes as it is (``DIR/lms-import/``).

``canvas.csv``: Canvas's gradebook import (Grades > Import): the columns ``Student, ID, SIS User ID, SIS Login ID,
Section``, then one column per graded lesson, and a ``Points Possible`` row. Canvas matches each row on ``ID``, the
user id of its download's file names, and creates a lesson's assignment when none of that name exists.

``moodle-<lesson>.csv``: Moodle's grading worksheet of one assignment (Assignment > View all submissions > Grading
action > Upload grading worksheet): ``Identifier`` (``Participant <id>``, the id of the download's folder names),
``Full name``, ``Grade``, ``Maximum grade``. Moodle's participant ids belong to one assignment, so a worksheet is
written for each lesson only from a download of that assignment (one participant id per student).

A lesson whose points are not all in (written answers awaiting the instructor, a grading error, not graded yet) is
left **empty**: an import never takes a provisional score for a final one. Mark the answers in formgrader and run
the grading command again; it grades nothing new and writes these files afresh. Other systems' imports match on ids
their downloads do not carry: use ``grades.csv``.
"""

from __future__ import annotations

from pathlib import Path

from autograder.grading import csv_cells, outcome
from autograder.grading.results import fmt
from autograder.grading.settings import Settings

FOLDER = "lms-import"
FINAL = (outcome.GRADED, outcome.MISSING, outcome.MALFORMED, outcome.REFUSED)  # every point of the lesson is in


def final_score(cell: dict):
    """A lesson's score as an LMS may record it, or None while any of its points is not in."""
    return cell["score"] if cell["status"] in FINAL else None


def write(s: Settings, rows: list, lms: str, lms_ids: dict) -> list:
    """The import files for ``lms`` (``intake.Roster.lms``), written from the rows of ``results``; their paths."""
    folder = Path(s.out) / FOLDER
    if lms == "canvas":
        folder.mkdir(exist_ok=True)
        return [_canvas(folder / "canvas.csv", s.lessons, rows, lms_ids)]
    if lms == "moodle":
        folder.mkdir(exist_ok=True)
        return [_moodle(folder / f"moodle-{lesson}.csv", lesson, rows, lms_ids) for lesson in s.lessons
                if any(r["lessons"][lesson]["status"] != outcome.MISSING for r in rows)]
    return []


def _canvas(path: Path, lessons, rows: list, lms_ids: dict) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *lessons])
        maxima = [fmt(rows[0]["lessons"][lesson]["max"]) if rows else "" for lesson in lessons]
        writer.writerow(["Points Possible", "", "", "", "", *maxima])
        for row in rows:
            writer.writerow([row["folder"], lms_ids.get(row["student"], ""), "", "", "",
                             *(fmt(final_score(row["lessons"][lesson])) for lesson in lessons)])
    return path


def _moodle(path: Path, lesson: str, rows: list, lms_ids: dict) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(["Identifier", "Full name", "Grade", "Maximum grade"])
        for row in rows:
            ids = lms_ids.get(row["student"], "").split()
            cell = row["lessons"][lesson]
            writer.writerow([f"Participant {ids[0]}" if len(ids) == 1 else "", row["folder"],
                             fmt(final_score(cell)), fmt(cell["max"])])
    return path

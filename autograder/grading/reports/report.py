"""The class's results as files: ``DIR/grades.csv`` (for an LMS), ``DIR/student_ids.csv`` (student id -> folder),
``DIR/report.html`` (every student's scores and flags, grading errors first, with the score distribution) and
``DIR/nbgrader_export.csv`` (nbgrader's own export of the gradebook), all from the rows of ``results``. Every CSV
cell goes through ``csv_cells`` (no cell opens as a formula in a spreadsheet).
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Sequence
from pathlib import Path

from autograder.grading.intake import class_roster
from autograder.grading.pipeline import page_safety
from autograder.grading.records import gradebook, outcome
from autograder.grading.records.settings import Settings
from autograder.grading.reports import csv_cells
from autograder.grading.reports.results import fmt, grading_errors, percent
from autograder.grading.run import feedback_files


def write_csv(s: Settings, rows: list) -> Path:
    path = Path(s.out) / "grades.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv_cells.writer(fh)
        header = ["student", "folder", "lms id"]
        for lesson in s.lessons:
            header += [f"{lesson} {col}" for col in ("status", "score", "max", "autograded", "manual", "pending",
                                                     "late", "submitted")]
        writer.writerow(header + ["total", "max total", "pending", "percent", "flags"])
        for row in rows:
            cells = [row["student"], row["folder"], row["lms_id"]]
            for lesson in s.lessons:
                c = row["lessons"][lesson]
                cells += [c["status"], fmt(c["score"]), fmt(c["max"]), fmt(c["auto"]), fmt(c["manual"]),
                          fmt(c["pending"]), "late" if c.get("late") else "", c.get("submitted", "")]
            pct = percent(row)  # empty while marks are due: never a final-looking percentage
            writer.writerow(cells + [fmt(row["total"]), fmt(row["max_total"]), fmt(row["pending"]),
                                     "" if pct is None else f"{pct:.1f}", " | ".join(row["flags"])])
    return path


def write_student_ids(s: Settings, roster: class_roster.Roster) -> Path:
    path = Path(s.out) / "student_ids.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(["student", "folder", "lms id"])
        for student in roster.students:
            writer.writerow([student, roster.folders.get(student, student), roster.lms_ids.get(student, "")])
    return path


def distribution(rows: list) -> list:
    """Lines of a text histogram of total scores in 10% bands (``results.percent``: of the maximum), with
    mean/median/min/max; a student with points awaiting the instructor, or a score unknown, is left out and counted."""
    known = [p for p in map(percent, rows) if p is not None]
    waiting = sum(1 for r in rows if r["pending"] and r["total"] is not None)
    unknown = len(rows) - len(known) - waiting
    if not known:
        return ([f"no student has a complete score ({waiting} with written answers awaiting the instructor)"
                 if waiting else "no student has a complete score"] if rows else ["no students"])
    bands = [0] * 10
    for p in known:
        bands[min(int(p // 10), 9)] += 1
    width = max(bands) or 1
    lines = [f"{10 * i:3d}-{10 * i + 10:3d}% | {'#' * round(30 * n / width):<30} {n}" for i, n in
             reversed(list(enumerate(bands)))]
    lines.append(f"mean {statistics.mean(known):.1f}%, median {statistics.median(known):.1f}%, "
                 f"min {min(known):.1f}%, max {max(known):.1f}%, {len(rows)} students, "
                 f"{sum(1 for r in rows if r['flags'])} flagged"
                 + (f", {unknown} left out (a grading error or a lesson not graded yet)" if unknown else "")
                 + (f", {waiting} left out until their written answers are marked" if waiting else ""))
    return lines


def _cell_text(c: dict) -> str:
    if c["status"] == outcome.GRADING_ERROR:
        return "grading error"
    if c["status"] in (outcome.NOT_YET, outcome.NOT_HANDED_IN):
        return c["status"]
    text = f"{fmt(c['score'])} / {fmt(c['max'])}"
    if c["status"] in (outcome.MISSING, outcome.MALFORMED, outcome.REFUSED):
        return f"{text} ({c['status']})"
    if c["pending"]:
        return f"{text} ({fmt(c['auto'])} autograded; {fmt(c['pending'])} awaiting the instructor)"
    if c["manual"] is not None:
        return f"{text} ({fmt(c['auto'])} autograded + {fmt(c['manual'])} manual)"
    return text


def late_mark(c: dict) -> str:
    """``late`` beside a lesson's score in the report (HTML), with the submission time when the LMS gave one."""
    if not c.get("late"):
        return ""
    when = c.get("submitted", "")
    return ' <b class="late">late</b>' + (f" <small>(submitted {html.escape(when)})</small>" if when else "")


def write_report(s: Settings, rows: list, notes: list, changes: Sequence = ()) -> Path:
    """``changes``: the lines of what this run changed (``insights.change_lines``: old and new scores, marks back
    to pending)."""
    esc = html.escape
    head = "".join(f"<th>{esc(lesson)}</th>" for lesson in s.lessons)
    similar = (' <a href="similarity.html">Similar work</a>, for you to look at: pairs and groups whose work shares '
               'more rare evidence than the class makes likely.') if s.similarity else ""
    body = []
    for r in rows:
        cells = []
        for lesson in s.lessons:
            c = r["lessons"][lesson]
            link = feedback_files.page_link(s.out, r["student"], lesson)
            text = esc(_cell_text(c)) + late_mark(c)
            style = ' class="error"' if c["status"] == outcome.GRADING_ERROR else ""
            cells.append(f'<td{style}><a href="{esc(link)}">{text}</a></td>' if link else f"<td{style}>{text}</td>")
        flags = "".join(f"<li>{esc(f)}</li>" for f in r["flags"])
        pct = percent(r)
        total = "unknown" if r["total"] is None else f"{fmt(r['total'])} / {fmt(r['max_total'])}"
        total += "" if pct is None else f" ({pct:.0f}%)"
        total += (f"<br>{fmt(r['pending'])} awaiting the instructor; percent when every answer is marked"
                  if r["pending"] else "")
        name = esc(r["student"]) + ("" if r["folder"] == r["student"] else f"<br><small>{esc(r['folder'])}</small>")
        body.append(f"<tr><td>{name}</td>{''.join(cells)}<td>{total}</td><td><ul>{flags}</ul></td></tr>")
    errors = grading_errors(rows)
    error_block = ""
    if errors:
        items = "".join(f"<li>{esc(st)} {esc(le)}: {esc(why)}</li>" for st, le, why in errors)
        error_block = (f'<div class="error"><h2>{len(errors)} grading errors: the grader failed, not the learners'
                       "</h2><p>These scores are left empty (not 0). Fix the cause and run the command again: it "
                       f"grades only these.</p><ul>{items}</ul></div>")
    pending = sum(r["pending"] for r in rows)
    pending_note = (f"<p><b>Written answers awaiting the instructor:</b> {fmt(pending)} points in all. Grade them "
                    "with <code>make formgrader OUT=...</code>, then run the grading command again: it folds the "
                    "manual scores in and regenerates those students' feedback.</p>" if pending else "")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Grading report</title>
<style>body{{font-family:sans-serif}} table{{border-collapse:collapse}} td,th{{border:1px solid #999;padding:4px;
vertical-align:top}} ul{{margin:0;padding-left:1.2em}} pre{{background:#f4f4f4;padding:8px}} .late{{color:#8a4b00}}
.error{{color:#b00000;border-color:#b00000}} div.error{{border:2px solid #b00000;padding:4px 12px}}</style></head><body>
<h1>Grading report</h1>
{error_block}
<p>{len(rows)} students, lessons: {esc(', '.join(s.lessons))}. Flags mark what a human should look at; a flagged
score is never higher than the work earns (hidden tests and nbgrader decide it).</p>
<p><a href="insights.html">Class insights</a>: score distributions, misconceptions, item analysis, failures
without a name, students who may need help.{similar}</p>
{pending_note}
{''.join(f'<p><b>{esc(n)}</b></p>' for n in notes)}
<h2>What this run changed</h2><pre>{esc(chr(10).join(changes) or "no score or state changed since the last run")}</pre>
<h2>Score distribution (total)</h2><pre>{esc(chr(10).join(distribution(rows)))}</pre>
<h2>Students</h2><table><tr><th>student</th>{head}<th>total</th><th>flags</th></tr>
{''.join(body)}</table></body></html>
"""
    path = Path(s.out) / "report.html"
    path.write_text(page_safety.protect(page), encoding="utf-8")  # no script runs in it, whatever a name holds
    return path


def write_nbgrader_export(s: Settings) -> list:
    """What ``nbgrader export`` writes, run in this process (a subprocess costs seconds of start-up) by nbgrader's own
    ``CsvExportPlugin`` on ``ExportView``; returns the notes for the report: none, or why it failed (the CSV and
    report do not depend on it)."""
    try:
        from nbgrader.plugins.export import CsvExportPlugin

        with gradebook.opened(s) as gb:
            CsvExportPlugin(to=str(Path(s.out) / "nbgrader_export.csv")).export(ExportView(gb))
        csv_cells.rewrite(Path(s.out) / "nbgrader_export.csv")
    except Exception as exc:  # noqa: BLE001 - the CSV and report below do not depend on it
        return [f"nbgrader export failed: {type(exc).__name__}: {exc}"]
    return []


class ExportView:
    """The gradebook as nbgrader's ``CsvExportPlugin`` reads it, each assignment's submissions in one query.

    The plugin asks ``find_submission`` for every (assignment, student), and each answer, with its score and late
    penalty (deferred columns), costs queries of its own: tens of thousands for a large class. Here the first
    ``find_submission`` of an assignment reads all of its submissions, those columns with them; the plugin writes
    the same rows from the same objects. Anything else is the gradebook's own."""

    def __init__(self, gb):
        self._gb, self._submissions = gb, {}

    def __getattr__(self, name):
        return getattr(self._gb, name)

    def find_submission(self, assignment: str, student: str):
        from nbgrader.api import Assignment, MissingEntry, SubmittedAssignment
        from sqlalchemy.orm import undefer

        if assignment not in self._submissions:
            found = (self._gb.db.query(SubmittedAssignment)
                     .join(Assignment, Assignment.id == SubmittedAssignment.assignment_id)
                     .filter(Assignment.name == assignment)
                     .options(undefer(SubmittedAssignment.score), undefer(SubmittedAssignment.late_submission_penalty))
                     .all())
            self._submissions[assignment] = {sub.student_id: sub for sub in found}
        try:
            return self._submissions[assignment][student]
        except KeyError:
            raise MissingEntry(f"No such submission: {assignment} for {student}") from None

"""The feedback pages a run hands each learner, in ``OUT/feedback/<student>/<lesson>.html``: where each lives
(``page_path``) and how the report and the insights link to it (``page_link``); the page nbgrader wrote
(``autograder/grading/pipeline/feedback_page.py``) with what changed since the learner's last one added under its
title (``with_changes``: old and new score, answers to be marked again); and the short notice a learner gets instead
when their notebook was missing, unreadable or refused (``write_notices``)."""

from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import quote

from autograder.grading.pipeline import page_safety


def with_changes(page: str, before, after: float, reopened: list) -> str:
    """The feedback page with what changed since the learner's last one, under its title: the old and new score
    when they differ, and the written answers that await the instructor again (``marks.carry``)."""
    lines = []
    if before is not None and f"{before:g}" != f"{after:g}":
        lines.append(f"<p>Your score changed from {before:g} to {after:g} since your last feedback.</p>")
    if reopened:
        cells = ", ".join(f"<code>{html.escape(r['cell'])}</code>" for r in reopened)
        lines.append(f"<p>Your instructor will mark these answers again: {cells}.</p>")
    if not lines:
        return page
    return page.replace("</h1>", '</h1>\n<div id="since-last">' + "".join(lines) + "</div>", 1)


NOTICE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{lesson}: not graded</title>
<style>body{{font-family:sans-serif;max-width:46em;margin:2em auto;padding:0 1em;line-height:1.5}}
.notice{{border-left:4px solid #d2413a;padding:.5em 1em;background:#fdf3f2}}</style></head>
<body><h1>{lesson}: not graded</h1>
<p class="notice"><strong>{what}</strong></p>
<p>{todo}</p></body></html>
"""


def write_notice(path: Path, lesson: str, status: str, note: str = "") -> Path:
    """A short page for a lesson that could not be graded: what was missing or unreadable, and what to do."""
    if status == "missing":
        what = f"No notebook for {lesson} was found in your submission, so it scored 0."
        todo = (f"Submit your work as <code>{lesson}.ipynb</code> (the lesson's own file, saved from JupyterLab) "
                "and ask your instructor to grade it again.")
    elif status == "refused":
        what = (f"Your {lesson} submission was a link or a special file, not a notebook ({html.escape(note)}); "
                "the grader does not open those, so it scored 0.")
        todo = (f"Submit the notebook file itself, <code>{lesson}.ipynb</code> (File, Download in JupyterLab), "
                "and ask your instructor to grade it again.")
    else:
        what = f"Your {lesson} notebook could not be read ({html.escape(note or status)}), so it scored 0."
        todo = (f"Open <code>{lesson}.ipynb</code> in JupyterLab: if it does not open, download it again from "
                "your work and re-submit it; if it opens, save it (File, Save Notebook) and re-submit it. Then ask "
                "your instructor to grade it again.")
    page = NOTICE.format(lesson=html.escape(lesson), what=what, todo=todo)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page_safety.protect(page), encoding="utf-8")
    return path


def write_notices(out: Path, roster) -> list:
    """A notice page ``out/feedback/<student>/<lesson>.html`` for every lesson the roster could not grade."""
    written = []
    for student, entries in roster.entries.items():
        for lesson, entry in entries.items():
            if entry.status in ("missing", "malformed", "refused"):  # not handed in yet, or a grading error: no notice
                written.append(write_notice(page_path(out, student, lesson), lesson,
                                            entry.status, entry.note))
    return written


def page_path(out, student: str, lesson: str) -> Path:
    """Where the page a student receives for a lesson is written: ``OUT/feedback/<student>/<lesson>.html``."""
    return Path(out) / "feedback" / student / f"{lesson}.html"


def page_link(out, student: str, lesson: str):
    """The link to that page relative to ``OUT`` (the report and the insights live there), or None when the page
    does not exist. Names are percent-encoded: a student id may hold ``#``, ``?`` or ``%``."""
    if not page_path(out, student, lesson).exists():
        return None
    return f"feedback/{quote(student)}/{quote(lesson)}.html"

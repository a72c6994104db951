"""Manual grading end to end, across a term of runs: a mark is never lost.

One class, graded once per session through ``python -m autograder.grade`` (what ``make grade`` runs): alice and
bob hand in lessons 01 and 05 with the model answers.

1. ``first`` (lessons 05): the written answers await the instructor.
2. The instructor marks alice's written answers as formgrader does (``manual_score``, ``needs_manual_grade =
   False``, a comment) through nbgrader's Gradebook API; bob's stay unmarked.
3. ``added`` (lessons 01 05): lesson 01 is added and graded; nothing of lesson 05 is graded again, and the marks are
   folded in.
4. ``only05`` (lessons 05), then ``both`` (lessons 01 05): another set of lessons grades nothing again.
5. ``settings`` (another ``--timeout``): every notebook is graded again in a new gradebook; the marks carry over.
6. ``resubmitted``: alice hands lesson 05 in again, one written answer changed and another only saved again with
   other line endings and trailing spaces: the first goes back to pending, the second keeps its mark.
7. ``refused``: a copy of the workspace whose gradebook cannot be read, run with other settings: the command
   refuses with status 7 before changing a byte.
"""

from __future__ import annotations

import csv
import hashlib
import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from run_once import once

from autograder import course
from autograder.course import answers, notebooks
from autograder.grading.records import marks
from autograder.grading.records.settings import COURSE_ID, EXIT_MARKS

LESSON, WARMUP = "05_exercises", "01_warmup"
STUDENTS = ("alice", "bob")
# The scores the instructor gives alice: full marks but one point short on explain_w_o (2 points).
MANUAL = {"explain_reshape": 3.0, "explain_w_o": 1.0, "explain_scale": 2.0, "symptom_masked_attention": 1.0,
          "symptom_attention_layer": 1.0}
CHANGED = {"explain_w_o": "W_O mixes the heads; it is an average of them."}  # alice's resubmitted answer
RESAVED = "explain_reshape"  # resubmitted with other line endings and trailing spaces, same text


def _points():
    """(autograded points, manually graded points) of the lesson, read from its source."""
    cells = [c.metadata.get("nbgrader", {}) for c in notebooks.read_source(course.SOLUTIONS / f"{LESSON}.py").cells]
    manual = {m["grade_id"]: m["points"] for m in cells if m.get("grade") and m.get("solution")}
    auto = sum(m["points"] for m in cells if m.get("grade") and not m.get("solution"))
    return auto, manual


AUTO, MANUAL_MAX = _points()
COMMENT = "Say what kind of map W_O is: a learned linear map."
pytestmark = pytest.mark.grading


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _cli(root, out, lessons, *extra):
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(root), "--out", str(out), "--lessons",
                           *lessons, "--workers", "2", "--quiet", *extra], cwd=course.ROOT,
                          env=notebooks.nbgrader_env(), capture_output=True, text=True, timeout=900)
    with (Path(out) / "grades.csv").open(newline="") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    pages = {f"{s} {lesson}": Path(out) / "feedback" / s / f"{lesson}.html" for s in rows for lesson in (WARMUP, LESSON)}
    feedback = {key: page.read_text() for key, page in pages.items() if page.exists()}
    return {"rc": proc.returncode, "stdout": proc.stdout + proc.stderr, "rows": rows, "feedback": feedback,
            "report": html.unescape((Path(out) / "report.html").read_text()), "tree": _tree(Path(out) / "feedback"),
            "kept": sorted(p.name for p in (Path(out) / "previous-gradebooks").glob("*"))}


def _mark(out: Path) -> None:
    """What formgrader's grade and comment handlers do, for alice's written answers."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}", COURSE_ID) as gb:
        for cell, points in MANUAL.items():
            found = gb.find_grade(cell, LESSON, LESSON, "alice")
            found.manual_score, found.needs_manual_grade = points, False
        gb.find_comment("explain_w_o", LESSON, LESSON, "alice").manual_comment = COMMENT
        gb.db.commit()


def _gradebook_marks(out: Path) -> dict:
    """{student: {cell: [manual_score, needs_manual_grade]}} and alice's comment, read from the gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}", COURSE_ID) as gb:
        found = {s: {g.name: [g.manual_score, bool(g.needs_manual_grade)]
                     for g in gb.find_submission_notebook(LESSON, LESSON, s).grades if g.name in MANUAL_MAX}
                 for s in STUDENTS}
        found["comment"] = gb.find_comment("explain_w_o", LESSON, LESSON, "alice").manual_comment
    return found


def _resubmission() -> object:
    """alice's lesson 05 again: explain_w_o changed, explain_reshape the same text saved with CRLF and trailing
    spaces."""
    nb = answers.fill(LESSON, CHANGED)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == RESAVED:
            cell.source = "\r\n".join(line + "  " for line in cell.source.split("\n"))
    return nb


def _batch(base: Path) -> dict:
    root, out = base / "class", base / "out"
    for student in STUDENTS:
        for lesson in (WARMUP, LESSON):
            notebooks.write_notebook(answers.fill(lesson), root / student / f"{lesson}.ipynb")
    both, fast = (WARMUP, LESSON), ("--timeout", "61")
    runs = {"first": _cli(root, out, (LESSON,))}
    _mark(out)
    runs["added"] = _cli(root, out, both)
    runs["only05"] = _cli(root, out, (LESSON,))
    runs["both"] = _cli(root, out, both)
    runs["settings"] = _cli(root, out, both, *fast)
    runs["settings"]["gradebook"] = _gradebook_marks(out)
    notebooks.write_notebook(_resubmission(), root / "alice" / f"{LESSON}.ipynb")
    runs["resubmitted"] = _cli(root, out, both, *fast)
    runs["resubmitted"]["gradebook"] = _gradebook_marks(out)
    copy = base / "unreadable"
    shutil.copytree(out, copy, symlinks=True)
    (copy / "course" / "gradebook.db").write_bytes(b"this is not a database" * 100)
    before = _tree(copy)
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(root), "--out", str(copy), "--lessons",
                           *both, "--timeout", "62", "--quiet"], cwd=course.ROOT, env=notebooks.nbgrader_env(),
                          capture_output=True, text=True, timeout=900)
    runs["refused"] = {"rc": proc.returncode, "stdout": proc.stdout + proc.stderr, "same": before == _tree(copy)}
    return runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return once(tmp_path_factory, "manual-grading", _batch)


def _score_line(page: str, cell: str) -> str:
    """The text of the score line of the answer cell ``cell`` on a feedback page."""
    found = re.search(rf'<a name="{cell}"></a>\s*<div class="panel-heading">(.*?)</div>', page, re.S)
    assert found, cell
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split())


def _title(page: str) -> str:
    return html.unescape(re.search(r'<h1 class="page-title">(.*?)</h1>', page, re.S).group(1))


def _report_total(report: str, student: str) -> str:
    """The total cell of a student's row in report.html."""
    row = re.search(rf"<tr><td>{student}</td>(.*?)</tr>", report, re.S).group(1)
    return re.findall(r"<td>(.*?)</td>", row, re.S)[-2]


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def _lesson(row, *cols):
    return tuple(row[f"{LESSON} {c}"] for c in cols)


GIVEN, TOP, PENDING = sum(MANUAL.values()), AUTO + sum(MANUAL_MAX.values()), sum(MANUAL_MAX.values())


def test_written_answers_await_the_instructor_instead_of_scoring_zero(runs):
    first = runs["first"]
    assert first["rc"] == 0, first["stdout"][-3000:]
    for student in STUDENTS:
        row = first["rows"][student]
        assert _lesson(row, "status", "score", "max", "pending") == ("pending manual", f"{AUTO}", f"{TOP}",
                                                                      f"{PENDING}")
        assert row["percent"] == ""  # no final-looking percentage while points are pending
        total = _report_total(first["report"], student)
        assert "%" not in total.replace("percent when every answer is marked", "") and \
            f"{PENDING:g} awaiting the instructor" in total
        page = first["feedback"][f"{student} {LESSON}"]  # each unmarked answer awaits, never a score of 0
        for cell, top in MANUAL_MAX.items():
            assert _score_line(page, cell) == f"Student's answer awaiting your instructor ({top:.1f} points) (Top)"
        assert _title(page) == f"{LESSON} (Score so far: {AUTO:.1f} / {TOP:.1f}; {PENDING:.1f} points awaiting " \
                               "your instructor)"
    assert "awaiting the instructor" in first["report"] and "make formgrader" in first["report"]


def test_a_new_lesson_is_added_and_graded_while_the_marks_are_folded_in_without_grading_lesson_05_again(runs):
    first, added = runs["first"], runs["added"]
    assert added["rc"] == 0, added["stdout"][-3000:]
    assert "graded 2 notebooks" in added["stdout"] and "lessons added to the course: 01_warmup" in added["stdout"]
    assert "regrading" not in added["stdout"] and not added["kept"]  # no new gradebook
    assert "feedback pages rebuilt for 1 notebooks" in added["stdout"]
    alice = added["rows"]["alice"]
    assert set(MANUAL) == set(MANUAL_MAX) and GIVEN == PENDING - 1
    assert _lesson(alice, "status", "score", "autograded", "manual", "pending") == \
        ("graded", f"{AUTO + GIVEN:g}", f"{AUTO}", f"{GIVEN:g}", "0")
    assert alice[f"{WARMUP} status"] == "graded" and alice["total"] == \
        f"{float(alice[f'{WARMUP} score']) + AUTO + GIVEN:g}"
    assert f"{AUTO + GIVEN:g} / {TOP} ({AUTO} autograded + {GIVEN:g} manual)" in added["report"]
    page = added["feedback"][f"alice {LESSON}"]
    assert COMMENT in page and COMMENT not in first["feedback"][f"alice {LESSON}"]
    assert f"{AUTO + GIVEN:.1f} / {TOP:.1f}" in page
    change = f"alice {LESSON}: {AUTO} -> {AUTO + GIVEN:g}"
    assert change in added["stdout"] and change in added["report"]
    assert f"Your score changed from {AUTO} to {AUTO + GIVEN:g}" in page
    for cell, given in MANUAL.items():  # once marked, the mark shows
        assert _score_line(page, cell) == f"Student's answer Score: {given:.1f} / {MANUAL_MAX[cell]:.1f} (Top)"
    assert "awaiting your instructor" not in page
    assert _title(page) == f"{LESSON} (Score: {AUTO + GIVEN:.1f} / {TOP:.1f})"
    percent = 100 * float(alice["total"]) / float(alice["max total"])
    assert alice["percent"] == f"{percent:.1f}" and f"({percent:.0f}%)" in _report_total(added["report"], "alice")
    # bob's grades did not change: his page is the same file
    assert _digest(added["feedback"][f"bob {LESSON}"]) == _digest(first["feedback"][f"bob {LESSON}"])
    assert _lesson(added["rows"]["bob"], "pending") == (f"{PENDING}",)


def test_another_set_of_lessons_grades_nothing_again_and_keeps_every_mark(runs):
    added = runs["added"]
    assert "no canary needed" in runs["only05"]["stdout"]
    # OUT is the term: only05 leaves every page as it was, lesson 01's included, and so does both
    assert runs["only05"]["tree"] == added["tree"]
    assert runs["both"]["tree"] == added["tree"]
    for name in ("only05", "both"):
        run = runs[name]
        assert run["rc"] == 0, run["stdout"][-3000:]
        assert "graded 0 notebooks" in run["stdout"]
        assert "regrading" not in run["stdout"] and "grading every notebook again" not in run["stdout"]
        assert not run["kept"]
        for student in STUDENTS:
            cols = ("status", "score", "autograded", "manual", "pending")
            assert _lesson(run["rows"][student], *cols) == _lesson(added["rows"][student], *cols)
    assert runs["only05"]["rows"] == runs["both"]["rows"] == added["rows"]  # lesson 01 stays in the term


def test_a_full_regrade_in_a_new_gradebook_carries_every_mark_over(runs):
    added, again = runs["added"], runs["settings"]
    assert again["rc"] == 0, again["stdout"][-3000:]
    assert "grading every notebook again" in again["stdout"] and "graded 4 notebooks" in again["stdout"]
    assert len(again["kept"]) == 1  # the old gradebook is kept beside the results
    assert again["rows"] == added["rows"]  # every score, mark and pending point as before
    book = again["gradebook"]
    assert book["alice"] == {cell: [score, False] for cell, score in MANUAL.items()}
    assert book["bob"] == {cell: [None, True] for cell in MANUAL_MAX}  # unmarked: still pending
    assert book["comment"] == COMMENT
    top = f"{AUTO + GIVEN:g}"
    assert f"alice {LESSON}: {top} -> {top}" in again["stdout"] and f"bob {LESSON}: {AUTO} -> {AUTO}" in again["stdout"]
    assert f"alice {LESSON}: {top} -> {top}" in again["report"]
    page = again["feedback"][f"alice {LESSON}"]
    assert COMMENT in page and f"{AUTO + GIVEN:.1f} / {TOP:.1f}" in page and "Your score changed" not in page
    assert "back to pending" not in again["stdout"]


def test_a_resubmission_keeps_the_marks_of_unchanged_answers_and_reopens_a_changed_one(runs):
    before, again = runs["settings"], runs["resubmitted"]
    assert again["rc"] == 0, again["stdout"][-3000:]
    assert "graded 1 notebooks" in again["stdout"]
    kept = GIVEN - MANUAL["explain_w_o"]
    alice = again["rows"]["alice"]
    assert _lesson(alice, "score", "manual", "pending", "status") == \
        (f"{AUTO + kept:g}", f"{kept:g}", f"{MANUAL_MAX['explain_w_o']}", "pending manual")
    book = again["gradebook"]
    assert book["alice"] == {cell: [score, cell in CHANGED] for cell, score in MANUAL.items()}
    assert book["bob"] == before["gradebook"]["bob"] and again["rows"]["bob"] == before["rows"]["bob"]
    reopened = f"explain_w_o: {marks.TEXT_CHANGED}"
    assert f"alice {LESSON} {reopened}" in again["stdout"] and reopened in again["report"]
    assert f"{LESSON}: marks back to pending: {reopened}" in alice["flags"]
    assert RESAVED not in alice["flags"]
    assert f"alice {LESSON}: {AUTO + GIVEN:g} -> {AUTO + kept:g}" in again["stdout"]
    page = again["feedback"][f"alice {LESSON}"]
    assert f"Your score changed from {AUTO + GIVEN:g} to {AUTO + kept:g}" in page
    assert "Your instructor will mark these answers again: <code>explain_w_o</code>." in page
    top = MANUAL_MAX["explain_w_o"]  # awaits again, its old mark (kept in the gradebook) counted nowhere
    assert _score_line(page, "explain_w_o") == f"Student's answer awaiting your instructor ({top:.1f} points) (Top)"
    assert _score_line(page, RESAVED) == \
        f"Student's answer Score: {MANUAL[RESAVED]:.1f} / {MANUAL_MAX[RESAVED]:.1f} (Top)"
    assert _title(page) == f"{LESSON} (Score so far: {AUTO + kept:.1f} / {TOP:.1f}; {top:.1f} points awaiting your " \
                           "instructor)"
    assert alice["percent"] == ""


def test_a_run_that_cannot_carry_the_marks_over_refuses_before_changing_anything(runs):
    refused = runs["refused"]
    assert refused["rc"] == EXIT_MARKS, refused["stdout"][-3000:]
    assert "could not be read to carry them over" in refused["stdout"] and "Nothing was changed" in refused["stdout"]
    assert refused["same"]

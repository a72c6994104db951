"""An instructor's whole term, through the real commands, with nothing lost.

Canvas's "Download Submissions" zip of six students for lessons 01, 05 and 07: model answers (ngada), a catalogued
bug in lesson 01 (okafor), untouched notebooks (ruiz), a SyntaxError in lesson 01 and no lesson 07 (lee), an
infinite loop in lesson 01 (khan), lesson 05 only (ito). Then, in one output folder, as docs/grading.md tells it:

1. ``first``: ``make grade`` (no ``LESSONS``: the class decides the lessons);
2. the written answers of lesson 05 are marked through nbgrader's API, as formgrader saves them;
3. ``marked``: ``make grade`` again folds the marks in, grading nothing;
4. ``only05``: ``LESSONS=05``, another set of lessons;
5. ``resubmitted``: ngada hands lesson 05 in again with one written answer changed; ``make grade``.

At each step: every mark kept or pending for the right reason, scores and percentages right, and grades.csv, the
report, the feedback pages and Canvas's import file agreeing.
"""

from __future__ import annotations

import csv
import html
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from run_once import once

from autograder import bugs, course
from autograder.course import answers, notebooks
from autograder.grading import lms_export
from autograder.grading.settings import COURSE_ID

pytestmark = [pytest.mark.grading, pytest.mark.slow]
WARMUP, EXERCISES, HEADS = "01_warmup", "05_exercises", "07_heads_that_learn"
LESSONS = (WARMUP, EXERCISES, HEADS)
BUG = next(b for b in bugs.CATALOG if b.lesson == WARMUP and b.function == "softmax")
SYNTAX_ERROR = "def softmax(x, axis=-1)\n    return x\n"
LOOPING = answers.model_answers(WARMUP)["softmax"] + "\nwhile True:\n    pass\n"
CANVAS_IDS = {"ngada": 31, "okafor": 42, "ruiz": 57, "lee": 64, "khan": 77, "ito": 88}
CHANGED_ANSWER = "explain_w_o"


def _work(student: str) -> dict:
    """{lesson: notebook} a student hands in."""
    full = {lesson: answers.fill(lesson) for lesson in LESSONS}
    return {"ngada": full,
            "okafor": {**full, WARMUP: answers.fill(WARMUP, {BUG.function: BUG.source})},
            "ruiz": {lesson: answers.fill(lesson, complete=False) for lesson in LESSONS},
            "lee": {WARMUP: answers.fill(WARMUP, {"softmax": SYNTAX_ERROR}), EXERCISES: full[EXERCISES]},
            "khan": {**full, WARMUP: answers.fill(WARMUP, {"softmax": LOOPING})},
            "ito": {EXERCISES: full[EXERCISES]}}[student]


def _sid(student: str) -> str:
    return f"{student}_{CANVAS_IDS[student]}"


def _points(lesson: str) -> tuple:
    """(autograded points, {written answer: points}) of a lesson, from its source."""
    cells = [c.metadata.get("nbgrader", {}) for c in notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells]
    manual = {m["grade_id"]: m["points"] for m in cells if m.get("grade") and m.get("solution")}
    return sum(m["points"] for m in cells if m.get("grade") and not m.get("solution")), manual


def _zip(base: Path, work: dict, name: str) -> Path:
    archive = base / name
    with zipfile.ZipFile(archive, "w") as zf:
        for number, (student, lessons) in enumerate(sorted(work.items())):
            for lesson, nb in lessons.items():
                path = base / "files" / f"{student}_{CANVAS_IDS[student]}_{900 + number}_{lesson}.ipynb"
                notebooks.write_notebook(nb, path)
                zf.write(path, path.name)
    return archive


def _run(archive: Path, out: Path, *lessons) -> dict:
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(archive), "--out", str(out), "--workers",
                           "2", "--timeout", "20", "--quiet", *(["--lessons", *lessons] if lessons else [])],
                          cwd=course.ROOT, env=notebooks.nbgrader_env(), capture_output=True, text=True, timeout=1200)

    def table(path):
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.reader(fh))

    header, *rows = table(out / "grades.csv")
    pages = {p.relative_to(out / "feedback").as_posix(): html.unescape(p.read_text())
             for p in (out / "feedback").glob("*/*.html")}
    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr,
            "rows": {r[0]: dict(zip(header, r)) for r in rows}, "canvas": table(out / lms_export.FOLDER / "canvas.csv"),
            "report": html.unescape((out / "report.html").read_text()), "pages": pages,
            "insights": (out / "insights.html").exists()}


def _mark(out: Path) -> dict:
    """Mark every written answer of lesson 05, as formgrader saves a mark: full points, but okafor gets 0 for
    explain_w_o. Returns {student id: points given}."""
    from nbgrader.api import Gradebook

    _, written = _points(EXERCISES)
    given = {}
    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}", COURSE_ID) as gb:
        for sub in gb.find_assignment(EXERCISES).submissions:
            points = {cell: (0.0 if sub.student_id == _sid("okafor") and cell == CHANGED_ANSWER else float(top))
                      for cell, top in written.items()}
            for cell, score in points.items():
                grade = gb.find_grade(cell, EXERCISES, EXERCISES, sub.student_id)
                grade.manual_score, grade.needs_manual_grade = score, False
            given[sub.student_id] = points
        gb.find_comment(CHANGED_ANSWER, EXERCISES, EXERCISES, _sid("okafor")).manual_comment = "Not what W_O does."
        gb.db.commit()
    return given


def _term(base: Path) -> dict:
    work = {student: _work(student) for student in CANVAS_IDS}
    out = base / "out"
    runs = {"first": _run(_zip(base, work, "week1.zip"), out)}
    given = _mark(out)
    runs["marked"] = _run(base / "week1.zip", out)
    runs["only05"] = _run(base / "week1.zip", out, "05")
    work["ngada"][EXERCISES] = answers.fill(EXERCISES, {CHANGED_ANSWER: "W_O averages the heads."})
    runs["resubmitted"] = _run(_zip(base, work, "week2.zip"), out)
    return {"runs": runs, "given": given}


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    return once(tmp_path_factory, "instructor-term", _term)


def _score(run, student, lesson):
    return run["rows"][_sid(student)][f"{lesson} score"]


def _canvas(run) -> dict:
    """{Canvas id: {lesson: score}} of the import file, and its Points Possible row under 'max'."""
    header, points, *rows = run["canvas"]
    lessons = header[5:]
    return {"max": dict(zip(lessons, points[5:])), **{r[1]: dict(zip(lessons, r[5:])) for r in rows}}


def _agree(run, lessons) -> None:
    """grades.csv, Canvas's import file, the report and the feedback pages tell the same story."""
    canvas = _canvas(run)
    assert set(canvas) - {"max"} == {str(i) for i in CANVAS_IDS.values()}
    for sid, row in run["rows"].items():
        lms = row["lms id"]
        for lesson in lessons:
            final = row[f"{lesson} status"] in ("graded", "missing")
            assert canvas[lms][lesson] == (row[f"{lesson} score"] if final else ""), (sid, lesson)
            assert canvas["max"][lesson] == row[f"{lesson} max"]
            assert f"{sid}/{lesson}.html" in run["pages"]
        scores = [float(row[f"{lesson} score"]) for lesson in lessons]
        assert float(row["total"]) == sum(scores)
        assert float(row["max total"]) == sum(float(row[f"{lesson} max"]) for lesson in lessons)
        if float(row["pending"]):
            assert row["percent"] == ""
        else:
            assert row["percent"] == f"{100 * float(row['total']) / float(row['max total']):.1f}"
        assert sid in run["report"]
    assert {p.split("/")[1][:-5] for p in run["pages"]} == set(lessons)
    assert run["insights"]


def test_the_first_run_grades_the_lessons_handed_in_with_marks_pending(term):
    run = term["runs"]["first"]
    assert run["rc"] == 0, run["out"][-3000:]
    assert "lessons graded: 01_warmup, 05_exercises, 07_heads_that_learn" in run["out"]
    auto05, written = _points(EXERCISES)
    top01, top07 = _points(WARMUP)[0], _points(HEADS)[0]
    ngada = run["rows"][_sid("ngada")]
    assert (_score(run, "ngada", WARMUP), _score(run, "ngada", HEADS)) == (f"{top01:g}", f"{top07:g}")
    assert ngada[f"{EXERCISES} status"] == "pending manual" and ngada[f"{EXERCISES} pending"] == \
        f"{sum(written.values()):g}" and _score(run, "ngada", EXERCISES) == f"{auto05:g}"
    assert float(_score(run, "okafor", WARMUP)) < top01
    ruiz = run["rows"][_sid("ruiz")]
    assert all(f"{lesson}: not attempted" in ruiz["flags"] for lesson in LESSONS)
    lee = run["rows"][_sid("lee")]
    assert lee[f"{HEADS} status"] == "missing" and _score(run, "lee", HEADS) == "0"
    assert "What stopped your notebook" in run["pages"][f"{_sid('lee')}/{WARMUP}.html"]
    assert "timeout" in run["rows"][_sid("khan")]["flags"]
    ito = run["rows"][_sid("ito")]
    assert (ito[f"{WARMUP} status"], ito[f"{HEADS} status"]) == ("missing", "missing")
    _agree(run, LESSONS)


def test_marks_are_folded_in_without_grading_anything(term):
    first, run, given = term["runs"]["first"], term["runs"]["marked"], term["given"]
    assert run["rc"] == 0 and "graded 0 notebooks" in run["out"], run["out"][-3000:]
    assert set(given) == {_sid(s) for s in CANVAS_IDS}  # everyone handed lesson 05 in
    for sid, points in given.items():
        row = run["rows"][sid]
        assert row[f"{EXERCISES} status"] == "graded" and row[f"{EXERCISES} pending"] == "0"
        assert float(row[f"{EXERCISES} score"]) == float(first["rows"][sid][f"{EXERCISES} score"]) + \
            sum(points.values())
        assert f"{sid} {EXERCISES}: {first['rows'][sid][f'{EXERCISES} score']} -> {row[f'{EXERCISES} score']}" in \
            run["out"]
    assert "Not what W_O does." in run["pages"][f"{_sid('okafor')}/{EXERCISES}.html"]
    _agree(run, LESSONS)


def test_another_set_of_lessons_keeps_every_mark(term):
    marked, run = term["runs"]["marked"], term["runs"]["only05"]
    assert run["rc"] == 0 and "graded 0 notebooks" in run["out"], run["out"][-3000:]
    assert {sid: row[f"{EXERCISES} score"] for sid, row in run["rows"].items()} == \
        {sid: row[f"{EXERCISES} score"] for sid, row in marked["rows"].items()}
    assert f"{WARMUP} status" not in next(iter(run["rows"].values()))
    assert _canvas(run)["max"].keys() == {EXERCISES}
    _agree(run, (EXERCISES,))


def test_a_resubmitted_answer_goes_back_to_pending_and_every_other_mark_stays(term):
    marked, run, given = term["runs"]["marked"], term["runs"]["resubmitted"], term["given"]
    assert run["rc"] == 0, run["out"][-3000:]
    assert "graded 1 notebooks" in run["out"]  # ngada's lesson 05
    _, written = _points(EXERCISES)
    ngada = run["rows"][_sid("ngada")]
    assert ngada[f"{EXERCISES} status"] == "pending manual"
    assert ngada[f"{EXERCISES} pending"] == f"{written[CHANGED_ANSWER]:g}"
    assert float(ngada[f"{EXERCISES} score"]) == float(marked["rows"][_sid("ngada")][f"{EXERCISES} score"]) - \
        given[_sid("ngada")][CHANGED_ANSWER]
    assert CHANGED_ANSWER in run["out"]  # the summary says which mark went back to pending
    for sid, row in run["rows"].items():
        if sid != _sid("ngada"):
            assert {k: v for k, v in row.items() if "score" in k or "status" in k} == \
                {k: v for k, v in marked["rows"][sid].items() if "score" in k or "status" in k}, sid
    _agree(run, LESSONS)

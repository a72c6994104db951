"""An instructor's whole term, as Canvas gives it (one "Download Submissions" zip per assignment), through the real
grading command, with nothing lost.

Six students: model answers (ngada), a catalogued bug in lesson 01 (okafor), untouched notebooks (ruiz), a
SyntaxError in lesson 01 and no lesson 05 (lee), a softmax that returns its scores (khan), no lesson 01 (ito). In one
output folder, as docs/grading.md tells it:

1. ``week1``: lesson 01's zip, ``make grade`` (no ``LESSONS``);
2. ``week3``: lesson 05's zip into the same OUT: every lesson-01 grade, page and import cell stays;
3. the written answers of lesson 05 are marked through nbgrader's API, as formgrader saves them (ito gets 0 on
   every one: pending -> graded at the same score);
4. ``marked``: lesson 05's zip again: the marks folded in, nothing graded, every change told with its reason;
5. ``week5``: lesson 08's zip (three students), one of them late;
6. ``late01``: lesson 01's zip downloaded again after the deadline: okafor's late resubmission (Canvas's ``_LATE_``
   and ``-1``) graded, nobody else's; then ``closed``: ``--close 01`` counts ito's lesson 01 missing, 0, listed.

Then the same round trip with Moodle: each assignment's download (participant ids of that assignment) into one OUT,
the grading worksheets downloaded from both assignments put in ``OUT/lms-templates/``, lesson 05 marked, and both
worksheets come back filled, as Moodle's upload reads them.

At each step: grades.csv, the report, the feedback pages and Canvas's import file agree, and every earlier grade and
mark is as it was.
"""

from __future__ import annotations

import csv
import html
import re
import subprocess
import sys
import zipfile
from datetime import datetime
from pathlib import Path

import lms_files
import pytest
from run_once import once

from autograder import bugs, course
from autograder.course import answers, notebooks
from autograder.grading.records.settings import COURSE_ID
from autograder.grading.reports import lms_export

pytestmark = [pytest.mark.grading, pytest.mark.slow]
WARMUP, EXERCISES, TODAY = "01_warmup", "05_exercises", "08_todays_models"
LESSONS = (WARMUP, EXERCISES, TODAY)
BUG = next(b for b in bugs.CATALOG if b.lesson == WARMUP and b.function == "softmax")
SYNTAX_ERROR = "def softmax(x, axis=-1)\n    return x\n"
UNNORMALISED = "def softmax(x, axis=-1):\n    return x\n"  # a wrong result outside the bug catalogue
CANVAS_IDS = {"ngada": 31, "okafor": 42, "ruiz": 57, "lee": 64, "khan": 77, "ito": 88}
CHANGED_ANSWER = "explain_w_o"
ZERO_MARKS = "ito"  # every written answer marked 0: pending -> graded at the same score


def _week(lesson: str) -> dict:
    """{student: notebook} of one assignment's download."""
    if lesson == WARMUP:
        return {"ngada": answers.fill(WARMUP), "okafor": answers.fill(WARMUP, {BUG.function: BUG.source}),
                "ruiz": answers.fill(WARMUP, complete=False), "lee": answers.fill(WARMUP, {"softmax": SYNTAX_ERROR}),
                "khan": answers.fill(WARMUP, {"softmax": UNNORMALISED})}
    if lesson == EXERCISES:
        full = answers.fill(EXERCISES)
        return {"ngada": full, "okafor": full, "ruiz": answers.fill(EXERCISES, complete=False), "khan": full,
                "ito": full}
    return {"ngada": answers.fill(TODAY), "ito": answers.fill(TODAY), "khan": answers.fill(TODAY, complete=False)}


def _sid(student: str) -> str:
    return f"{student}_{CANVAS_IDS[student]}"


def _points(lesson: str) -> tuple:
    """(autograded points, {written answer: points}) of a lesson, from its source."""
    cells = [c.metadata.get("nbgrader", {}) for c in notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells]
    manual = {m["grade_id"]: m["points"] for m in cells if m.get("grade") and m.get("solution")}
    return sum(m["points"] for m in cells if m.get("grade") and not m.get("solution")), manual


def _zip(base: Path, lesson: str, work: dict, name: str, late=(), copy="") -> Path:
    """Canvas's zip of one assignment: ``<name>[_LATE]_<user id>_<submission id>_<file>``; ``copy``: the ``-1``
    Canvas adds to a resubmitted file's name."""
    archive = base / name
    with zipfile.ZipFile(archive, "w") as zf:
        for number, (student, nb) in enumerate(sorted(work.items())):
            marker = "_LATE" if student in late else ""
            path = base / "files" / name / (f"{student}{marker}_{CANVAS_IDS[student]}_{900 + number}_{lesson}"
                                            f"{copy if student in late else ''}.ipynb")
            notebooks.write_notebook(nb, path)
            zf.write(path, path.name)
    return archive


def _run(archive: Path, out: Path, *options) -> dict:
    run = _run_any(archive, out, *options)
    run["canvas"] = _table(out / lms_export.FOLDER / "canvas.csv")
    return run


def _table(path: Path) -> list:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def _run_any(archive: Path, out: Path, *options) -> dict:
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(archive), "--out", str(out), "--workers",
                           "2", "--timeout", "20", "--quiet", *options],
                          cwd=course.ROOT, env=notebooks.nbgrader_env(), capture_output=True, text=True, timeout=1200)
    header, *rows = _table(out / "grades.csv")
    pages = {p.relative_to(out / "feedback").as_posix(): html.unescape(p.read_text())
             for p in (out / "feedback").glob("*/*.html")}
    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr,
            "rows": {r[0]: dict(zip(header, r)) for r in rows},
            "report": html.unescape((out / "report.html").read_text()), "pages": pages,
            "insights": html.unescape((out / "insights.html").read_text())}


def _mark(out: Path) -> dict:
    """Mark every written answer of lesson 05, as formgrader saves a mark: full points, but okafor gets 0 for
    explain_w_o and ito 0 for every answer; an answer left blank nbgrader marked 0 itself. Returns {student id:
    points given}."""
    from nbgrader.api import Gradebook

    _, written = _points(EXERCISES)
    given = {}
    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}", COURSE_ID) as gb:
        for sub in gb.find_assignment(EXERCISES).submissions:
            points = {}
            for cell, top in written.items():
                grade = gb.find_grade(cell, EXERCISES, EXERCISES, sub.student_id)
                if not grade.needs_manual_grade:  # an answer left as handed out: nbgrader gave it 0 itself
                    continue
                points[cell] = 0.0 if sub.student_id == _sid(ZERO_MARKS) or (
                    sub.student_id == _sid("okafor") and cell == CHANGED_ANSWER) else float(top)
                grade.manual_score, grade.needs_manual_grade = points[cell], False
            if points:
                given[sub.student_id] = points
        gb.find_comment(CHANGED_ANSWER, EXERCISES, EXERCISES, _sid("okafor")).manual_comment = "Not what W_O does."
        gb.db.commit()
    return given


def _term(base: Path) -> dict:
    out = base / "out"
    runs = {"week1": _run(_zip(base, WARMUP, _week(WARMUP), "01_warmup.zip"), out)}
    runs["week3"] = _run(_zip(base, EXERCISES, _week(EXERCISES), "05_exercises.zip"), out)
    given = _mark(out)
    runs["marked"] = _run(base / "05_exercises.zip", out)
    runs["week5"] = _run(_zip(base, TODAY, _week(TODAY), "08_todays_models.zip", late={"khan"}), out)
    again = {**_week(WARMUP), "okafor": answers.fill(WARMUP)}  # okafor fixed the bug after the deadline
    runs["late01"] = _run(_zip(base, WARMUP, again, "01_warmup-again.zip", late={"okafor"}, copy="-1"), out)
    runs["closed"] = _run(base / "01_warmup-again.zip", out, "--close", "01")
    return {"runs": runs, "given": given}


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    return once(tmp_path_factory, "instructor-term", _term)


def _score(run, student, lesson):
    return run["rows"][_sid(student)][f"{lesson} score"]


def _canvas(run) -> dict:
    """{Canvas id: {lesson: score}} of the import file, and its Points Possible row under 'max'."""
    header, points, *rows = run["canvas"]
    lessons = [h.split(" (")[0] for h in header[5:]]
    return {"max": dict(zip(lessons, points[5:])), **{r[1]: dict(zip(lessons, r[5:])) for r in rows}}


def _text(page: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", page).split())


def _report_total(run, student) -> str:
    """The total cell of a student's row in report.html."""
    row = re.search(rf"<tr><td>{_sid(student)}</td>(.*?)</tr>", run["report"], re.S).group(1)
    return re.findall(r"<td>(.*?)</td>", row, re.S)[-2]


def _kept(earlier, later, lessons) -> None:
    """Every (student, lesson) of ``lessons`` in ``earlier`` is the same in ``later``: score, status, page."""
    for sid, row in earlier["rows"].items():
        for lesson in lessons:
            for col in ("status", "score", "max", "manual", "pending"):
                assert later["rows"][sid][f"{lesson} {col}"] == row[f"{lesson} {col}"], (sid, lesson, col)
            page = f"{sid}/{lesson}.html"
            assert later["pages"].get(page) == earlier["pages"].get(page), (sid, lesson)


def _agree(run, lessons) -> None:
    """grades.csv, Canvas's import file, the report and the feedback pages tell the same story."""
    assert run["rc"] == 0, run["out"][-3000:]
    canvas = _canvas(run)
    assert set(canvas["max"]) == set(lessons)
    for sid, row in run["rows"].items():
        lms = row["lms id"]
        counted = []
        for lesson in lessons:
            status = row[f"{lesson} status"]
            final = status in ("graded", "missing")
            assert canvas[lms][lesson] == (row[f"{lesson} score"] if final else ""), (sid, lesson)
            assert canvas["max"][lesson] == row[f"{lesson} max"]
            assert (f"{sid}/{lesson}.html" in run["pages"]) == (status != "not handed in"), (sid, lesson)
            if status == "not handed in":
                assert row[f"{lesson} score"] == "" and "not handed in" in run["report"]
            else:
                counted.append(lesson)
        assert float(row["total"]) == sum(float(row[f"{lesson} score"]) for lesson in counted)
        assert float(row["max total"]) == sum(float(row[f"{lesson} max"]) for lesson in counted)
        if float(row["pending"]):
            assert row["percent"] == ""
        else:
            assert row["percent"] == f"{100 * float(row['total']) / float(row['max total']):.1f}"
        assert sid in run["report"]


def test_the_first_download_grades_its_one_lesson(term):
    run = term["runs"]["week1"]
    _agree(run, (WARMUP,))
    top01 = _points(WARMUP)[0]
    assert _score(run, "ngada", WARMUP) == f"{top01:g}" and float(_score(run, "okafor", WARMUP)) < top01
    assert "What stopped your notebook" in run["pages"][f"{_sid('lee')}/{WARMUP}.html"]
    assert float(_score(run, "khan", WARMUP)) < top01
    assert _sid("ito") not in run["rows"]  # not in this download, not yet in the term


def test_a_second_assignment_s_download_keeps_every_grade_and_page_of_the_first(term):
    week1, run = term["runs"]["week1"], term["runs"]["week3"]
    _agree(run, (WARMUP, EXERCISES))
    _kept(week1, run, (WARMUP,))
    assert run["rows"][_sid("ito")][f"{WARMUP} status"] == "not handed in"
    assert run["rows"][_sid("lee")][f"{EXERCISES} status"] == "not handed in"
    changed = [line for line in run["out"].splitlines() if line.startswith("  ") and " -> " in line]
    assert len(changed) == 5 and all(f"{EXERCISES}: - -> " in line for line in changed), changed
    assert "no score" not in run["out"] and "no score or state changed" not in run["report"]
    auto05, written = _points(EXERCISES)
    ngada = run["rows"][_sid("ngada")]
    assert ngada[f"{EXERCISES} status"] == "pending manual" and ngada[f"{EXERCISES} pending"] == \
        f"{sum(written.values()):g}" and _score(run, "ngada", EXERCISES) == f"{auto05:g}"
    page = run["pages"][f"{_sid('ngada')}/{EXERCISES}.html"]  # pending is never shown as 0, nor counted
    for cell, top in written.items():
        assert f"Written response {cell} (awaiting your instructor ({float(top):.1f} points))" in _text(page), cell
    assert "Score: 0.0 / " not in page and f"{float(sum(written.values())):.1f} points awaiting your instructor" in page
    assert f"{_sid('ngada')}</td>" in run["report"] and "percent when every answer is marked" in run["report"]
    assert "%)" not in _report_total(run, "ngada")


def test_marks_are_folded_in_without_grading_anything_and_each_is_told(term):
    week3, run, given = term["runs"]["week3"], term["runs"]["marked"], term["given"]
    _agree(run, (WARMUP, EXERCISES))
    assert "graded 0 notebooks" in run["out"], run["out"][-3000:]
    _kept(week3, run, (WARMUP,))
    assert set(given) == {_sid(s) for s in ("ngada", "okafor", "khan", "ito")}  # ruiz's answers are as handed out
    for sid, points in given.items():
        row, old = run["rows"][sid], week3["rows"][sid][f"{EXERCISES} score"]
        assert row[f"{EXERCISES} status"] == "graded" and row[f"{EXERCISES} pending"] == "0"
        assert float(row[f"{EXERCISES} score"]) == float(old) + sum(points.values())
        told = f"  {sid} {EXERCISES}: {old} -> {row[f'{EXERCISES} score']} ("
        line = next(line for line in run["out"].splitlines() if line.startswith(told))
        assert "pending manual -> graded" in line and "your marks" in line, line
    same = run["rows"][_sid(ZERO_MARKS)][f"{EXERCISES} score"]
    assert same == week3["rows"][_sid(ZERO_MARKS)][f"{EXERCISES} score"]  # told although the score did not move
    assert "Not what W_O does." in run["pages"][f"{_sid('okafor')}/{EXERCISES}.html"]
    _, written = _points(EXERCISES)
    page = _text(run["pages"][f"{_sid('ngada')}/{EXERCISES}.html"])
    assert "awaiting your instructor" not in page
    for cell, top in written.items():
        assert f"Written response {cell} (Score: {float(top):.1f} / {float(top):.1f})" in page, cell
    total = float(run["rows"][_sid("ngada")]["total"]) / float(run["rows"][_sid("ngada")]["max total"])
    assert f"({100 * total:.0f}%)" in _report_total(run, "ngada")


def test_a_third_download_keeps_both_earlier_lessons_and_keeps_late_work_marked(term):
    marked, run = term["runs"]["marked"], term["runs"]["week5"]
    _agree(run, LESSONS)
    _kept(marked, run, (WARMUP, EXERCISES))
    khan = run["rows"][_sid("khan")]
    assert khan[f"{TODAY} late"] == "late" and f"{TODAY}: handed in late" in khan["flags"]
    assert run["rows"][_sid("ngada")][f"{TODAY} late"] == ""
    assert run["rows"][_sid("okafor")][f"{TODAY} status"] == "not handed in"


def test_a_late_resubmission_is_graded_alone_and_closing_a_lesson_is_listed_student_by_student(term):
    week5, run, closed = term["runs"]["week5"], term["runs"]["late01"], term["runs"]["closed"]
    _agree(run, LESSONS)
    assert "graded 1 notebooks" in run["out"], run["out"][-3000:]
    okafor = run["rows"][_sid("okafor")]
    assert okafor[f"{WARMUP} score"] == f"{_points(WARMUP)[0]:g}" and okafor[f"{WARMUP} late"] == "late"
    assert f"{_sid('okafor')} {WARMUP}: {week5['rows'][_sid('okafor')][f'{WARMUP} score']} -> " in run["out"]
    assert "handed in again" in run["out"]
    _kept(week5, run, (EXERCISES, TODAY))
    others = {k: v for k, v in week5["rows"].items() if k != _sid("okafor")}
    _kept({"rows": others, "pages": week5["pages"]}, run, (WARMUP,))
    assert run["rows"][_sid("ito")][f"{WARMUP} status"] == "not handed in"
    _agree(closed, LESSONS)
    ito = closed["rows"][_sid("ito")]
    assert (ito[f"{WARMUP} status"], ito[f"{WARMUP} score"]) == ("missing", "0")
    assert f"  {_sid('ito')} {WARMUP}: - -> 0 missing (lesson closed: never handed in)" in closed["out"]
    assert "No notebook for 01_warmup" in closed["pages"][f"{_sid('ito')}/{WARMUP}.html"]
    assert closed["rows"][_sid("lee")][f"{EXERCISES} status"] == "not handed in"  # only lesson 01 was closed
    _kept(run, closed, (EXERCISES, TODAY))


# ------------------------------------------------------------------ the same round trip with Moodle's downloads
MOODLE = {"Chi Ngada": {WARMUP: 4101, EXERCISES: 5101}, "Amaka Okafor": {WARMUP: 4102, EXERCISES: 5102}}
GRADED_AT = datetime(2026, 10, 20, 9, 15)  # Moodle's "Last modified (grade)" of the worksheets, kept as exported


def _moodle_download(base: Path, lesson: str) -> Path:
    """Moodle's "Download all submissions" of one assignment: a folder per participant, ids of that assignment."""
    root = base / f"moodle-{lesson}"
    for name, ids in MOODLE.items():
        nb = answers.fill(lesson) if name == "Chi Ngada" else answers.fill(lesson, complete=False)
        notebooks.write_notebook(nb, root / f"{name}_{ids[lesson]}_assignsubmission_file_" / f"{lesson}.ipynb")
    return root


def _worksheet(lesson: str) -> bytes:
    return lms_files.moodle_worksheet(
        [(ids[lesson], name, f"{name.split()[0].lower()}@uni.example", "Submitted for grading", None, True,
          datetime(2026, 10, 1, 10, 30), GRADED_AT, "") for name, ids in MOODLE.items()], _points(lesson)[0] +
        sum(_points(lesson)[1].values()))


def _moodle_term(base: Path) -> dict:
    out = base / "out"
    first = _run_any(_moodle_download(base, WARMUP), out)
    second = _run_any(_moodle_download(base, EXERCISES), out)
    (out / lms_export.TEMPLATES).mkdir()
    for lesson in (WARMUP, EXERCISES):  # the worksheets as the instructor downloads them from each assignment
        (out / lms_export.TEMPLATES / f"Grades-MHA-{lesson}.csv").write_bytes(_worksheet(lesson))
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}", COURSE_ID) as gb:
        for cell, top in _points(EXERCISES)[1].items():
            for sub in gb.find_assignment(EXERCISES).submissions:
                grade = gb.find_grade(cell, EXERCISES, EXERCISES, sub.student_id)
                if grade.needs_manual_grade:
                    grade.manual_score, grade.needs_manual_grade = float(top), False
        gb.db.commit()
    marked = _run_any(base / f"moodle-{EXERCISES}", out)
    files = {p.name: p.read_bytes().decode("utf-8") for p in (out / lms_export.FOLDER).glob("*.csv")}
    impostor = _run_any(_impostor_download(base), out)
    after = {p.name: p.read_bytes().decode("utf-8") for p in (out / lms_export.FOLDER).glob("*.csv")}
    return {"first": first, "second": second, "marked": marked, "files": files, "impostor": impostor,
            "after": after}


IMPOSTOR = {WARMUP: 4199, EXERCISES: 5199}  # a participant who renamed herself "Chi Ngada" in both assignments


def _impostor_download(base: Path) -> Path:
    """Both assignments downloaded again into one folder, after another participant took Chi Ngada's full name:
    her lesson 01 untouched, her lesson 05 a copy of Ngada's whole notebook (written answers included)."""
    root = base / "moodle-impostor"
    for lesson in (WARMUP, EXERCISES):
        for name, ids in MOODLE.items():
            nb = answers.fill(lesson) if name == "Chi Ngada" else answers.fill(lesson, complete=False)
            notebooks.write_notebook(nb, root / f"{name}_{ids[lesson]}_assignsubmission_file_" / f"{lesson}.ipynb")
        copied = answers.fill(lesson, complete=lesson == EXERCISES)
        notebooks.write_notebook(copied, root / f"Chi Ngada_{IMPOSTOR[lesson]}_assignsubmission_file_" /
                                 f"{lesson}.ipynb")
    return root


@pytest.fixture(scope="module")
def moodle_term(tmp_path_factory):
    return once(tmp_path_factory, "moodle-term", _moodle_term)


def test_moodle_s_per_assignment_downloads_and_worksheets_round_trip(moodle_term):
    first, second, marked = moodle_term["first"], moodle_term["second"], moodle_term["marked"]
    for run in (first, second, marked):
        assert run["rc"] == 0, run["out"][-3000:]
    _kept(first, second, (WARMUP,))
    _kept(first, marked, (WARMUP,))
    assert "graded 0 notebooks" in marked["out"]
    for lesson in (WARMUP, EXERCISES):
        read = lms_files.moodle_import(moodle_term["files"][f"moodle-{lesson}.csv"].encode("utf-8"))
        assert set(read) == {str(ids[lesson]) for ids in MOODLE.values()}  # each assignment's own participant ids
        for name, ids in MOODLE.items():
            row = marked["rows"][next(sid for sid, r in marked["rows"].items() if r["folder"] == name)]
            assert row[f"{lesson} status"] == "graded"
            got = read[str(ids[lesson])]
            assert got["grade"] == float(row[f"{lesson} score"]), (lesson, name)
            assert got["modified"] == lms_files.moodle_date(GRADED_AT)  # Moodle takes the row only if it is


def test_a_moodle_participant_who_takes_another_s_name_is_graded_apart_and_takes_no_grade_or_mark(moodle_term):
    """Moodle: another participant renamed herself "Chi Ngada". Ngada stays the student graded before (her folder,
    grades and marks as they were, her worksheet rows hers); the newcomer is graded apart in each assignment by
    participant id, flagged, with her own work's score: 0 for an untouched lesson 01, and her copy of Ngada's
    lesson 05 awaits the instructor's marks instead of inheriting Ngada's."""
    marked, impostor = moodle_term["marked"], moodle_term["impostor"]
    assert impostor["rc"] == 0, impostor["out"][-3000:]
    _kept(marked, impostor, (WARMUP, EXERCISES))
    rows = {r["folder"]: r for r in impostor["rows"].values()}
    assert rows["Chi Ngada"]["flags"]  # told another participant took her name
    newcomer_01, newcomer_05 = rows["Chi Ngada_4199"], rows["Chi Ngada_5199"]
    assert newcomer_01[f"{WARMUP} status"] == "graded" and float(newcomer_01[f"{WARMUP} score"]) == 0.0
    assert newcomer_05[f"{EXERCISES} status"] == "pending manual"
    assert float(newcomer_05[f"{EXERCISES} manual"]) == 0.0
    assert float(newcomer_05[f"{EXERCISES} pending"]) == sum(_points(EXERCISES)[1].values())
    assert float(rows["Chi Ngada"][f"{EXERCISES} manual"]) == sum(_points(EXERCISES)[1].values())
    for row, lesson in ((newcomer_01, WARMUP), (newcomer_05, EXERCISES)):
        said = ("4 Moodle participants share the name 'Chi Ngada' (participant ids 4101, 4199, 5101, 5199); "
                "graded apart by participant id: check which is whom")
        assert said in row["flags"] and row["lms id"] == str(IMPOSTOR[lesson])
    for lesson in (WARMUP, EXERCISES):
        read = lms_files.moodle_import(moodle_term["after"][f"moodle-{lesson}.csv"].encode("utf-8"))
        assert read[str(MOODLE["Chi Ngada"][lesson])]["grade"] == float(rows["Chi Ngada"][f"{lesson} score"])

"""An LMS's download in, its import file out, through the real grading command.

Canvas's "Download Submissions" zip (flat files ``<name>_<user id>_<submission id>_<file>``, one of them a
resubmission Canvas renamed ``-1``, one marked ``_LATE_``) of lesson 01: a model answer, an untouched notebook handed
in late, and a student with no notebook for the lesson but one for another. The instructor's gradebook export is in
``OUT/lms-templates/`` before the run (built as Canvas writes it: ``tests/helpers/lms_files.py``). The command reads
the zip as Canvas's, grades each student under their Canvas user id, keeps the id and the late mark in grades.csv and
the report, and writes ``lms-import/canvas.csv``: the export with lesson 01's column filled from grades.csv, matched
to its assignment by name, every other cell as exported.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import zipfile
from pathlib import Path

import lms_files
import pytest
from run_once import once

from autograder import course
from autograder.course import answers, notebooks
from autograder.grading.reports import lms_export

LESSON = "01_warmup"
pytestmark = pytest.mark.grading
FILES = {"ngada_31_501_01_warmup-1.ipynb": answers.fill, "okafoamaka_LATE_42_502_01_warmup.ipynb":
         lambda lesson: answers.fill(lesson, complete=False), "ruizcarla_57_503_02_multi_head.ipynb": None}
WARMUP_COLUMN = 5  # "Lesson 1: Warm-up (7001)", after Student, ID, SIS User ID, SIS Login ID, Section


def _maximum(lesson: str) -> float:
    cells = [c.metadata.get("nbgrader", {}) for c in notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells]
    return float(sum(m["points"] for m in cells if m.get("grade")))


def _export() -> bytes:
    """The instructor's gradebook export: the three students, one Canvas has that the download has not, scores
    Canvas already holds (ngada's 5.00, replaced by her final score and listed) (ruiz's 3.00: she has not handed lesson 01 in, so the grader has no score of hers to put
    there, and the LMS's stays)."""
    students = [("Ngada, Chi", 31, "s31", "ngada@uni.example", "MHA 101", {"7001": "5.00"}),
                ("Okafor, Amaka", 42, "s42", "okafor@uni.example", "MHA 101", {"7002": "12.00"}),
                ("Ruiz, Carla", 57, "s57", "ruiz@uni.example", "MHA 101, evening", {"7001": "3.00"}),
                ("Lee, Min", 64, "s64", "lee@uni.example", "MHA 101", {"7001": "8.00"})]
    return lms_files.canvas_gradebook(students, [("Lesson 1: Warm-up", "7001", _maximum(LESSON)),
                                                 ("Lesson 2: Multi-head mechanism", "7002", 20.0),
                                                 ("Project", "7900", 50.0)])


def _batch(base: Path) -> dict:
    archive, out = base / "submissions.zip", base / "out"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, make in FILES.items():
            nb = make(LESSON) if make else answers.fill("02_multi_head", complete=False)
            notebooks.write_notebook(nb, base / name)
            zf.write(base / name, name)
    (out / lms_export.TEMPLATES).mkdir(parents=True)
    (out / lms_export.TEMPLATES / "2026-10-05T1200_Grades-MHA_101.csv").write_bytes(_export())
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(archive), "--out", str(out), "--lessons",
                           LESSON, "--workers", "2", "--quiet"], cwd=course.ROOT, env=notebooks.nbgrader_env(),
                          capture_output=True, text=True, timeout=900)

    def read(path):
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.reader(fh))

    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr, "grades": read(out / "grades.csv"),
            "canvas": (out / lms_export.FOLDER / "canvas.csv").read_bytes().decode("utf-8"),
            "report": (out / "report.html").read_text()}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return once(tmp_path_factory, "canvas-download", _batch)


def _grades(run) -> dict:
    header, *rows = run["grades"]
    return {r[header.index("student")]: dict(zip(header, r)) for r in rows}


def test_a_canvas_zip_is_graded_per_canvas_user_with_the_id_and_late_mark_kept(run):
    assert run["rc"] == 0, run["out"][-3000:]
    grades = _grades(run)
    assert set(grades) == {"ngada_31", "okafoamaka_42", "ruizcarla_57"}
    assert {s: g["lms id"] for s, g in grades.items()} == {"ngada_31": "31", "okafoamaka_42": "42",
                                                           "ruizcarla_57": "57"}
    full = grades["ngada_31"][f"{LESSON} max"]
    assert grades["ngada_31"][f"{LESSON} score"] == full and grades["ngada_31"][f"{LESSON} status"] == "graded"
    assert float(grades["okafoamaka_42"][f"{LESSON} score"]) < float(full)
    assert grades["ruizcarla_57"][f"{LESSON} status"] == "not handed in"  # lesson 02 only: no score, never 0
    assert "misnamed" not in grades["ngada_31"]["flags"]  # Canvas's "-1", not the learner's naming
    assert {s: g[f"{LESSON} late"] for s, g in grades.items()} == {"ngada_31": "", "okafoamaka_42": "late",
                                                                   "ruizcarla_57": ""}
    assert "Canvas" in run["report"] and '<b class="late">late</b>' in run["report"]


def test_the_canvas_import_file_is_the_export_filled_from_grades_csv(run):
    export = _export().decode("utf-8")
    got = run["canvas"]
    read = lms_files.canvas_import(got.encode("utf-8"))
    grades = {g["lms id"]: g for g in _grades(run).values()}
    assert {sid: cells[WARMUP_COLUMN] for sid, cells in read["students"].items()} == {
        "31": grades["31"][f"{LESSON} score"], "42": grades["42"][f"{LESSON} score"], "57": "3.00",
        "64": "8.00"}  # ruiz: not handed in, lee: not in the download; both as exported
    assert read["points"][WARMUP_COLUMN] == f"{_maximum(LESSON):.2f}"
    # the header, the Points Possible row and every cell outside lesson 01's column, byte for byte
    old, new = export.split("\n"), got.split("\n")
    assert got.startswith("\ufeff") and old[:2] == new[:2] and old[5:] == new[5:]
    for before, after in zip(old[2:5], new[2:5]):
        a, b = next(csv.reader([before])), next(csv.reader([after]))
        assert a[:WARMUP_COLUMN] + a[WARMUP_COLUMN + 1:] == b[:WARMUP_COLUMN] + b[WARMUP_COLUMN + 1:]
        assert after.startswith(before.split(",", 2)[0] + ",")  # the quoted "<last>, <first>" as exported
    assert "01_warmup -> 'Lesson 1: Warm-up (7001)' (matched by name)" in run["out"]
    assert f"ngada_31 01_warmup 5.00 -> {grades['31'][f'{LESSON} score']}" in run["out"]
    assert "ruizcarla_57 01_warmup 3.00" not in run["out"]

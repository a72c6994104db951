"""An LMS's download in, its import file out, through the real grading command.

Canvas's "Download Submissions" zip (flat files ``<name>_<user id>_<submission id>_<file>``, one of them a
resubmission Canvas renamed ``-1``) of lesson 01: a model answer, an untouched notebook, and a student with no
notebook for the lesson but one for another. The command reads the zip as Canvas's, grades each student under their
Canvas user id, keeps the id in grades.csv and writes ``lms-import/canvas.csv``, which must agree with grades.csv.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from run_once import once

from autograder import course
from autograder.course import answers, notebooks
from autograder.grading import lms_export

LESSON = "01_warmup"
pytestmark = pytest.mark.grading
FILES = {"ngada_31_501_01_warmup-1.ipynb": answers.fill, "okafoamaka_42_502_01_warmup.ipynb":
         lambda lesson: answers.fill(lesson, complete=False), "ruizcarla_57_503_02_multi_head.ipynb": None}


def _batch(base: Path) -> dict:
    archive, out = base / "submissions.zip", base / "out"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, make in FILES.items():
            nb = make(LESSON) if make else answers.fill("02_multi_head", complete=False)
            notebooks.write_notebook(nb, base / name)
            zf.write(base / name, name)
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(archive), "--out", str(out), "--lessons",
                           LESSON, "--workers", "2", "--quiet"], cwd=course.ROOT, env=notebooks.nbgrader_env(),
                          capture_output=True, text=True, timeout=900)

    def read(path):
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.reader(fh))

    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr, "grades": read(out / "grades.csv"),
            "canvas": read(out / lms_export.FOLDER / "canvas.csv"), "report": (out / "report.html").read_text()}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return once(tmp_path_factory, "canvas-download", _batch)


def test_a_canvas_zip_is_graded_per_canvas_user_with_the_id_kept(run):
    assert run["rc"] == 0, run["out"][-3000:]
    header, *rows = run["grades"]
    grades = {r[header.index("student")]: dict(zip(header, r)) for r in rows}
    assert set(grades) == {"ngada_31", "okafoamaka_42", "ruizcarla_57"}
    assert {s: g["lms id"] for s, g in grades.items()} == {"ngada_31": "31", "okafoamaka_42": "42",
                                                           "ruizcarla_57": "57"}
    full = grades["ngada_31"][f"{LESSON} max"]
    assert grades["ngada_31"][f"{LESSON} score"] == full and grades["ngada_31"][f"{LESSON} status"] == "graded"
    assert float(grades["okafoamaka_42"][f"{LESSON} score"]) < float(full)
    assert grades["ruizcarla_57"][f"{LESSON} status"] == "not handed in"  # lesson 02 only: no score, never 0
    assert "misnamed" not in grades["ngada_31"]["flags"]  # Canvas's "-1", not the learner's naming
    assert "Canvas" in run["report"]


def test_the_canvas_import_file_matches_grades_csv(run):
    header, points, *rows = run["canvas"]
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", LESSON]
    g_header, *g_rows = run["grades"]
    grades = {r[g_header.index("lms id")]: dict(zip(g_header, r)) for r in g_rows}
    assert points[0] == "Points Possible" and points[5] == grades["31"][f"{LESSON} max"]
    assert {r[1]: r[5] for r in rows} == {lms_id: g[f"{LESSON} score"] for lms_id, g in grades.items()}

"""The class decides the lessons: by default only the lessons some student handed in are graded and counted.

One class, three runs of the grading command into one output folder: alice hands in lessons 01 and 03, bob lesson
01 only. Run 1 (no ``--lessons``, as ``make grade`` without ``LESSONS``) grades and counts 01 and 03; run 2
(``--lessons 01 04``, as ``LESSONS="01 04"``) counts lesson 04, which no one handed in, as missing for everyone and
removes the lesson 03 pages; run 3 (no ``--lessons`` again) brings lesson 03 back, pages included.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from run_once import once

from autograder import course
from autograder.course import answers, notebooks

pytestmark = pytest.mark.grading
HANDED_IN = {"alice": ("01_warmup", "03_param_count"), "bob": ("01_warmup",)}


def _cli(klass: Path, out: Path, *lessons) -> dict:
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(klass), "--out", str(out), "--quiet",
                           "--workers", "2", *(["--lessons", *lessons] if lessons else [])], cwd=course.ROOT,
                          env=notebooks.nbgrader_env(), capture_output=True, text=True, timeout=900)
    with (out / "grades.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows = {r["student"]: r for r in reader}
    pages = sorted(p.relative_to(out / "feedback").as_posix() for p in (out / "feedback").glob("*/*.html"))
    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr, "rows": rows, "header": reader.fieldnames,
            "pages": pages}


def _batch(base: Path) -> dict:
    klass, out = base / "class", base / "out"
    for student, lessons in HANDED_IN.items():
        for lesson in lessons:
            notebooks.write_notebook(answers.fill(lesson), klass / student / f"{lesson}.ipynb")
    return {"default": _cli(klass, out), "named": _cli(klass, out, "01", "04"), "again": _cli(klass, out)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return once(tmp_path_factory, "lessons-graded", _batch)


def _lessons(run) -> list:
    return sorted({column.split(" ")[0] for column in run["header"] if column.endswith(" status")})


def _max(lesson: str) -> float:
    nb = notebooks.read_source(course.SOLUTIONS / f"{lesson}.py")
    return sum(c.metadata.get("nbgrader", {}).get("points", 0) for c in nb.cells
               if c.metadata.get("nbgrader", {}).get("grade"))


def test_by_default_the_lessons_handed_in_are_graded_and_counted(runs):
    run = runs["default"]
    assert run["rc"] == 0, run["out"][-3000:]
    assert _lessons(run) == ["01_warmup", "03_param_count"]
    assert "lessons graded: 01_warmup, 03_param_count" in run["out"]
    top = _max("01_warmup") + _max("03_param_count")
    assert {s: (r["total"], r["max total"]) for s, r in run["rows"].items()} == {
        "alice": (f"{top:g}", f"{top:g}"), "bob": (f"{_max('01_warmup'):g}", f"{top:g}")}
    assert run["rows"]["bob"]["03_param_count status"] == "missing"
    assert run["pages"] == ["alice/01_warmup.html", "alice/03_param_count.html", "bob/01_warmup.html",
                            "bob/03_param_count.html"]  # bob's says what is missing


def test_named_lessons_are_counted_even_when_no_one_handed_them_in_and_other_pages_go(runs):
    run = runs["named"]
    assert run["rc"] == 0, run["out"][-3000:]
    assert _lessons(run) == ["01_warmup", "04_dk_scaling"]
    assert {r["04_dk_scaling status"] for r in run["rows"].values()} == {"missing"}
    top = _max("01_warmup") + _max("04_dk_scaling")
    assert {r["max total"] for r in run["rows"].values()} == {f"{top:g}"}
    assert not [p for p in run["pages"] if "03_param_count" in p]


def test_the_lessons_come_back_with_their_pages(runs):
    run, first = runs["again"], runs["default"]
    assert run["rc"] == 0, run["out"][-3000:]
    assert _lessons(run) == ["01_warmup", "03_param_count"] and run["pages"] == first["pages"]
    assert {s: r["total"] for s, r in run["rows"].items()} == {s: r["total"] for s, r in first["rows"].items()}

"""The class decides the lessons: by default the lessons some student handed in are taken in and graded, and every
lesson graded into the output folder before stays.

One class, four runs of the grading command into one output folder: alice hands in lessons 01 and 03, bob lesson
01 only. Run 1 (no ``--lessons``, as ``make grade`` without ``LESSONS``) grades 01 and 03; bob's lesson 03 is "not
handed in", counted nowhere. Run 2 (``--lessons 01 04``, as ``LESSONS="01 04"``) adds lesson 04, which no one handed
in, as "not handed in" for everyone, and keeps lesson 03 with its pages. Run 3 (no ``--lessons`` again) changes
nothing. Run 4 (``--close 03``, as ``CLOSE=03``) counts bob's lesson 03 missing, 0, and says so.
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


def _cli(klass: Path, out: Path, *lessons, close=()) -> dict:
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(klass), "--out", str(out), "--quiet",
                           "--workers", "2", *(["--lessons", *lessons] if lessons else []),
                           *(["--close", *close] if close else [])], cwd=course.ROOT,
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
    return {"default": _cli(klass, out), "named": _cli(klass, out, "01", "04"), "again": _cli(klass, out),
            "closed": _cli(klass, out, close=["03"])}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return once(tmp_path_factory, "lessons-graded", _batch)


def _lessons(run) -> list:
    return sorted({column.split(" ")[0] for column in run["header"] if column.endswith(" status")})


def _max(lesson: str) -> float:
    nb = notebooks.read_source(course.SOLUTIONS / f"{lesson}.py")
    return sum(c.metadata.get("nbgrader", {}).get("points", 0) for c in nb.cells
               if c.metadata.get("nbgrader", {}).get("grade"))


def test_by_default_the_lessons_handed_in_are_graded_and_a_lesson_not_handed_in_counts_nowhere(runs):
    run = runs["default"]
    assert run["rc"] == 0, run["out"][-3000:]
    assert _lessons(run) == ["01_warmup", "03_param_count"]
    assert "lessons taken from this download: 01_warmup, 03_param_count" in run["out"]
    both, one = _max("01_warmup") + _max("03_param_count"), _max("01_warmup")
    assert {s: (r["total"], r["max total"], r["percent"]) for s, r in run["rows"].items()} == {
        "alice": (f"{both:g}", f"{both:g}", "100.0"), "bob": (f"{one:g}", f"{one:g}", "100.0")}
    bob = run["rows"]["bob"]
    assert (bob["03_param_count status"], bob["03_param_count score"]) == ("not handed in", "")
    assert run["pages"] == ["alice/01_warmup.html", "alice/03_param_count.html", "bob/01_warmup.html"]


def test_named_lessons_are_added_and_every_earlier_lesson_stays_with_its_pages(runs):
    run, first = runs["named"], runs["default"]
    assert run["rc"] == 0, run["out"][-3000:]
    assert _lessons(run) == ["01_warmup", "03_param_count", "04_dk_scaling"]
    assert {r["04_dk_scaling status"] for r in run["rows"].values()} == {"not handed in"}
    assert {s: (r["total"], r["max total"]) for s, r in run["rows"].items()} == \
        {s: (r["total"], r["max total"]) for s, r in first["rows"].items()}
    assert run["pages"] == first["pages"] and "graded 0 notebooks" in run["out"]


def test_a_run_with_nothing_new_changes_nothing(runs):
    run, named = runs["again"], runs["named"]
    assert run["rc"] == 0, run["out"][-3000:]
    assert run["rows"] == named["rows"] and run["pages"] == named["pages"]
    assert "no score or state changed since the last run" in run["out"]


def test_closing_a_lesson_counts_who_never_handed_it_in_as_missing_and_lists_them(runs):
    run = runs["closed"]
    assert run["rc"] == 0, run["out"][-3000:]
    bob = run["rows"]["bob"]
    assert (bob["03_param_count status"], bob["03_param_count score"]) == ("missing", "0")
    assert bob["max total"] == f"{_max('01_warmup') + _max('03_param_count'):g}"
    assert "  bob 03_param_count: - -> 0 missing (lesson closed: never handed in)" in run["out"]
    assert "bob/03_param_count.html" in run["pages"]  # it says what is missing
    assert {r["04_dk_scaling status"] for r in run["rows"].values()} == {"not handed in"}  # not closed

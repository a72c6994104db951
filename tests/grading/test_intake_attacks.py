"""Intake that no student can steer, proved on real notebooks through the grading command (``autograder.grade.run``,
what ``make grade`` runs).

One class holds every attack on intake at once, beside honest students: a student folder called ``submitted``
holding another student's name, a folder named like another student's generated id, a name that is not UTF-8, a
name that is a spreadsheet formula, a notebook that is a link to another student's, a fifo, a link to a file that
keeps changing, and a notebook rewritten while the class is graded. A later batch into the same output folder then
brings a name whose generated id equals an earlier student's (a real 32-bit collision). The zip limits are proved
through the command line without a kernel.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import threading
import zipfile
from pathlib import Path

import pytest
from name_collisions import colliding_pair
from run_once import once

from autograder import grade
from autograder.course import answers, notebooks
from autograder.grading.intake import student_ids
from autograder.grading.records import state
from autograder.grading.reports import results

LESSON = "01_warmup"
FORMULA = '=HYPERLINK("evil.example","click")'
NOT_UTF8 = os.fsdecode(b"caf\xe9")


def _put(folder: Path, nb, rel: str = f"{LESSON}.ipynb") -> Path:
    notebooks.write_notebook(nb, folder / rel)
    return folder / rel


def _rows(out: Path, name: str) -> list:
    with (out / name).open(newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def _churn(path: Path, contents: list, stop: threading.Event, tmp: Path, written: dict) -> None:
    """Rewrite ``path`` (atomically, through ``tmp``) with each of ``contents`` in turn, each time with one more
    trailing space, so that no two versions are equal, until ``stop``; ``written``: sha256 -> index of contents."""
    i = 0
    while not stop.wait(0.02):
        data = contents[i % len(contents)] + b" " * i
        written[hashlib.sha256(data).hexdigest()] = i % len(contents)
        tmp.write_bytes(data)
        os.replace(tmp, path)
        i += 1


def _first_batch(base: Path, honest: str) -> dict:
    klass = base / "class"
    full, untouched = answers.fill(LESSON), answers.student_notebook(LESSON)
    for name in ("alice", honest, NOT_UTF8, FORMULA):
        _put(klass / name, full)
    _put(klass / student_ids.student_id(honest), untouched)  # named like the honest student's generated id
    _put(klass / "submitted", untouched, f"alice/{LESSON}/{LESSON}.ipynb")  # would have been the class folder
    (klass / "mallory").mkdir()
    os.symlink(f"../alice/{LESSON}.ipynb", klass / "mallory" / f"{LESSON}.ipynb")
    (klass / "oscar").mkdir()
    os.mkfifo(klass / "oscar" / f"{LESSON}.ipynb")
    outside = _put(base / "elsewhere", full)
    (klass / "trent").mkdir()
    os.symlink(outside, klass / "trent" / f"{LESSON}.ipynb")
    ursula = _put(klass / "ursula", full)
    contents = [ursula.read_bytes(), _put(base / "untouched", untouched).read_bytes()]
    stop = threading.Event()
    written = {hashlib.sha256(contents[0]).hexdigest(): 0}
    threads = [threading.Thread(target=_churn, args=(path, contents, stop, base / f"churn-{i}", written))
               for i, path in enumerate((outside, ursula))]
    for thread in threads:
        thread.start()
    s = grade.Settings(out=str(base / "out"), lessons=[LESSON], workers=2, timeout=30)
    try:
        run = grade.run(klass, s, progress=False, log=lambda *a: None)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return {"notes": run["notes"], "integrity": run["integrity"], "errors": run["errors"],
            "grades": _rows(base / "out", "grades.csv"), "ids": _rows(base / "out", "student_ids.csv"),
            "ursula": {"record": state.read(s, "ursula", LESSON).to_json(), "written": written}}


def _later_batch(base: Path, honest: str, colliding: str) -> dict:
    """A second run into the same output folder with a name whose 8-hex id is the honest student's."""
    _put(base / "later" / colliding, answers.student_notebook(LESSON))
    s = grade.Settings(out=str(base / "out"), lessons=[LESSON], workers=2, timeout=30)
    run = grade.run(base / "later", s, progress=False, log=lambda *a: None)
    sid = student_ids.student_id(honest)
    return {"grades": _rows(base / "out", "grades.csv"), "errors": run["errors"],
            "honest_total": results.submission_total(s, LESSON, sid),
            "honest_record": state.read(s, sid, LESSON).score,
            "registry": json.loads(registry.read_text()) if (registry := base / "out" / "students.json").exists()
            else None}


def _batches(base: Path) -> dict:
    honest, colliding = colliding_pair()
    return {"honest": honest, "colliding": colliding, "first": _first_batch(base, honest),
            "later": _later_batch(base, honest, colliding), "base": str(base)}


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    return once(tmp_path_factory, "intake-attacks", _batches)


def _by_folder(grades: list) -> dict:
    header, *rows = grades
    return {row[1]: dict(zip(header, row)) for row in rows}


@pytest.mark.grading
def test_a_student_folder_named_submitted_is_that_student_and_no_one_disappears(batches):
    rows = _by_folder(batches["first"]["grades"])
    assert rows["alice"][f"{LESSON} score"] == "8" and rows["alice"]["student"] == "alice"
    attacker = rows["submitted"]
    assert attacker["student"] == "submitted" and attacker[f"{LESSON} score"] == "0"
    assert f"found alice/{LESSON}/{LESSON}.ipynb" in attacker["flags"]
    assert len(rows) == 10 and not batches["first"]["errors"]


@pytest.mark.grading
def test_a_folder_named_like_another_students_id_is_graded_apart_and_flagged(batches):
    rows = _by_folder(batches["first"]["grades"])
    honest, look_alike = rows[batches["honest"]], rows[student_ids.student_id(batches["honest"])]
    assert honest["student"] == student_ids.student_id(batches["honest"]) and honest[f"{LESSON} score"] == "8"
    assert look_alike["student"] != honest["student"] and look_alike[f"{LESSON} score"] == "0"
    assert "looks like a student id" in look_alike["flags"]


@pytest.mark.grading
def test_a_name_that_is_not_utf8_is_graded_and_the_class_goes_on(batches):
    row = _by_folder(batches["first"]["grades"])["caf\\xe9"]
    assert row[f"{LESSON} score"] == "8" and "not UTF-8" in row["flags"]
    assert student_ids.STUDENT_ID.fullmatch(row["student"])


@pytest.mark.grading
def test_a_formula_name_reaches_every_csv_as_text(batches):
    rows = _by_folder(batches["first"]["grades"])
    assert rows["'" + FORMULA][f"{LESSON} score"] == "8"
    assert ["'" + FORMULA] == [row[1] for row in batches["first"]["ids"] if FORMULA in row[1]]  # student, folder, ...
    out = Path(batches["base"]) / "out"
    for name in ("grades.csv", "student_ids.csv", "misconceptions.csv", "nbgrader_export.csv"):
        cells = [cell for row in _rows(out, name) for cell in row]
        assert not [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r")], name
        assert not [c for c in cells if c.startswith("-") and not c.lstrip("-").replace(".", "").isdigit()], name


@pytest.mark.grading
def test_links_and_fifos_are_refused_and_flagged_never_followed(batches):
    rows = _by_folder(batches["first"]["grades"])
    for student, what in (("mallory", "symbolic link"), ("oscar", "fifo"), ("trent", "symbolic link")):
        assert rows[student][f"{LESSON} status"] == "refused", student
        assert rows[student][f"{LESSON} score"] == "0" and what in rows[student]["flags"], student
        page = Path(batches["base"]) / "out" / "feedback" / student / f"{LESSON}.html"
        assert "Submit the notebook file itself" in page.read_text()
    assert rows["alice"][f"{LESSON} score"] == "8"  # the link's target is graded once, as its owner's


@pytest.mark.grading
def test_a_notebook_rewritten_during_the_run_ends_nothing(batches):
    first = batches["first"]
    row = _by_folder(first["grades"])["ursula"]
    record = first["ursula"]["record"]
    assert record["graded"] and row[f"{LESSON} status"] == "graded"
    read = first["ursula"]["written"][record["hash"]]  # 0: the completed notebook, 1: the untouched one
    assert row[f"{LESSON} score"] == ("8" if read == 0 else "0")  # graded what it read, one version
    assert not first["integrity"] and len(first["ursula"]["written"]) > 2
    changed = [n for n in first["notes"] if "CHANGED DURING GRADING" in n]
    assert changed == [f"THE ORIGINAL SUBMISSIONS CHANGED DURING GRADING: ursula/{LESSON}.ipynb"]  # no other file


@pytest.mark.grading
def test_a_later_batch_cannot_take_an_earlier_students_id(batches):
    later, honest_id = batches["later"], student_ids.student_id(batches["honest"])
    assert student_ids.student_id(batches["colliding"]) == honest_id  # the id it would have taken
    row = _by_folder(later["grades"])[batches["colliding"]]
    assert row["student"] != honest_id and row[f"{LESSON} score"] == "0"
    assert "both kept" in row["flags"] and batches["honest"] in row["flags"]
    assert list(later["honest_total"]) == [8.0, 8.0] and later["honest_record"] == 8.0  # not overwritten
    assert later["registry"][honest_id] == batches["honest"] and row["student"] in later["registry"]
    assert not later["errors"]


# ---------------------------------------------------------------- zips through the command line (no kernel)

def test_a_zip_bomb_is_refused_by_the_command_with_what_to_do(tmp_path, capsys):
    bomb = tmp_path / "class.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        for student in ("alice", "bob"):
            zf.writestr(f"{student}/{LESSON}.ipynb", b" " * (32 * 2**20))
    out = tmp_path / "out"
    assert grade.main([str(bomb), "--out", str(out), "--lessons", LESSON, "--quiet"]) == grade.EXIT_LAYOUT
    err = capsys.readouterr().err
    assert "was not unpacked" in err and "the limit is 100 times" in err and "unpack it yourself" in err
    assert not (out / "unzipped").exists() and not (out / "course").exists()

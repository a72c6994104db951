"""The canary: the grading command grades the model answers first and refuses to grade anyone when they fail.

A copy of the course is graded with its own command (the copy on PYTHONPATH): once intact (the earlier run), once
with a reference that disagrees with the model answers (the canary must refuse: exit status, the sentence, no
student graded, nothing of the earlier run changed) and once repaired (everyone is graded). The normal run's
canary is checked in ``tests/grading/test_grade_command.py`` on its shared class.
"""

from __future__ import annotations

import csv
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from course_copy import copy_course

from autograder import course, grade
from autograder.course import answers, notebooks
from autograder.grading.intake import student_ids
from autograder.grading.records import state
from autograder.grading.records.settings import COURSE_ID
from autograder.grading.run import canary

LESSON = "01_warmup"
BROKEN_SOFTMAX = "\n\n_true_softmax = softmax\n\n\ndef softmax(x, axis=-1):\n    return _true_softmax(x, axis) * 0.5\n"


def _cli(copy: Path, submissions_path: Path, out: Path, *extra):
    env = notebooks.nbgrader_env()
    env["PYTHONPATH"] = str(copy)  # the copy's autograder, not this checkout's
    cmd = [sys.executable, "-m", "autograder.grade", str(submissions_path), "--out", str(out), "--lessons", LESSON,
           "--timeout", "30", "--workers", "1", "--quiet", *extra]
    return subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=600)


def _hashes(*paths) -> dict:
    """sha256 of every file under each of ``paths`` (files or folders)."""
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def _grades(out: Path) -> dict:
    with (out / "grades.csv").open(newline="") as fh:
        return {r["student"]: r[f"{LESSON} score"] for r in csv.DictReader(fh)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("canary")
    copy = copy_course(base / "course-copy")
    klass, out = base / "class", base / "out"
    notebooks.write_notebook(answers.fill(LESSON), klass / "alice" / f"{LESSON}.ipynb")
    earlier = _cli(copy, klass, out)
    notebooks.write_notebook(answers.fill(LESSON), klass / "bob" / f"{LESSON}.ipynb")  # new since the earlier run
    reference = copy / "autograder" / "reference" / "lesson01.py"
    intact = reference.read_text(encoding="utf-8")
    reference.write_text(intact + BROKEN_SOFTMAX, encoding="utf-8")
    kept = [out / "state", out / "feedback", out / "grades.csv", out / "report.html", out / "nbgrader_export.csv"]
    before = _hashes(klass, *kept)
    broken = _cli(copy, klass, out)
    after = _hashes(klass, *kept)
    kept_notebook = (out / "canary" / f"{LESSON}.ipynb").is_file()  # the failing canary, for a human to read
    reference.write_text(intact, encoding="utf-8")
    repaired = _cli(copy, klass, out)
    repaired_grades = _grades(out)
    notebooks.write_notebook(answers.fill(LESSON), klass / "carol" / f"{LESSON}.ipynb")
    reused = _cli(copy, klass, out)  # nothing the canary depends on changed since the repaired run
    notebooks.write_notebook(answers.fill(LESSON), klass / "dan" / f"{LESSON}.ipynb")
    fresh = _cli(copy, klass, out, "--fresh-canary")
    return {"earlier": earlier, "broken": broken, "repaired": repaired, "before": before, "after": after,
            "out": out, "kept_notebook": kept_notebook, "reused": reused, "fresh": fresh,
            "repaired_grades": repaired_grades}


@pytest.mark.grading
def test_a_reference_that_disagrees_with_the_model_answers_stops_the_command_before_any_student(runs):
    earlier, broken = runs["earlier"], runs["broken"]
    assert earlier.returncode == 0, earlier.stdout[-2000:] + earlier.stderr[-2000:]
    assert "canary passed" in earlier.stdout
    assert broken.returncode == grade.EXIT_CANARY, broken.stdout[-2000:] + broken.stderr[-2000:]
    err = broken.stderr
    assert f"canary failed for {LESSON}: the model answer lost 3 of its 8 autograded points" in err
    assert "The hidden checks and the model answers disagree" in err and "autograder/reference/" in err
    assert "First error, in cell softmax_values: WrongAnswer" in err
    assert "No student was graded" in err and "graded " not in broken.stdout  # no summary line
    assert runs["kept_notebook"]


@pytest.mark.grading
def test_a_failed_canary_loses_nothing_and_the_repaired_course_grades_everyone(runs):
    out = runs["out"]
    assert runs["after"] == runs["before"]  # originals, earlier state, grades, report, feedback, export
    assert any("state" in k for k in runs["before"])
    repaired = runs["repaired"]
    assert repaired.returncode == 0, repaired.stdout[-2000:] + repaired.stderr[-2000:]
    assert "graded 1 notebooks" in repaired.stdout and "canary passed" in repaired.stdout  # bob, new; alice kept
    assert runs["repaired_grades"] == {"alice": "8", "bob": "8"}
    assert not (out / "canary" / f"{LESSON}.ipynb").exists()
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}", COURSE_ID) as gb:
        assert sorted(s.id for s in gb.students) == ["alice", "bob", "carol", "dan"]


@pytest.mark.grading
def test_a_pass_is_reused_until_something_it_depends_on_changes(runs):
    """The broken run shows a changed dependency (the reference) grades the canary again; with nothing changed the
    next run reuses the pass and says so, and --fresh-canary grades it anyway."""
    reused, fresh = runs["reused"], runs["fresh"]
    assert reused.returncode == 0, reused.stdout[-2000:] + reused.stderr[-2000:]
    assert "graded 1 notebooks" in reused.stdout  # carol
    assert "canary of 1 lesson reused: passed before with the same course, checks, settings and packages" in \
        reused.stdout and "canary passed in" not in reused.stdout
    assert fresh.returncode == 0, fresh.stdout[-2000:] + fresh.stderr[-2000:]
    assert "canary passed in" in fresh.stdout and "reused" not in fresh.stdout
    assert _grades(runs["out"]) == {"alice": "8", "bob": "8", "carol": "8", "dan": "8"}


def test_the_fingerprint_follows_what_the_canary_depends_on(tmp_path):
    s = grade.Settings(out=str(tmp_path), lessons=[LESSON])
    first = canary.fingerprint(s, LESSON)
    assert canary.fingerprint(s, LESSON) == first
    assert canary.fingerprint(grade.Settings(out=str(tmp_path), lessons=[LESSON], timeout=31), LESSON) != first
    assert canary.fingerprint(s, "02_multi_head") != first
    spec = tmp_path / "jupyter" / "kernels" / "autograder-sandbox" / "kernel.json"
    spec.parent.mkdir(parents=True)
    spec.write_text("{}")
    with_spec = canary.fingerprint(s, LESSON)
    assert with_spec != first  # the kernelspec
    spec.chmod(0o600)
    assert canary.fingerprint(s, LESSON) != with_spec  # its permission bits alone: a sandbox uid may not read it


def test_an_unreadable_file_changes_the_fingerprint_instead_of_stopping_the_run(tmp_path, monkeypatch):
    s = grade.Settings(out=str(tmp_path), lessons=[LESSON])
    spec = tmp_path / "jupyter" / "kernels" / "autograder-sandbox" / "kernel.json"
    spec.parent.mkdir(parents=True)
    spec.write_text("{}")
    readable = canary.fingerprint(s, LESSON)
    read_bytes = Path.read_bytes

    def refuse(path):
        if path == spec:
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    assert canary.fingerprint(s, LESSON) != readable


def test_no_student_id_can_be_a_canary_id():
    for lesson in course.lesson_names():
        assert state.is_canary(state.canary_id(lesson))
        assert not student_ids.STUDENT_ID.match(state.canary_id(lesson))


@pytest.mark.parametrize("first, words", [
    ({"ename": "ModuleNotFoundError", "evalue": "No module named 'autograder'", "kind": "setup"},
     "Kernels cannot import the course's module autograder"),
    ({"ename": "ModuleNotFoundError", "evalue": "No module named 'selfcheck_01'", "kind": "answer"},
     "Kernels cannot import the course's module selfcheck_01"),
    ({"ename": "ModuleNotFoundError", "evalue": "No module named 'scipy'", "kind": "answer"},
     "A package the lessons need (scipy) is missing"),
    ({"ename": "", "evalue": "not graded: nbgrader failed: RuntimeError: Kernel died before replying to kernel_info",
      "kind": "nbgrader"}, "The grading kernel did not start (or died before the model answer ran)"),
    ({"ename": "DeadKernelError", "evalue": "the kernel died while running this cell", "kind": "setup"},
     "The grading kernel did not start"),
    ({"ename": "DeadKernelError", "evalue": "the kernel died while running this cell", "kind": "answer"},
     "The kernel died while running a model answer"),
    ({"ename": "CellTimeoutError", "evalue": "A cell timed out while it was being executed", "kind": "answer"},
     "ran longer than --timeout 60 s"),
    ({"ename": "MemoryError", "evalue": "", "kind": "answer"}, "raise --memory-mb"),
    ({"ename": "AssertionError", "evalue": "wrong", "kind": "test"},
     "The hidden checks and the model answers disagree"),
    ({"ename": "WrongAnswer", "evalue": "softmax differs from the expected values", "kind": "test"},
     "The hidden checks and the model answers disagree"),
])
def test_each_common_cause_gets_its_own_sentence_with_the_fix(first, words):
    s = grade.Settings(out="/nonexistent", lessons=[LESSON])
    sentence = canary.diagnose(s, LESSON, {"cell": "softmax_values", "traceback": "", **first})
    assert words in sentence

"""No silent zeros: the grader's own failures leave the score empty, are listed first, exit 4, and are retried.

Fixture notebooks (no kernel) pin down ``outcome.grading_error``. One batch of real grading runs on one workspace
(lesson 01; alice, bob and a folder named ``o'brien``) then proves each case through the real command:

A. a gradebook write fails for bob (a SQLite trigger refuses his submission row);
B. bob's kernel cannot start (a wrapper around the kernel launcher exits when it starts in his folder);
C. the locked setup cell fails: bob's kernel gets a kernel library whose ``selfcheck_01.py`` is empty, so the
   kernels cannot import the course's helper module;
D. everything fixed: bob is graded, without regrading the others.
"""

from __future__ import annotations

import csv
import html
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output
from run_once import once

from autograder import course, grade
from autograder.course import answers, notebooks
from autograder.grading.intake import class_folder, student_ids
from autograder.grading.pipeline.execute import KERNEL_DIED, NOT_RUN
from autograder.grading.records import dburl, outcome
from autograder.grading.run import workspace

LESSON = "01_warmup"


# ---------------------------------------------------------------- classification (no kernel)

def _cell(source, *, locked=False, grade_id=None, grade=False, error=None):
    cell = new_code_cell(source)
    if locked or grade_id:
        cell.metadata["nbgrader"] = {"locked": locked, "grade_id": grade_id or "x", "grade": grade,
                                     "solution": not locked, "schema_version": 3}
    if error:
        cell.outputs = [new_output("error", ename=error[0], evalue=error[1], traceback=[])]
    return cell


def _nb(*cells):
    return new_notebook(cells=list(cells))


def test_a_setup_cell_that_fails_before_any_learner_code_is_a_grading_error():
    failed = _nb(_cell("setup", locked=True, grade_id="setup", grade=True,
                       error=("ImportError", "cannot import name 'check_softmax' from 'selfcheck_01' (/x/selfcheck_01.py)")),
                 _cell("def softmax(): ...", grade_id="softmax"))
    assert "kernels cannot import the course's module 'selfcheck_01'" in outcome.grading_error(failed)
    other = _nb(_cell("setup", locked=True, grade_id="setup", grade=True, error=("OSError", "disk")),
                _cell("answer", grade_id="softmax"))
    assert "setup cell setup failed before any learner code ran: OSError: disk" in outcome.grading_error(other)


def test_a_kernel_that_dies_before_the_first_learner_cell_is_a_grading_error():
    died = _nb(_cell("setup", locked=True, grade_id="setup", grade=True, error=(KERNEL_DIED, "died")),
               _cell("answer", grade_id="softmax", error=(NOT_RUN, "not run")))
    assert "kernel died before the first learner cell ran" in outcome.grading_error(died)
    never = _nb(_cell("answer", grade_id="softmax", error=(NOT_RUN, "not run")))
    assert "stopped before the first learner cell ran" in outcome.grading_error(never)


def test_the_learners_own_failures_are_not_grading_errors():
    wrong = _nb(_cell("setup", locked=True, grade_id="setup", grade=True), _cell("answer", grade_id="softmax"),
                _cell("test", locked=True, grade_id="softmax_values", grade=True,
                      error=("AssertionError", "softmax is taken over the wrong axis")))
    assert outcome.grading_error(wrong) is None
    own_import = _nb(_cell("setup", locked=True, grade_id="setup", grade=True),
                     _cell("import torch", grade_id="softmax", error=("ModuleNotFoundError", "No module named 'torch'")))
    assert outcome.grading_error(own_import) is None


# ---------------------------------------------------------------- student ids and passwords (no kernel)

def test_lms_folder_names_get_a_safe_deterministic_id(tmp_path):
    for name in ("Petrov, Ivan", "o'brien", "Élodie Brûlé", "alice"):
        notebooks.write_notebook(answers.student_notebook(LESSON), tmp_path / "class" / name / f"{LESSON}.ipynb")
    roster = class_folder.collect(tmp_path / "class", [LESSON], tmp_path / "work")
    assert roster.folders["alice"] == "alice"
    ids = {folder: sid for sid, folder in roster.folders.items()}
    assert ids["Petrov, Ivan"].startswith("petrov_ivan-") and ids["o'brien"].startswith("o_brien-")
    assert ids["Élodie Brûlé"].startswith("elodie_brule-")
    assert all(student_ids.STUDENT_ID.match(sid) for sid in ids.values())
    assert student_ids.student_id("Petrov, Ivan") == ids["Petrov, Ivan"]  # deterministic
    assert student_ids.student_id("petrov ivan") != student_ids.student_id("Petrov, Ivan")
    assert all(e.status == "ok" for es in roster.entries.values() for e in es.values())


def test_a_database_password_stays_out_of_make_and_the_command_line(tmp_path, capsys):
    url = "postgresql://grader:s3cr3t-pw@db.example:5432/gradebook"
    dry = subprocess.run(["make", "-n", "grade", "SUBMISSIONS=x", f"DB={url}"], cwd=course.ROOT, text=True,
                         capture_output=True)
    assert dry.returncode == 0 and "s3cr3t-pw" not in dry.stdout + dry.stderr
    assert grade.main(["nowhere", "--out", str(tmp_path / "o"), "--db", url, "--quiet"]) == grade.EXIT_LAYOUT
    err = capsys.readouterr().err
    assert "PGPASSWORD" in err and "s3cr3t-pw" not in err and not (tmp_path / "o").exists()
    bare = dburl.without_password(url)
    assert "s3cr3t-pw" not in bare and dburl.with_password(bare) == bare
    os.environ[dburl.ENV] = url
    try:
        assert dburl.with_password(bare) == url
        assert dburl.with_password("postgresql://grader@other:5432/gradebook") == \
            "postgresql://grader@other:5432/gradebook"  # another server never gets this password
    finally:
        del os.environ[dburl.ENV]
    lines = workspace.config_lines(grade.Settings(out=str(tmp_path), lessons=[LESSON], db_url=url))
    assert "s3cr3t-pw" not in lines and "with_password(" in lines


# ---------------------------------------------------------------- real grading runs

def _cli(submissions_path, out, *, cwd=None, pythonpath=None):
    env = notebooks.nbgrader_env()
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(submissions_path), "--out", str(out),
                           "--lessons", LESSON, "--timeout", "30", "--workers", "2", "--quiet"],
                          cwd=cwd or course.ROOT, env=env, capture_output=True, text=True, timeout=900)
    with (Path(out) / "grades.csv").open(newline="") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "rows": rows,
            "report": (Path(out) / "report.html").read_text(),
            "bob_state": json.loads((Path(out) / "state" / "bob" / f"{LESSON}.json").read_text()),
            "bob_feedback": (Path(out) / "feedback" / "bob" / f"{LESSON}.html").exists()}


def _batch(base: Path) -> dict:
    root, out = base / "class", base / "out"
    for student in ("alice", "bob", "o'brien"):
        notebooks.write_notebook(answers.fill(LESSON), root / student / f"{LESSON}.ipynb")
    workspace.prepare_course(grade.Settings(out=str(out), lessons=[LESSON], timeout=30), log=print)
    gradebook = out / "course" / "gradebook.db"
    with sqlite3.connect(gradebook) as db:  # A: the gradebook refuses bob's submission
        db.execute("CREATE TRIGGER refuse_bob BEFORE INSERT ON submitted_assignment WHEN NEW.student_id = 'bob' "
                   "BEGIN SELECT RAISE(ABORT, 'gradebook write refused'); END")
    runs = {"A": _cli(root, out)}
    with sqlite3.connect(gradebook) as db:
        db.execute("DROP TRIGGER refuse_bob")
    # B and C break the kernels of one student only (the canary, graded first with the same kernels, must pass):
    # the kernel starts in the student's folder, which a wrapper around the launcher looks at.
    spec = out / "jupyter" / "kernels" / "autograder-sandbox" / "kernel.json"
    good = spec.read_text()

    def wrap(action):
        wrapped = json.loads(good)
        wrapped["argv"] = ["/bin/sh", "-c", f'case "$PWD" in */bob/*) {action};; esac; exec "$0" "$@"',
                           *wrapped["argv"]]
        spec.write_text(json.dumps(wrapped))

    wrap("exit 3")  # B: bob's kernel cannot start
    runs["B"] = _cli(root, out)
    # C: bob's kernel cannot import the course's helper module (its kernel library has an empty selfcheck_01.py)
    broken = base / "broken-library"
    shutil.copytree(out / "kernel-library", broken)
    (broken / "selfcheck_01.py").write_text("")
    for path in [broken, *broken.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    wrap(f'set -- "$@" --library {broken}')
    runs["C"] = _cli(root, out)
    spec.write_text(good)
    runs["D"] = _cli(root, out)
    return {"runs": runs, "out": str(out), "obrien": student_ids.student_id("o'brien")}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return once(tmp_path_factory, "grading-errors", _batch)


def _score(run, student):
    return run["rows"][student][f"{LESSON} score"]


@pytest.mark.grading
def test_a_failed_gradebook_write_is_a_grading_error_not_a_zero(batch):
    a = batch["runs"]["A"]
    assert a["rc"] == grade.EXIT_GRADING_ERROR, a["stdout"] + a["stderr"]
    bob = a["rows"]["bob"]
    assert bob[f"{LESSON} status"] == "grading error" and bob[f"{LESSON} score"] == "" and bob["total"] == ""
    assert "gradebook write refused" in bob["flags"] and "GRADING ERRORS" in a["stderr"]
    assert not a["bob_state"]["graded"]
    assert _score(a, "alice") == "8" and _score(a, batch["obrien"]) == "8"  # others unaffected
    assert a["rows"][batch["obrien"]]["folder"] == "o'brien"
    report = a["report"]
    assert report.index("1 grading errors") < report.index("Score distribution")  # listed at the top
    assert '<div class="error">' in report and "bob 01_warmup" in report


@pytest.mark.grading
def test_a_kernel_that_cannot_start_is_a_grading_error_and_only_it_is_retried(batch):
    b = batch["runs"]["B"]
    assert b["rc"] == grade.EXIT_GRADING_ERROR and "graded 1 notebooks" in b["stdout"]
    assert _score(b, "bob") == "" and b["rows"]["bob"][f"{LESSON} status"] == "grading error"
    assert "nbgrader autograde failed" in b["bob_state"]["reason"]
    assert _score(b, "alice") == "8"


@pytest.mark.grading
def test_a_setup_cell_that_cannot_import_the_course_is_a_grading_error(batch):
    c = batch["runs"]["C"]
    assert c["rc"] == grade.EXIT_GRADING_ERROR, c["stdout"] + c["stderr"]
    assert _score(c, "bob") == ""
    assert "kernels cannot import the course's module 'selfcheck_01'" in c["bob_state"]["reason"]
    assert not c["bob_feedback"] and batch["runs"]["D"]["bob_feedback"]


@pytest.mark.grading
def test_the_next_run_grades_what_failed_once_the_cause_is_fixed(batch):
    d = batch["runs"]["D"]
    assert d["rc"] == 0, d["stdout"] + d["stderr"]
    assert "graded 1 notebooks" in d["stdout"]
    assert {s: _score(d, s) for s in d["rows"]} == {"alice": "8", "bob": "8", batch["obrien"]: "8"}
    assert "grading errors: the grader failed" not in d["report"] and "1_warmup: grading error -> 8" in \
        html.unescape(d["report"])  # told as a change
    ids = (Path(batch["out"]) / "student_ids.csv").read_text()
    assert f"{batch['obrien']},o'brien" in ids
    assert nbformat.read(Path(batch["out"]) / "course" / "autograded" / batch["obrien"] / LESSON / f"{LESSON}.ipynb",
                         as_version=4)

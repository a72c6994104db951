"""The class-grading command end to end: `python -m autograder.grade` on real lesson notebooks.

One small class (complete, untouched, two catalogued bugs, a misnamed file) is graded serially, in parallel, again
(idempotent), after a change (only the changed notebook is regraded), and in a run killed halfway then resumed;
every run must end with the same grades.csv. The input layouts are checked without starting kernels.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from run_once import once
from worker_killer import WorkerKiller, kernel_launchers

from autograder import course, grade
from autograder.bugs import by_id
from autograder.course import answers, notebooks
from autograder.grading.intake import class_folder, class_roster, code_scan
from autograder.grading.pipeline import costs
from autograder.grading.records import findings
from autograder.grading.run import workspace

LESSON = "01_warmup"
LESSONS = course.lesson_names()


def _class(root: Path) -> dict:
    """Write a small class for every lesson; return {student: expected lesson-01 score}."""
    nbs = {
        "alice": {lesson: answers.fill(lesson) for lesson in LESSONS},
        "bob": {lesson: answers.student_notebook(lesson) for lesson in LESSONS},
        "carol": {LESSON: answers.fill(LESSON, {"softmax": by_id("softmax_no_max_subtraction").source})},
        "dan": {LESSON: answers.fill(LESSON, {
            "scaled_dot_product_attention": by_id("attention_softmax_query_axis").source})},
    }
    for student, lessons in nbs.items():
        for lesson, nb in lessons.items():
            notebooks.write_notebook(nb, root / student / f"{lesson}.ipynb")
    notebooks.write_notebook(answers.fill(LESSON), root / "erin" / LESSON / "my attempt.ipynb")
    return {"alice": 8.0, "bob": 0.0, "carol": 7.0, "dan": 3.0, "erin": 8.0}


def _cli(submissions_path, out, *extra, check=True):
    cmd = [sys.executable, "-m", "autograder.grade", str(submissions_path), "--out", str(out),
           "--lessons", LESSON, "--timeout", "30", *extra]
    proc = subprocess.run(cmd, cwd=course.ROOT, env=notebooks.nbgrader_env(), capture_output=True, text=True,
                          timeout=900)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _grades(out) -> list:
    with (Path(out) / "grades.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------- layouts (no kernels)

def test_the_accepted_layouts_all_give_the_same_roster(tmp_path):
    flat = tmp_path / "flat"
    _class(flat)
    nested = tmp_path / "nested" / "submitted"
    for student_dir in flat.iterdir():
        for nb in student_dir.rglob("*.ipynb"):
            dest = nested / student_dir.name / (nb.stem if nb.parent == student_dir else nb.parent.name) / nb.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(nb, dest)
            (dest.parent / "timestamp.txt").write_text("2026-01-01 10:00:00.000000 UTC")
    (nested.parent / "nbgrader_config.py").write_text("c = get_config()\n")  # what makes it a course folder
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in flat.rglob("*.ipynb"):
            zf.write(path, Path("class of 2026") / path.relative_to(flat))

    def roster(path):
        r = class_folder.collect(path, LESSONS, tmp_path / f"work-{path.name}")
        return {(s, lesson): e.status for s, es in r.entries.items() for lesson, e in es.items()}

    expected = roster(flat)
    assert expected[("erin", LESSON)] == "misnamed" and expected[("alice", LESSON)] == "ok"
    assert roster(nested.parent) == expected  # a course folder after `nbgrader collect`
    assert roster(nested) == expected  # its submitted/ folder
    assert roster(archive) == expected


def test_an_unknown_layout_gets_an_error_that_says_what_is_expected(tmp_path, capsys):
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "loose.txt").write_text("not a class")
    assert grade.main([str(tmp_path / "subs"), "--out", str(tmp_path / "out"), "--quiet"]) == grade.EXIT_LAYOUT
    err = capsys.readouterr().err
    assert "no student folder with a notebook" in err and "<student>/<lesson>.ipynb" in err
    assert grade.main([str(tmp_path), "--out", str(tmp_path / "out"), "--quiet"]) == grade.EXIT_LAYOUT
    assert "is inside the submissions" in capsys.readouterr().err


def test_a_zip_cannot_write_outside_the_workspace(tmp_path):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../../escaped.ipynb", "{}")
    with pytest.raises(class_roster.LayoutError, match="unsafe path"):
        class_folder.collect(archive, LESSONS, tmp_path / "work")
    assert not (tmp_path.parent / "escaped.ipynb").exists()


@pytest.mark.parametrize("lesson", LESSONS)
def test_honest_notebooks_of_every_lesson_raise_no_flags(lesson):
    nb = answers.fill(lesson)
    assert code_scan.scan_notebook(nb) == []
    assert findings.structure_flags(nb, answers.student_notebook(lesson)) == []


def test_the_static_scan_names_what_a_human_should_read():
    found = code_scan.scan_source(
        "import numpy as xp\nimport builtins, sys\nfrom IPython import get_ipython as g\n"
        "xp.allclose = lambda *a: True\nsetattr(xp.testing, 'assert_allclose', print)\nbuiltins.print = None\n"
        "sys.modules['autograder'] = None\ng().set_custom_exc((Exception,), None)\n"
        "class A:\n    def __eq__(self, o):\n        return True\n"
        "__import__('autograder.reference')\nos._exit(0)\n")
    expected = ["rebinds xp.allclose (numpy)", "setattr on xp.testing", "rebinds builtins.print (builtins)",
                "rebinds sys.modules['autograder'] (sys)", "changes the kernel with g().set_custom_exc()",
                "defines an __eq__ that always returns True", "imports autograder.reference", "calls os._exit()"]
    for phrase in expected:
        assert any(phrase in f for f in found), (phrase, found)
    assert code_scan.scan_source("import numpy as np\nx = np.allclose(1, 1)\ny = {}\ny['a'] = 1\n") == []


# ---------------------------------------------------------------- real grading

def _serial_run(base: Path) -> dict:
    expected = _class(base / "class")
    serial = _cli(base / "class", base / "serial", "--workers", "1")
    return {"base": str(base), "expected": expected, "stdout": serial.stdout, "stderr": serial.stderr,
            "grades": _grades(base / "serial")}


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    result = once(tmp_path_factory, "klass", _serial_run)  # one serial run per session, also under xdist
    base = Path(result["base"])
    return {**result, "base": base, "root": base / "class"}


@pytest.mark.grading
def test_one_command_grades_the_class_with_feedback_csv_and_summary(klass):
    rows = {r["student"]: r for r in _grades(klass["base"] / "serial")}
    assert {s: float(r[f"{LESSON} score"]) for s, r in rows.items()} == klass["expected"]
    assert {float(r[f"{LESSON} max"]) for r in rows.values()} == {8.0}
    assert rows["erin"]["flags"].startswith(f"{LESSON}: misnamed: found {LESSON}/my attempt.ipynb")
    assert rows["alice"]["flags"] == "" and rows["alice"]["total"] == "8"
    feedback = (klass["base"] / "serial" / "feedback" / "dan" / f"{LESSON}.html").read_text()
    assert "softmax is taken over the query axis" in feedback
    out = klass["stdout"]
    assert "graded 5 notebooks" in out and "median" in out and "grades.csv" in out
    assert "grading" in klass["stderr"]  # the progress bar
    assert (klass["base"] / "serial" / "nbgrader_export.csv").read_text().count(LESSON) >= 5


@pytest.mark.grading
def test_the_canary_grades_the_model_answers_first_and_leaves_no_trace_in_the_results(klass):
    out = klass["base"] / "serial"
    summary = next(line for line in klass["stdout"].splitlines() if line.startswith("graded "))
    assert re.search(r"; canary passed in \d+\.\d s \(model answers of 1 lesson: full marks\)$", summary), summary
    records = list((out / "canary").glob(f"*/{LESSON}.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["score"] == 8.0
    assert {r["student"] for r in klass["grades"]} == set(klass["expected"])  # no canary row
    assert "_canary" not in (out / "nbgrader_export.csv").read_text()
    assert "_canary" not in (out / "report.html").read_text()
    for place in (out / "state", out / "feedback", out / "course" / "submitted", out / "course" / "autograded"):
        assert not [p.name for p in place.iterdir() if p.name.startswith("_")], place


@pytest.mark.grading
def test_each_record_keeps_what_grading_it_cost_phase_by_phase(klass):
    """bench/grading_speed.py's breakdown reads these: every phase of every notebook, the grader's CPU where it
    works, and as root (each kernel with a uid of its own) the kernel's CPU where the kernel works."""
    ledgers = [json.loads(p.read_text())["costs"] for p in (klass["base"] / "serial" / "state").rglob("*.json")]
    assert len(ledgers) == len(klass["expected"])
    for ledger in ledgers:
        assert list(ledger) == list(costs.PHASES)
        for name in (costs.NBGRADER, costs.FEEDBACK, costs.RECORDS, costs.HIDDEN):
            assert ledger[name]["grader"] > 0, (name, ledger)
        assert ledger[costs.LEARNER]["wall"] > 0 and ledger[costs.KERNEL]["wall"] > 0
        if os.geteuid() == 0:  # isolation "uid": the kernel's processes are read from /proc
            assert ledger[costs.KERNEL]["kernel"] > 0, ledger  # ipykernel's own start, after the fork
            assert {ledger[name]["kernel"] for name in (costs.NBGRADER, costs.FEEDBACK, costs.RECORDS)} == {0.0}
        else:
            assert all(row["kernel"] is None for row in ledger.values())
    if os.geteuid() == 0:
        assert sum(ledger[costs.LEARNER]["kernel"] + ledger[costs.HIDDEN]["kernel"] for ledger in ledgers) > 0


@pytest.mark.grading
def test_a_parallel_batch_killed_halfway_resumes_to_the_serial_grades_and_reruns_regrade_only_what_changed(
        klass, tmp_path):
    out = tmp_path / "parallel"
    cmd = [sys.executable, "-m", "autograder.grade", str(klass["root"]), "--out", str(out), "--lessons", LESSON,
           "--timeout", "30", "--workers", "2", "--quiet"]
    proc = subprocess.Popen(cmd, cwd=course.ROOT, env=notebooks.nbgrader_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if len(list((out / "state").glob(f"*/{LESSON}.json"))) >= 1:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run finished before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)  # the grader, its workers and what they started in its group
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    done = len(list((out / "state").glob(f"*/{LESSON}.json")))
    assert 1 <= done < len(klass["expected"]), done
    resumed = _cli(klass["root"], out, "--workers", "2")
    assert f"graded {len(klass['expected']) - done} notebooks" in resumed.stdout
    assert _grades(out) == klass["grades"]  # the uninterrupted serial run's grades, flags included
    again = _cli(klass["root"], out, "--workers", "2")
    assert "graded 0 notebooks" in again.stdout and "no canary needed: nothing to grade" in again.stdout
    assert _grades(out) == klass["grades"]
    changed = tmp_path / "changed"
    shutil.copytree(klass["root"], changed)
    notebooks.write_notebook(answers.fill(LESSON), changed / "bob" / f"{LESSON}.ipynb")
    third = _cli(changed, out, "--workers", "2")
    assert "graded 1 notebooks" in third.stdout
    rows = {r["student"]: r for r in _grades(out)}
    assert rows["bob"][f"{LESSON} score"] == "8" and rows["carol"][f"{LESSON} score"] == "7"


@pytest.mark.grading
def test_a_dying_grading_worker_costs_no_grade_and_a_notebook_that_kills_it_every_time_is_a_grading_error(
        klass, tmp_path):
    """SIGKILL (what the out-of-memory killer sends) to the worker process grading carol, once, and to the one
    grading dan, every time: carol is graded again; dan's notebook is a grading error that says what happened, the
    others keep the serial run's grades, and the next run grades only dan."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "autograder.grade", str(klass["root"]), "--out", str(out), "--lessons", LESSON,
           "--timeout", "30", "--workers", "2", "--quiet"]
    with WorkerKiller(out, {"carol": 1, "dan": None}) as killer:
        proc = subprocess.run(cmd, cwd=course.ROOT, env=notebooks.nbgrader_env(), capture_output=True, text=True,
                              timeout=900)
    kills, stdout, stderr = killer.kills, proc.stdout, proc.stderr
    assert kills == {"carol": 1, "dan": 2}, (kills, stdout[-2000:], stderr[-2000:])  # dan: in company, then alone
    assert proc.returncode == grade.EXIT_GRADING_ERROR, stdout[-3000:] + stderr[-3000:]
    assert re.search(rf"  dan {LESSON}: the grading worker process died while grading this student's notebooks, "
                     r"twice, the second time alone \(killed, or out of memory", stderr), stderr[-3000:]
    rows = {r["student"]: r for r in _grades(out)}
    serial = {r["student"]: r for r in klass["grades"]}
    assert {k: v for k, v in rows.items() if k != "dan"} == {k: v for k, v in serial.items() if k != "dan"}
    assert rows["dan"][f"{LESSON} status"] == "grading error" and rows["dan"][f"{LESSON} score"] == ""
    assert kernel_launchers(out) == {}  # the dead workers' kernels did not outlive the run
    again = _cli(klass["root"], out, "--workers", "2")
    assert "graded 1 notebooks" in again.stdout
    assert _grades(out) == klass["grades"]


def test_the_gradebook_schema_revision_read_in_process_is_the_one_nbgrader_asks_alembic_for():
    asked = subprocess.run([sys.executable, "-c", "import nbgrader.api; print(nbgrader.api.get_alembic_version())"],
                           env=notebooks.nbgrader_env(), capture_output=True, text=True, check=True)
    assert workspace.alembic_head() == asked.stdout.strip()

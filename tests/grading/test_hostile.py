"""Hostile and broken submissions graded in one batch beside honest ones, through the real grading command.

Every case of COURSE.md's hostile list is a real lesson-01 notebook (built with ``answers.fill``). The batch
runs once (two workers, short per-cell timeout, 1 GiB kernels) and the tests assert on its grades.csv, its state
records, the gradebook and the file system: no hostile notebook scores above what its honest work earns, each is
flagged, the honest students get exactly the grades they get alone, the originals are byte-identical, and nothing
the kernels wrote survives outside the grading workspace.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import uuid
from pathlib import Path

import nbformat
import pytest
from grading_helpers import with_cell
from run_once import once

from autograder import course, grade
from autograder.bugs import by_id
from autograder.course import answers, helper_cell, notebooks
from autograder.grading.intake import integrity

LESSON = "01_warmup"
pytestmark = [pytest.mark.grading]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="kernel isolation (uid + mount namespace) needs root")

GOOD_SOFTMAX = answers.model_answers(LESSON)["softmax"]
OVERFLOW_SOFTMAX = by_id("softmax_no_max_subtraction").source
# Honest scores of lesson 01 (tests/grading/test_grading_lesson01.py proves them on their own): softmax tests are worth
# 2 + 1 points, attention tests 3 + 2.
SOFTMAX_POINTS, FULL = 3.0, 8.0
MARKER = f"/tmp/hostile-marker-{uuid.uuid4().hex}"


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _hostile_class(root: Path, out: Path) -> dict:
    """Write the class under ``root``; return {student: the most its honest work can earn}."""
    gradebook = out / "course" / "gradebook.db"
    victim_copy = out / "course" / "submitted" / "honest_full" / LESSON / f"{LESSON}.ipynb"
    victim_original = root / "honest_full" / f"{LESSON}.ipynb"
    selfcheck = course.LESSONS / f"{course.selfcheck_module(LESSON)}.py"
    nbs, honest = {}, {}

    nbs["honest_full"], honest["honest_full"] = answers.fill(LESSON), FULL
    nbs["honest_bug"], honest["honest_bug"] = answers.fill(LESSON, {"softmax": OVERFLOW_SOFTMAX}), 7.0

    # The loop swallows the interrupt, so the kernel has to be killed; softmax (before it) was honest work.
    nbs["infinite_loop"] = answers.fill(LESSON, {"scaled_dot_product_attention": """
        while True:
            try:
                while True:
                    pass
            except KeyboardInterrupt:
                pass
        """})
    honest["infinite_loop"] = SOFTMAX_POINTS
    nbs["memory_bomb"] = answers.fill(LESSON, {"scaled_dot_product_attention": """
        hoard = [np.ones((1024, 1024, 512)) for _ in range(64)]  # 4 GiB each
        """})
    honest["memory_bomb"] = SOFTMAX_POINTS
    nbs["sys_exit"] = with_cell(answers.fill(LESSON), "softmax", "import sys\nsys.exit('bye')")
    honest["sys_exit"] = FULL
    nbs["killed_kernel"] = answers.fill(LESSON, {"scaled_dot_product_attention": """
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
        """})
    honest["killed_kernel"] = SOFTMAX_POINTS
    nbs["os_exit"] = answers.fill(LESSON, {"softmax": "import os\nos._exit(0)"})
    honest["os_exit"] = 0.0

    edited = answers.fill(LESSON, {"softmax": OVERFLOW_SOFTMAX})
    _cell(edited, "softmax_stable").source = "pass  # nothing to see"
    _cell(edited, "softmax_stable").metadata["nbgrader"].update(grade=False, solution=True, locked=False)
    _cell(edited, "softmax_values").metadata["nbgrader"]["points"] = 100
    edited.cells.remove(_cell(edited, "attention_mask"))
    nbs["edited_tests"], honest["edited_tests"] = edited, 7.0
    stripped = answers.fill(LESSON, {"softmax": OVERFLOW_SOFTMAX})
    victim = _cell(stripped, "softmax_stable")
    victim.metadata.pop("nbgrader")
    victim.source = "pass"
    nbs["stripped_metadata"], honest["stripped_metadata"] = stripped, 7.0

    wrong = {"softmax": "def softmax(x, axis=-1):\n    return x\n",
             "scaled_dot_product_attention": "def scaled_dot_product_attention(Q, K, V, mask=None):\n"
                                             "    return Q, Q\n"}
    nbs["patched_numpy"] = with_cell(answers.fill(LESSON, wrong), "softmax", """
import numpy.testing
np.allclose = lambda *a, **k: True
np.array_equal = lambda *a, **k: True
np.testing.assert_allclose = lambda *a, **k: None
get_ipython().showtraceback = lambda *a, **k: None
""")
    honest["patched_numpy"] = 0.0
    nbs["fake_eq"] = answers.fill(LESSON, {
        "softmax": """
        class AlwaysEqual:
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            shape = property(lambda self: ())
        def softmax(x, axis=-1):
            return AlwaysEqual()
        """,
        "scaled_dot_product_attention": """
        def scaled_dot_product_attention(Q, K, V, mask=None):
            return softmax(Q), softmax(Q)
        """})
    honest["fake_eq"] = 0.0
    nbs["imports_reference"] = answers.fill(LESSON, {
        "softmax": "from autograder.reference import softmax\nimport autograder.checks.lesson01",
        "scaled_dot_product_attention": "from autograder.reference import scaled_dot_product_attention"})
    honest["imports_reference"] = 0.0
    nbs["huge_print"] = with_cell(answers.fill(LESSON), "softmax",
                                   "for _ in range(200):\n    print('x' * 1_000_000)  # 200 MB")
    honest["huge_print"] = FULL
    if os.geteuid() != 0:  # without root the kernels are not isolated (docs/sandbox.md): this one would succeed
        return _write(root, nbs, honest)
    nbs["writer"] = with_cell(answers.fill(LESSON), "softmax", f"""
import sqlite3, subprocess, sys
for target in {[str(gradebook), str(victim_copy), str(victim_original), str(selfcheck), MARKER]!r}:
    try:
        with open(target, "a") as fh:
            fh.write("pwned")
        print("wrote", target)
    except Exception as exc:
        print("blocked", target, type(exc).__name__)
try:
    db = sqlite3.connect({str(gradebook)!r})
    db.execute("update grade set manual_score = 100")
    db.commit()
except Exception as exc:
    print("gradebook blocked", type(exc).__name__)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
""")
    honest["writer"] = FULL
    return _write(root, nbs, honest)


def _write(root: Path, nbs: dict, honest: dict) -> dict:
    for student, nb in nbs.items():
        notebooks.write_notebook(nb, root / student / f"{LESSON}.ipynb")
    notebooks.write_notebook(answers.fill(LESSON), root / "misnamed" / f"{LESSON.replace('_w', '_W')} (1).ipynb")
    honest["misnamed"] = FULL
    (root / "malformed").mkdir()
    (root / "malformed" / f"{LESSON}.ipynb").write_text('{"cells": [ this is not json', encoding="utf-8")
    honest["malformed"] = 0.0
    notebooks.write_notebook(nbformat.v4.new_notebook(), root / "missing" / "scratch.ipynb")
    honest["missing"] = 0.0
    return honest


def _grade_batch(base: Path) -> dict:
    root, out = base / "class", base / "out"
    honest = _hostile_class(root, out)
    repo_before = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in
                   [*(course.LESSONS / h for h in course.SELFCHECK_FILES), *sorted((course.ROOT / "autograder").rglob("*.py"))]}
    originals = integrity.tree_hashes(root)
    settings = grade.Settings(out=str(out), lessons=[LESSON], workers=2, timeout=10, memory_mb=2048,
                              close=[LESSON])  # past its deadline: the student with no notebook counts missing, 0
    outcome = grade.run(root, settings, progress=False, log=lambda *a: None)
    with (out / "grades.csv").open() as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    return {"root": str(root), "out": str(out), "honest": honest, "rows": rows, "integrity": outcome["integrity"],
            "originals": originals, "repo_before": repo_before}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    result = once(tmp_path_factory, "hostile", _grade_batch)  # one batch per session, also under xdist
    return {**result, "root": Path(result["root"]), "out": Path(result["out"])}


def _score(batch, student):
    return float(batch["rows"][student][f"{LESSON} score"])


def _flags(batch, student):
    return batch["rows"][student]["flags"]


def test_every_student_is_in_the_csv_with_the_real_maximum(batch):
    assert set(batch["rows"]) == set(batch["honest"])
    assert {float(r[f"{LESSON} max"]) for r in batch["rows"].values()} == {FULL}


def test_no_hostile_notebook_scores_above_its_honest_work(batch):
    scores = {s: _score(batch, s) for s in batch["honest"]}
    assert scores == batch["honest"], {s: (scores[s], batch["honest"][s]) for s in scores
                                       if scores[s] != batch["honest"][s]}


def test_honest_students_are_unaffected_and_unflagged(batch):
    assert _score(batch, "honest_full") == FULL and _score(batch, "honest_bug") == 7.0
    assert _flags(batch, "honest_full") == "" and _flags(batch, "honest_bug") == ""
    assert (batch["out"] / "feedback" / "honest_bug" / f"{LESSON}.html").exists()


@pytest.mark.parametrize("student, expected", [
    ("infinite_loop", "timeout"),
    ("infinite_loop", "ignored the interrupt"),
    ("memory_bomb", "memory limit"),
    ("sys_exit", "sys.exit"),
    ("killed_kernel", "kernel died"),
    ("killed_kernel", "calls os.kill()"),
    ("os_exit", "kernel died"),
    ("edited_tests", "edited locked/test cells: softmax_stable"),
    ("edited_tests", "deleted locked/test cells: attention_mask"),
    ("edited_tests", "changed nbgrader metadata of: softmax_values, softmax_stable"),
    ("stripped_metadata", "deleted locked/test cells: softmax_stable"),
    ("patched_numpy", "rebinds np.allclose"),
    ("patched_numpy", "rebinds np.testing.assert_allclose"),
    ("patched_numpy", "rebinds get_ipython().showtraceback"),
    ("fake_eq", "__eq__ that always returns True"),
    ("imports_reference", "imports from autograder.reference"),
    ("huge_print", "output truncated"),
    pytest.param("writer", "writes a file", marks=needs_root),
    pytest.param("writer", "left processes running after grading (killed)", marks=needs_root),
    ("misnamed", "misnamed"),
    ("malformed", "malformed"),
    ("missing", "missing"),
])
def test_each_hostile_case_is_flagged_for_a_human(batch, student, expected):
    assert expected in _flags(batch, student), _flags(batch, student)


@pytest.mark.parametrize("student, failure", [
    ("infinite_loop", "timeout"),  # its answer cell ran past the limit: the tests after it were not run
    ("memory_bomb", "memory limit"),  # its answer cell hit the limit, so the function it defines never existed
    ("killed_kernel", "kernel died"),
    ("os_exit", "kernel died"),
])
def test_the_insights_name_each_failure_by_what_it_is(batch, student, failure):
    with (batch["out"] / "misconceptions.csv").open(encoding="utf-8") as fh:
        results = {r["result"] for r in csv.DictReader(fh) if r["student"] == student}
    assert results == {failure}


def test_the_report_lists_the_flags_and_the_distribution(batch):
    report = (batch["out"] / "report.html").read_text()
    assert "Score distribution" in report and "memory limit" in report and "honest_bug" in report


def test_original_submissions_are_byte_identical(batch):
    assert integrity.tree_hashes(batch["root"]) == batch["originals"]
    assert batch["integrity"]


def test_kernels_wrote_nothing_outside_the_workspace(batch):
    assert not Path(MARKER).exists(), "a kernel wrote to the machine's /tmp"
    for path, digest in batch["repo_before"].items():
        assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == digest, f"{path} changed"
    copy = batch["out"] / "course" / "submitted" / "honest_full" / LESSON / f"{LESSON}.ipynb"
    assert b"pwned" not in copy.read_bytes()


@needs_root
def test_the_writer_was_blocked_everywhere_and_its_process_killed(batch):
    nb = nbformat.read(batch["out"] / "course" / "autograded" / "writer" / LESSON / f"{LESSON}.ipynb", as_version=4)
    # the writer's own cells (the helper cell writes the self-check modules into the kernel's working copy)
    text = "".join(o.get("text", "") for c in nb.cells if not helper_cell.is_cell(c) for o in c.get("outputs", []))
    wrote = [line for line in text.splitlines() if line.startswith("wrote ")]
    assert wrote == [f"wrote {MARKER}"], text[-2000:]  # only into the kernel's own throw-away /tmp
    assert "gradebook blocked" in text and not Path(MARKER).exists()
    state = json.loads((batch["out"] / "state" / "writer" / f"{LESSON}.json").read_text())
    assert state["score"] == FULL
    assert "left processes running after grading (killed)" in " ".join(state["flags"])
    assert not [p for p in os.listdir("/proc") if p.isdigit() and b"time.sleep(600)" in _cmdline(p)]


def _cmdline(pid) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""

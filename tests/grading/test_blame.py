"""Blame where it belongs: what a notebook does to its own metadata, imports and files is the learner's outcome,
flagged, exit 0; a failure the notebook could not cause stays a grading error.

One lesson-01 class, graded twice by the grading command (``python -m autograder.grade``, as ``make grade`` runs it):

1. an honest student and one student per attack (each one nbgrader or the grader would fail on, every run, if it
   took the notebook's word): edited test-cell metadata, fake locked cells, unknown and repeated grade_ids, a sabotaged import of the course's
   modules after the setup cell, a cell placed above the setup cell that would make it import a fake self-check
   module (through ``vars(sys)``, so no pattern over its text could tell), a ``timestamp.txt`` that is not a time.
   The run exits 0; each attack scores what its work earns (0 for the cells it broke) and is flagged;
2. the same class plus a student whose kernel, alone, gets a kernel library with an empty ``selfcheck_01.py`` (the
   grader's fault; a harmless cell of the learner's is placed above the setup cell): a grading error, exit 4, and
   only that notebook is graded, so the first run's outcomes were final.

The rules themselves, without a kernel: ``tests/unit/grading/records/test_outcome_rules.py``.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from run_once import once

from autograder import course, grade
from autograder.bugs import by_id
from autograder.course import answers, notebooks

LESSON = "01_warmup"
pytestmark = pytest.mark.grading

OVERFLOW_SOFTMAX = by_id("softmax_no_max_subtraction").source
# lesson 01's tests: softmax_values 2, softmax_stable 1, attention_values 3, attention_mask 2 (test_grading_lesson01.py)
FULL, SOFTMAX, ATTENTION_MASK = 8.0, 3.0, 2.0


def _index(nb, gid):
    return next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == gid)


def _cell(nb, gid):
    return nb.cells[_index(nb, gid)]


def _insert(nb, at, source, **nbgrader):
    cell = nbformat.v4.new_code_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = {"schema_version": 3, "solution": False, **nbgrader}
    nb.cells.insert(at, cell)
    for i, c in enumerate(nb.cells):
        c["id"] = c.get("id") or f"extra-{i}"
    return nb


def _class() -> dict:
    """{student: (notebook, the score its work earns, the flags it must get)}."""
    edited = answers.fill(LESSON, {"softmax": OVERFLOW_SOFTMAX})  # loses softmax_stable, honestly
    _cell(edited, "softmax_values").metadata["nbgrader"]["points"] = 100
    _cell(edited, "softmax").metadata["nbgrader"].update(grade=True, points=10)
    _cell(edited, "attention_mask").metadata["nbgrader"]["grade_id"] = "attention_mask_renamed"
    stable = _cell(edited, "softmax_stable")
    stable.cell_type = "markdown"
    stable.pop("outputs")
    stable.pop("execution_count")

    fake = answers.fill(LESSON)
    # a cell claiming to be attention_mask, placed before the learner defines the function it tests: that test fails
    _insert(fake, _index(fake, "setup") + 1, "pass", grade_id="attention_mask", locked=True, grade=True, points=2)
    # a locked cell of its own before every other cell, failing: were it taken as locked, a grading error
    _insert(fake, 0, "raise RuntimeError('locked?')", grade_id="bonus", locked=True, grade=True, points=50)

    repeated = answers.fill(LESSON)
    _insert(repeated, _index(repeated, "softmax") + 1, "x = 1", grade_id="extra", solution=True, locked=False)
    for gid, at in (("softmax", _index(repeated, "softmax") + 1), ("softmax_values", len(repeated.cells))):
        repeated.cells.insert(at, copy.deepcopy(_cell(repeated, gid)))
        repeated.cells[at]["id"] = f"copy-of-{gid}"  # as JupyterLab copies a cell: its metadata, a new id

    sabotaged = answers.fill(LESSON)  # after the softmax tests: the attention tests cannot import the course
    _insert(sabotaged, _index(sabotaged, "softmax_stable") + 1, "import sys, types\n"
            "for name in [n for n in sys.modules if n.startswith('autograder')]:\n    del sys.modules[name]\n"
            "sys.modules['autograder'] = types.ModuleType('autograder')\n")
    # run first, it would make the setup cell import an empty selfcheck_01; the graded copy runs it after the setup cell
    before_setup = _insert(answers.fill(LESSON), 0, "import os, sys\nos.makedirs('/tmp/fake', exist_ok=True)\n"
                           "open('/tmp/fake/selfcheck_0' + '1.py', 'w').close()\n"
                           "vars(sys)['path'].insert(0, '/tmp/fake')\n")
    return {
        "honest": (answers.fill(LESSON), FULL, []),
        "edited_metadata": (edited, FULL - 1, [
            "changed nbgrader metadata of: softmax, softmax_values", "changed cell type of: softmax_stable",
            "fake locked/test cells (grade_ids not in the release): attention_mask_renamed",
            "deleted locked/test cells: attention_mask"]),
        "fake_locked": (fake, FULL - ATTENTION_MASK, [
            "fake locked/test cells (grade_ids not in the release): bonus", "duplicated grade_ids: attention_mask"]),
        "repeated_ids": (repeated, FULL, ["cells with unknown grade_ids: extra",
                                          "duplicated grade_ids: softmax, softmax_values"]),
        "sabotaged_import": (sabotaged, SOFTMAX, ["broke the import of the course's module 'autograder'"]),
        "import_before_setup": (before_setup, FULL, ["code placed before the setup cell, run after it: 1 cells"]),
        "bad_timestamp": (answers.fill(LESSON), FULL, ["timestamp.txt ignored (not a date and time"]),
    }


def _cli(root: Path, out: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(root), "--out", str(out), "--lessons", LESSON,
                           "--timeout", "30", "--workers", "2", "--quiet"], cwd=course.ROOT,
                          env=notebooks.nbgrader_env(), capture_output=True, text=True, timeout=900)
    with (out / "grades.csv").open(newline="") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    states = {p.parent.name: json.loads(p.read_text()) for p in (out / "state").glob(f"*/{LESSON}.json")}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "rows": rows, "states": states}


def _batch(base: Path) -> dict:
    root, out = base / "class", base / "out"
    klass = _class()
    for student, (nb, _, _) in klass.items():  # nbgrader's layout: <student>/<lesson>/<lesson>.ipynb, timestamp.txt
        notebooks.write_notebook(nb, root / student / LESSON / f"{LESSON}.ipynb")
    (root / "honest" / LESSON / "timestamp.txt").write_text("2026-01-01 10:00:00 UTC\n")
    (root / "bad_timestamp" / LESSON / "timestamp.txt").write_bytes(b"\xff\xfe\x00 not a time")
    first = _cli(root, out)
    staged_stamp = out / "course" / "submitted" / "honest" / LESSON / "timestamp.txt"
    kept = staged_stamp.read_text() if staged_stamp.exists() else None

    # the grader's fault, for one student: its kernel gets a library whose selfcheck_01.py is empty
    notebooks.write_notebook(_insert(answers.fill(LESSON), 0, "x = 1"),
                             root / "grader_fault" / LESSON / f"{LESSON}.ipynb")
    broken = base / "broken-library"
    shutil.copytree(out / "kernel-library", broken)
    (broken / "selfcheck_01.py").write_text("")
    for path in [broken, *broken.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    spec = out / "jupyter" / "kernels" / "autograder-sandbox" / "kernel.json"
    wrapped = json.loads(spec.read_text())
    wrapped["argv"] = ["/bin/sh", "-c", f'case "$PWD" in */grader_fault/*) set -- "$@" --library {broken};; esac; '
                       'exec "$0" "$@"', *wrapped["argv"]]
    spec.write_text(json.dumps(wrapped))
    second = _cli(root, out)
    return {"first": first, "second": second, "kept_timestamp": kept,
            "expected": {s: [score, flags] for s, (_, score, flags) in klass.items()}}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return once(tmp_path_factory, "blame", _batch)


def test_a_class_of_tampered_notebooks_is_graded_and_exits_0(batch):
    first = batch["first"]
    assert first["rc"] == 0, first["stdout"] + first["stderr"]
    assert "grading error" not in json.dumps(first["rows"])
    assert {s: first["states"][s]["status"] for s in batch["expected"]} == dict.fromkeys(batch["expected"], "graded")


def test_each_attack_scores_what_its_work_earns(batch):
    rows = batch["first"]["rows"]
    scores = {s: float(rows[s][f"{LESSON} score"]) for s in batch["expected"]}
    assert scores == {s: score for s, (score, _) in batch["expected"].items()}
    assert {float(rows[s][f"{LESSON} max"]) for s in batch["expected"]} == {FULL}  # no faked points count


@pytest.mark.parametrize("student", ["honest", "edited_metadata", "fake_locked", "repeated_ids", "sabotaged_import",
                                     "import_before_setup", "bad_timestamp"])
def test_each_attack_is_flagged_with_what_was_tampered_with(batch, student):
    flags = batch["first"]["rows"][student]["flags"]
    expected = batch["expected"][student][1]
    assert all(f in flags for f in expected), flags
    assert bool(flags) == bool(expected)  # the honest student has none


def test_a_timestamp_that_is_a_time_reaches_nbgrader(batch):
    assert batch["kept_timestamp"] == "2026-01-01 10:00:00.000000 UTC"


def test_a_grader_fault_is_still_a_grading_error_and_the_outcomes_before_it_are_final(batch):
    second = batch["second"]
    assert second["rc"] == grade.EXIT_GRADING_ERROR, second["stdout"] + second["stderr"]
    assert "graded 1 notebooks" in second["stdout"]  # the attacks are not graded again
    fault = second["rows"]["grader_fault"]
    assert fault[f"{LESSON} status"] == "grading error" and fault[f"{LESSON} score"] == ""
    assert "kernels cannot import the course's module 'selfcheck_01'" in second["states"]["grader_fault"]["reason"]
    for student in batch["expected"]:
        assert second["rows"][student] == batch["first"]["rows"][student]

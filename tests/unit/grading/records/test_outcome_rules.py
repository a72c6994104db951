"""Whose failure is it: the pure rules (no kernel). ``tests/grading/test_blame.py`` proves them through the grading
command.

* ``findings.restore_metadata`` gives nbgrader a copy whose nbgrader metadata is the release's (nbgrader's own
  metadata check passes on it), whatever metadata the learner changed, faked or repeated;
* ``findings.structure_flags`` names each kind of tampering;
* ``class_folder.submission_time`` accepts what ``nbgrader collect`` writes and refuses any other ``timestamp.txt``;
* the graded copy runs the release's opening (its code cells up to the setup cell, locked in every lesson) before any
  code of the learner's, so ``outcome.grading_error`` blames a failed setup cell on the grader whatever code the
  notebook holds, and a failed import of the course's modules after it on the notebook; every lesson's setup cell
  imports the hidden tests' module first.
"""

from __future__ import annotations

import copy
from datetime import datetime

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from autograder import course
from autograder.course import notebooks
from autograder.grading.intake import class_folder
from autograder.grading.pipeline.cell_metadata import CompiledMetadataValidator
from autograder.grading.records import findings, outcome

LESSON = "01_warmup"
RELEASED = nbformat.read(course.LESSONS / f"{LESSON}.ipynb", as_version=4)


def _cell(nb, gid):
    return next(c for c in nb.cells if findings.claimed_id(c) == gid)


def _index(nb, gid):
    return next(i for i, c in enumerate(nb.cells) if findings.claimed_id(c) == gid)


def _with(nb, after, cell):
    nb.cells.insert(_index(nb, after) + 1, cell)
    return nb


def _fake(source, **meta):
    cell = new_code_cell(source)
    cell.metadata["nbgrader"] = {"schema_version": 3, **meta}
    return cell


def _tampered() -> dict:
    nbs = {}
    nb = copy.deepcopy(RELEASED)
    _cell(nb, "softmax_values").metadata["nbgrader"].update(points=100, grade=False, solution=True, locked=False)
    _cell(nb, "softmax").metadata["nbgrader"].update(grade=True, points=10)
    stable = _cell(nb, "softmax_stable")
    stable.cell_type = "markdown"
    stable.pop("outputs")
    stable.pop("execution_count")
    _cell(nb, "attention_values").metadata["nbgrader"] = "not a mapping"
    nbs["edited metadata"] = nb
    nbs["fake locked cell"] = _with(copy.deepcopy(RELEASED), "softmax", _fake(
        "raise RuntimeError", grade_id="bonus", locked=True, grade=True, points=50, solution=False))
    nbs["fake released cell"] = _with(copy.deepcopy(RELEASED), "attention_mask", _fake(
        "print('mine')", grade_id="softmax_values", locked=True, grade=True, points=2, solution=False))
    nbs["unknown grade_id"] = _with(copy.deepcopy(RELEASED), "softmax", _fake(
        "x = 1", grade_id="extra", locked=False, grade=False, solution=True))
    nb = copy.deepcopy(RELEASED)
    nbs["duplicated grade_ids"] = _with(_with(nb, "softmax", copy.deepcopy(_cell(nb, "softmax"))), "attention_mask",
                                        copy.deepcopy(_cell(nb, "softmax_values")))
    return nbs


def _claims(nb) -> list:
    return [(findings.claimed_id(c), c.cell_type, c.metadata.get("nbgrader")) for c in nb.cells
            if "nbgrader" in c.metadata]


@pytest.mark.parametrize("case", list(_tampered()))
def test_the_graded_copy_carries_the_released_metadata_only(case):
    submitted = _tampered()[case]
    graded = findings.restore_metadata(submitted, RELEASED)
    assert _claims(submitted) != _claims(RELEASED)  # the case does tamper
    kept = {findings.claimed_id(c) for c in submitted.cells}  # nbgrader adds a deleted locked cell back itself
    # every released cell the notebook still has, once, in order, with its released metadata and type; no other
    assert _claims(graded) == [claim for claim in _claims(RELEASED) if claim[0] in kept]
    CompiledMetadataValidator().validate_nb(graded)  # nbgrader's metadata check passes
    assert len(graded.cells) == len(submitted.cells)  # the learner's own cells stay, as the learner's


def test_an_honest_notebook_is_graded_as_submitted():
    assert findings.restore_metadata(RELEASED, RELEASED) == RELEASED
    assert findings.structure_flags(RELEASED, RELEASED) == []


def test_the_first_cell_claiming_a_grade_id_keeps_it():
    nb = _tampered()["fake released cell"]
    graded = findings.restore_metadata(nb, RELEASED)
    assert _index(graded, "softmax_values") == _index(RELEASED, "softmax_values")
    fake = graded.cells[_index(RELEASED, "attention_mask") + 1]
    assert fake.source == "print('mine')" and "nbgrader" not in fake.metadata


@pytest.mark.parametrize("case, flags", [
    ("edited metadata", ["changed nbgrader metadata of: softmax, softmax_values",
                         "changed cell type of: softmax_stable", "deleted locked/test cells: attention_values",
                         "nbgrader metadata without a grade_id, or not a mapping, on 1 cells"]),
    ("fake locked cell", ["fake locked/test cells (grade_ids not in the release): bonus"]),
    ("fake released cell", ["duplicated grade_ids: softmax_values"]),
    ("unknown grade_id", ["cells with unknown grade_ids: extra"]),
    ("duplicated grade_ids", ["duplicated grade_ids: softmax, softmax_values"]),
])
def test_each_kind_of_tampering_is_named(case, flags):
    found = findings.structure_flags(_tampered()[case], RELEASED)
    assert set(flags) <= set(found), found


NOW = datetime(2026, 3, 1, 12, 0)


def test_a_timestamp_written_by_nbgrader_collect_is_the_submission_time():
    assert class_folder.submission_time(b"2026-01-01 10:00:00.000000 UTC\n", NOW) == datetime(2026, 1, 1, 10, 0)
    assert class_folder.submission_time(b"2026-03-01T13:30:00+01:00", NOW) == datetime(2026, 3, 1, 12, 30)


@pytest.mark.parametrize("data, reason", [
    (b"not a date at all", "not a date and time"),
    (b"\xff\xfe\x00garbage", "not a date and time"),
    (b"", "not a date and time"),
    (b"9999-12-31 23:59:59 -1200", "not a date and time"),
    (b"2026-03-03 12:00:00 UTC", "after the time of grading"),
    (b"1900-01-01 00:00:00", "after 1970"),
    (b"2026-01-01 10:00:00 UTC" + b" " * class_folder.MAX_TIMESTAMP_BYTES, "bytes"),
])
def test_a_timestamp_that_is_not_a_plausible_time_is_refused(data, reason):
    with pytest.raises(ValueError, match=reason):
        class_folder.submission_time(data, NOW)


# ---------------------------------------------------------------- a failed import of the course's modules

def _locked(gid, error=None, grade=True):
    cell = new_code_cell(gid)
    cell.metadata["nbgrader"] = {"grade_id": gid, "locked": True, "grade": grade, "solution": False}
    if error:
        cell.outputs = [new_output("error", ename=error[0], evalue=error[1], traceback=[])]
    return cell


BROKEN = ("ModuleNotFoundError", "No module named 'autograder.kernel'; 'autograder' is not a package")


def test_a_hidden_test_that_cannot_import_the_course_after_the_setup_did_is_the_learners():
    nb = new_notebook(cells=[_locked("setup"), new_code_cell("m = getattr(__import__('s' + 'ys'), 'mod' + 'ules')"),
                             _locked("softmax_values", BROKEN)])
    assert outcome.grading_error(nb) is None
    flags = findings.run_flags(nb)
    assert any("broke the import of the course's module 'autograder'" in f for f in flags), flags


# learner code a text pattern over the source would not see reaching the import system
EVASIVE = ("import os, sys\nos.makedirs('/tmp/fake', exist_ok=True)\n"
           "open('/tmp/fake/selfcheck_0' + '1.py', 'w').close()\nvars(sys)['path'].insert(0, '/tmp/fake')\n")


def test_a_setup_cell_that_fails_is_a_grading_error_whatever_code_the_notebook_holds():
    failed = _locked("setup", ("ImportError", "cannot import name 'check_softmax' from 'selfcheck_01' (/x.py)"))
    for source in ("import numpy as np\nx = np.ones(3)", EVASIVE, "import sys\nsys.path.insert(0, '/tmp/fake')"):
        for cells in ([copy.deepcopy(failed), new_code_cell(source)], [new_code_cell(source), copy.deepcopy(failed)]):
            assert "cannot import the course's module 'selfcheck_01'" in outcome.grading_error(
                new_notebook(cells=cells)), source


def _code_ids(nb) -> list:
    return [findings.claimed_id(c) for c in nb.cells if c.cell_type == "code"]


def test_the_graded_copy_runs_the_release_opening_before_any_code_of_the_learners():
    opening = findings.opening(RELEASED)
    assert opening == _code_ids(RELEASED)[:_code_ids(RELEASED).index(outcome.SETUP) + 1]
    nb = copy.deepcopy(RELEASED)
    nb.cells.insert(_index(nb, outcome.SETUP), new_code_cell("x = 1"))  # between the helper cell and the setup cell
    nb.cells.insert(0, new_code_cell(EVASIVE))
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("my notes"))
    graded = findings.restore_metadata(nb, RELEASED)
    code = [c for c in graded.cells if c.cell_type == "code"]
    assert _code_ids(graded)[:len(opening)] == opening  # the opening first, in the release's order
    assert [c.source for c in code[len(opening):len(opening) + 2]] == [EVASIVE, "x = 1"]  # the learner's, in order
    assert graded.cells[0].source == "my notes" and len(graded.cells) == len(nb.cells)
    assert "code placed before the setup cell, run after it: 2 cells" in findings.structure_flags(nb, RELEASED)
    assert not any("before the setup cell" in f for f in findings.structure_flags(RELEASED, RELEASED))


def test_an_opening_cell_the_notebook_lacks_or_moved_is_restored_first():
    nb = copy.deepcopy(RELEASED)
    setup = nb.cells.pop(_index(nb, outcome.SETUP))
    nb.cells.insert(len(nb.cells), setup)  # moved to the end, after every learner cell
    nb.cells.pop(_index(nb, findings.opening(RELEASED)[0]))  # the helper cell deleted
    nb.cells.insert(0, new_code_cell(EVASIVE))
    graded = findings.restore_metadata(nb, RELEASED)
    assert _code_ids(graded)[:len(findings.opening(RELEASED))] == findings.opening(RELEASED)
    assert _code_ids(graded)[len(findings.opening(RELEASED))] is None  # then the learner's cell
    assert len({c.id for c in graded.cells}) == len(graded.cells) == len(nb.cells) + 1
    CompiledMetadataValidator().validate_nb(graded)
    nbformat.validate(graded)


def test_a_learner_cell_that_fails_to_import_the_course_is_not_flagged_as_a_broken_import():
    nb = new_notebook(cells=[_locked("setup"), new_code_cell("import autograder.reference")])
    nb.cells[1].outputs = [new_output("error", ename="ModuleNotFoundError",
                                      evalue="No module named 'autograder.reference'", traceback=[])]
    assert outcome.grading_error(nb) is None
    assert not any("broke the import" in f for f in findings.run_flags(nb))


@pytest.mark.parametrize("lesson", course.lesson_names())
def test_every_setup_cell_imports_the_hidden_tests_module_before_any_learner_cell(lesson):
    cells = notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells
    ids = [findings.claimed_id(c) for c in cells]
    setup = cells[ids.index(outcome.SETUP)]
    hidden = setup.source.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS", 1)[0]
    assert '__import__("autograder.kernel.hidden_cell")' in hidden
    first_answer = min(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("solution"))
    assert ids.index(outcome.SETUP) < first_answer
    opening = [c for c in cells[:ids.index(outcome.SETUP)] if c.cell_type == "code"]  # moved first with it
    assert all(c.metadata["nbgrader"].get("locked") and findings.claimed_id(c) for c in opening)

"""Every notebook runs: the instructor notebooks under nbval, the student notebooks as a learner meets them
(untouched: only the stubs' NotImplementedError, and the self-checks of the find-the-bug exercises' given code)
and as a learner finishes them (filled: no error at all).

The student notebooks are the learner bundle's (``make bundle``), each run alone in an empty folder by a fresh venv
made from the bundle's requirements.txt, the Binder set (``tests/helpers/learner_venv.py``): one venv for the three claims
(a notebook works alone, the Binder packages run every lesson, the bundle runs every lesson)."""

import subprocess
import sys
import time

import pytest
from learner_venv import LearnerMachine
from nbgrader.utils import compute_checksum
from notebook_runner import errors, self_check_cells, stderr_text

from autograder import course
from autograder.course import answers, helper_cell, notebooks
from autograder.publish import given_code

LESSONS = course.lesson_names()
# lessons whose nbval run trains in full; lesson 09's two minutes of training are run in full, for two seeds, by
# tests/unit/lessons/test_lesson09_training.py, so its nbval run stays short
TRAINED_IN_FULL = {"07_heads_that_learn"}


@pytest.mark.grading
@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_notebook_passes_nbval(lesson, tmp_path):
    path = tmp_path / f"{lesson}.ipynb"
    notebooks.write_notebook(notebooks.read_source(course.SOLUTIONS / f"{lesson}.py"), path)
    env = notebooks.nbgrader_env()
    if lesson in TRAINED_IN_FULL:
        env.pop("MHA_SHORT_TRAINING", None)  # the one run that trains lesson 07's model in full and checks its heads
    proc = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """Every lesson of the bundle, untouched and completed, each run alone in an empty folder by a fresh venv
    made from the bundle's requirements.txt (the Binder set): ``{(kind, lesson): (folder, executed notebook)}``."""
    machine = LearnerMachine(tmp_path_factory.mktemp("learner"))
    notebooks = {}
    for lesson in LESSONS:
        bundled = machine.lessons / f"{lesson}.ipynb"
        assert bundled.read_bytes() == (course.LESSONS / f"{lesson}.ipynb").read_bytes(), "the bundle's differs"
        notebooks[f"untouched-{lesson}"] = (lesson, answers.student_notebook(lesson, machine.lessons))
        notebooks[f"completed-{lesson}"] = (lesson, answers.fill(lesson, lessons_dir=machine.lessons))
    start = time.monotonic()
    ran = machine.run_alone(notebooks)
    print(f"\nlearner venv: {machine.install_seconds:.1f} s; {len(ran)} notebooks: {time.monotonic() - start:.1f} s")
    return ran


@pytest.mark.grading
@pytest.mark.parametrize("lesson", LESSONS)
def test_untouched_student_notebook_fails_only_with_not_implemented(lesson, alone):
    _, nb = alone[f"untouched-{lesson}"]
    found = errors(nb)
    assert found, "an untouched notebook must show which functions are still to be written"
    # a find-the-bug exercise hands out working-looking code: its self-check, and only its, reports the symptom
    given = [e for e in found if e[1] in given_code.expected_failures(lesson)]
    assert {e[1] for e in given} == given_code.expected_failures(lesson), found
    assert {e[2] for e in given} <= {"SelfCheckFailed"}, given
    found = [e for e in found if e not in given]
    assert {e[2] for e in found} == {"NotImplementedError"}, found
    for _, grade_id, _, message in found:
        if grade_id is not None and message:
            assert "not implemented yet" in message, (grade_id, message)


@pytest.mark.grading
@pytest.mark.parametrize("lesson", LESSONS)
def test_completed_student_notebook_runs_clean_alone(lesson, alone):
    """The bundle's notebook, completed, alone in an empty folder of a learner's venv: no error, no warning, every
    self-check passes, and the self-check modules it wrote are the course's own."""
    folder, nb = alone[f"completed-{lesson}"]
    assert errors(nb) == []
    assert "Warning" not in stderr_text(nb), stderr_text(nb)[:2000]
    checks = self_check_cells(nb)
    assert checks, "no self-check cell found"
    silent = [gid for gid, printed in checks if not any(line.startswith("\u2714") for line in printed.splitlines())]
    assert not silent, f"self-checks that did not print their pass line: {silent}"
    written = {p.name for p in folder.iterdir()} - {f"{lesson}.ipynb", "__pycache__"}
    assert written == set(helper_cell.files(lesson)), written
    for name in written:
        assert (folder / name).read_bytes() == (course.LESSONS / name).read_bytes(), name
    cell = next(c for c in nb.cells if helper_cell.is_cell(c))
    assert cell.metadata.nbgrader.checksum == compute_checksum(cell), "nbgrader would see an edited locked cell"

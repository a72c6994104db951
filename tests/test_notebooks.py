"""Every notebook runs: the instructor notebooks under nbval, the student notebooks as a learner meets them
(untouched: only the stubs' NotImplementedError) and as a learner finishes them (filled: no error at all)."""

import subprocess
import sys

import pytest

from autograder import course, answers
from notebook_runner import errors, execute, stderr_text

LESSONS = course.lesson_names()


@pytest.mark.grading
@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_notebook_passes_nbval(lesson, tmp_path):
    path = tmp_path / f"{lesson}.ipynb"
    course.write_notebook(course.read_source(course.SOLUTIONS / f"{lesson}.py"), path)
    env = course.nbgrader_env()
    env.pop("MHA_SHORT_TRAINING", None)  # the one run that trains lesson 07's model in full and checks its heads
    proc = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout


@pytest.mark.grading
@pytest.mark.parametrize("lesson", LESSONS)
def test_untouched_student_notebook_fails_only_with_not_implemented(lesson, tmp_path):
    nb = execute(answers.student_notebook(lesson), tmp_path)
    found = errors(nb)
    assert found, "an untouched notebook must show which functions are still to be written"
    assert {e[2] for e in found} == {"NotImplementedError"}, found
    for _, grade_id, _, message in found:
        if grade_id is not None and message:
            assert "not implemented yet" in message, (grade_id, message)


@pytest.mark.grading
@pytest.mark.parametrize("lesson", LESSONS)
def test_completed_student_notebook_runs_clean(lesson, tmp_path):
    nb = execute(answers.fill(lesson), tmp_path)
    assert errors(nb) == []
    assert "Warning" not in stderr_text(nb), stderr_text(nb)[:2000]

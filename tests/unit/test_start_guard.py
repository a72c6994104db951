"""The guard of ``tests/helpers/start_guard.py`` fails an unmarked test that starts a kernel, a browser or a server,
and lets a marked one (or any other command) run."""

from __future__ import annotations

import pytest
import start_guard

pytest_plugins = ["pytester"]


@pytest.mark.parametrize("command, kind", [
    (["python", "-m", "ipykernel_launcher", "-f", "k.json"], "kernel"),
    (["/usr/bin/python3", "-m", "autograder.kernel.launcher", "--uid", "61000"], "kernel"),
    ("python -m nbgrader autograde 01_warmup", "kernel"),
    (["python", "-m", "autograder.grade", "class", "--out", "g"], "kernel"),
    ([b"/usr/bin/chromium", b"--headless"], "browser"),
    (["jupyter", "lab", "--no-browser"], "server"),
    (["dask", "scheduler", "--port", "8786"], "server"),
    (["/usr/lib/postgresql/15/bin/initdb", "-D", "data"], "server"),
    (["/venv/bin/python3.11", "-m", "ipykernel_launcher", "-f", "k.json"], "kernel"),
    (["python", "-c", "from multiprocessing.forkserver import main; main(['autograder.grading.run.pool'])"], "kernel"),
    (["make", "grade", "SUBMISSIONS=x"], "kernel"),
    (["make", "-n", "grade", "SUBMISSIONS=x", "DB=postgresql://grader@db/gradebook"], None),  # a dry run
    (["python", "-m", "nbgrader", "generate_assignment", "--force", "*"], None),  # no kernel: allowed
    (["python", "-m", "autograder.publish.build", "--check"], None),
    (["git", "status"], None),
])
def test_commands_are_told_apart(command, kind):
    assert start_guard.kind_of(command) == kind


def test_an_unmarked_test_that_starts_a_kernel_fails_and_a_marked_one_runs(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(pytester.path.parent) + ":" + str(start_guard.__file__).rsplit("/", 1)[0])
    pytester.makeini("[pytest]\nmarkers =\n    kernel: starts a kernel\n")
    pytester.makepyfile(test_starts="""
        import subprocess, sys
        import pytest

        # harmless (python -c runs "pass"), but its command line is a kernel's
        COMMAND = [sys.executable, "-c", "pass # ipykernel", "-m", "ipykernel_launcher"]

        def test_unmarked():
            try:
                subprocess.run(COMMAND, check=True)
            except Exception:
                pass  # the guard is not an Exception: a test cannot swallow it

        @pytest.mark.kernel
        def test_marked():
            subprocess.run(COMMAND, check=True)

        def test_other_commands_run():
            subprocess.run([sys.executable, "-c", "pass"], check=True)
    """)
    result = pytester.runpytest_subprocess("-p", "start_guard", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*StartedUnmarked*test_unmarked started a kernel*add @pytest.mark.kernel*"])

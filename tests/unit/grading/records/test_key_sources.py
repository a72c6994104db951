"""Every file grading runs is in the settings key and the canary's fingerprint: a change to any of it makes earlier
grades stale and reruns the canary.

The sources are read from the import graph (``grade_deciding_sources``), not listed by hand; a grading process
started here loads no course module outside them; and a change to the step that writes the verdict changes both
the key and the fingerprint. What grading never loads (the command line, the reports, the LMS files, the proofs,
the publishing tools) writes files from the records and the gradebook after the scores are made, so it cannot
change one: the run-time test below proves grading does not load it.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from autograder import course
from autograder.grading.records import settings
from autograder.grading.run import canary

PACKAGE = course.ROOT / "autograder"


def _sources() -> set:
    return {p.relative_to(course.ROOT).as_posix() for p in settings.grade_deciding_sources()}


def test_the_step_that_writes_the_verdict_and_the_whole_pipeline_are_in_the_key():
    sources = _sources()
    for must in ("autograder/grading/pipeline/execute.py", "autograder/grading/pipeline/learner_errors.py",
                 "autograder/grading/pipeline/hidden_tests.py", "autograder/nbgrader_config.py",
                 "autograder/grading/run/worker.py", "autograder/grading/records/items.py",
                 "autograder/checks/verdict.py", "solutions/selfcheck_common.py"):
        assert must in sources, must
    for package in ("checks", "kernel", "bugs", "reference", "grading/pipeline"):
        every = {p.relative_to(course.ROOT).as_posix() for p in (PACKAGE / package).glob("*.py")}
        assert every <= sources, sorted(every - sources)


def test_nothing_that_only_writes_reports_is_in_the_key():
    sources = _sources()
    assert not [s for s in sources if s.startswith(("autograder/grading/reports/", "autograder/proofs/"))]
    assert "autograder/grade.py" not in sources


def test_a_change_to_the_verdict_step_makes_grades_stale_and_reruns_the_canary(monkeypatch, tmp_path):
    s = settings.Settings(out=str(tmp_path), lessons=["01_warmup"])
    key, printed = s.key, canary.fingerprint(s, "01_warmup")
    original = pathlib.Path.read_text
    original_bytes = pathlib.Path.read_bytes

    def edited(self, *args, **kwargs):
        text = original(self, *args, **kwargs)
        return text + "\n# changed\n" if self.name == "execute.py" else text

    def edited_bytes(self):
        data = original_bytes(self)
        return data + b"\n# changed\n" if self.name == "execute.py" else data

    monkeypatch.setattr(pathlib.Path, "read_text", edited)
    monkeypatch.setattr(pathlib.Path, "read_bytes", edited_bytes)
    assert settings.Settings(out=str(tmp_path), lessons=["01_warmup"]).key != key
    assert canary.fingerprint(s, "01_warmup") != printed


_LOAD_WHAT_GRADING_LOADS = """
import json, sys
import nbgrader.preprocessors
from autograder.grading.pipeline import cell_metadata, execute, feedback_page, formgrader_page, learner_errors
from autograder.grading.run import worker
from autograder.checks import registry
from autograder import bugs
from autograder.kernel import hidden_cell, launcher
registry.all_tests()
bugs.CATALOG
print(json.dumps(sorted(m for m in sys.modules if m == "autograder" or m.startswith("autograder."))))
"""


@pytest.mark.slow
def test_a_grading_process_loads_no_course_module_outside_the_key():
    """What the pipeline, the worker, every lesson's hidden tests and bugs, and the kernel side import, run."""
    out = subprocess.run([sys.executable, "-c", _LOAD_WHAT_GRADING_LOADS], cwd=course.ROOT, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(course.ROOT), "PATH": "/usr/bin:/bin"})
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1])) - {"autograder"}
    in_key = {p.relative_to(course.ROOT).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
              for p in settings.grade_deciding_sources() if p.is_relative_to(PACKAGE)}
    assert loaded - in_key == set(), sorted(loaded - in_key)

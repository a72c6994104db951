"""Re-check every passed hidden test outside the learner's kernel (an nbgrader preprocessor).

The hidden tests run inside the learner's kernel, after the learner's own code, which could have rewritten
them. So ``nbgrader autograde`` (configured in ``autograder/nbgrader_config.py``) runs two preprocessors of ours
around its ``Execute`` step:

* ``ClearRecords`` (before) deletes any ``.mha-grading/`` folder that came with the submission;
* ``VerifyHiddenTests`` (after) takes every graded cell that calls ``session.run(...)`` and did not fail, reads
  the results the kernel recorded for it (``autograder.checks.record``), and runs the same hidden test again in
  the grader's own process, on those recorded results, against the reference. A cell whose record is missing
  or whose recorded results are wrong gets an error output, so nbgrader scores it 0 and the feedback says why.

Hidden-test inputs are drawn with a salt chosen afresh for each grading process (``MHA_GRADING_SALT``, passed
to the kernel through its environment), so results cannot be computed in advance and shipped in the notebook.
"""

from __future__ import annotations

import importlib
import re
import shutil
import traceback
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor as Preprocessor  # enabled by default
from nbformat.v4 import new_output

from autograder.checks import record

_RUN_CALL = re.compile(r"session\.run\(\s*[\"'](\w+)[\"']\s*,\s*[\"'](\w+)[\"']\s*,(.*?)\)\s*$", re.S | re.M)


def hidden_calls(source: str) -> list:
    """(lesson, test, [positional argument names], [keyword names]) of every ``session.run`` call in a cell."""
    calls = []
    for m in _RUN_CALL.finditer(source):
        parts = [a.strip() for a in m.group(3).split(",") if a.strip()]
        names = [a for a in parts if "=" not in a]
        keywords = [a.split("=")[0].strip() for a in parts if "=" in a]
        calls.append((m.group(1), m.group(2), names, [k for k in keywords if k != "visible_check"]))
    return calls


def _folder(resources) -> Path:
    return Path(resources.get("metadata", {}).get("path") or ".")


class ClearRecords(Preprocessor):
    """Delete records that arrived with the submission: only the kernel, while grading, may write them."""

    def preprocess(self, nb, resources):
        shutil.rmtree(_folder(resources) / record.RECORD_DIR, ignore_errors=True)
        return nb, resources


class VerifyHiddenTests(Preprocessor):
    """Re-run each passed hidden test on its recorded results; fail the cell if they do not hold up."""

    def preprocess(self, nb, resources):
        folder = _folder(resources)
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("grade"):
                continue
            if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                continue  # already scored 0 in the kernel
            for lesson, test, names, keywords in hidden_calls(cell.source):
                problem = self.recheck(folder, lesson, test, names, keywords)
                if problem:
                    cell.outputs.append(new_output("error", ename="NotVerified", evalue=problem,
                                                   traceback=[f"NotVerified: {problem}"]))
                    self.log.warning("%s: %s", meta.get("grade_id"), problem)
                    break
        shutil.rmtree(folder / record.RECORD_DIR, ignore_errors=True)
        return nb, resources

    @staticmethod
    def recheck(folder: Path, lesson: str, test: str, names, keywords=()) -> str | None:
        path = record.record_path(test, folder)
        if not path.exists():
            return ("this hidden test reported success but left no record of the results it checked, so the "
                    "notebook must have interfered with the grading code; it scores 0 and is flagged for review")
        try:
            arguments, keyword_arguments = record.replay_arguments(path, names, keywords)
            module = importlib.import_module(f"autograder.checks.{lesson}")
            getattr(module, test)(*arguments, **keyword_arguments)
        except AssertionError as exc:
            return f"re-checked outside the notebook, the recorded results are wrong: {exc}"
        except Exception as exc:  # a malformed record is the notebook's doing
            detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
            return f"the record of this hidden test could not be re-checked ({detail}); scored 0 for review"
        return None

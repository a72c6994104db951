"""Re-check every passed hidden test outside the learner's kernel (an nbgrader preprocessor).

The hidden tests run inside the learner's kernel, after the learner's own code, which could have rewritten
them. So ``nbgrader autograde`` (configured in ``autograder/nbgrader_config.py`` and by ``autograder/grade.py``)
runs ``VerifyHiddenTests`` right after its ``Execute`` step. It takes every graded cell that calls
``session.run(...)`` and did not fail, reads the record of results that the kernel displayed in that cell
(``autograder.checks.record``), and runs the same hidden test again in the grader's own process, on those
recorded results, against the reference. A cell whose record is missing or whose recorded results are wrong gets
an error output, so nbgrader scores it 0 and the feedback says why. The records are then removed from the
notebook.

Hidden-test inputs are drawn with a salt chosen afresh for each grading process (``MHA_GRADING_SALT``, passed
to the kernel through its environment), so results cannot be computed in advance and shipped in the notebook.
"""

from __future__ import annotations

import importlib
import re
import traceback

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


class VerifyHiddenTests(Preprocessor):
    """Re-run each passed hidden test on its recorded results; fail the cell if they do not hold up."""

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            meta = cell.metadata.get("nbgrader", {})
            outputs = cell.get("outputs", [])
            if meta.get("grade") and not any(o.get("output_type") == "error" for o in outputs):
                for lesson, test, names, keywords in hidden_calls(cell.source):
                    problem = self.recheck(record.from_outputs(outputs, test), lesson, test, names, keywords)
                    if problem:
                        outputs.append(new_output("error", ename="NotVerified", evalue=problem,
                                                  traceback=[f"NotVerified: {problem}"]))
                        self.log.warning("%s: %s", meta.get("grade_id"), problem)
                        break
            cell.outputs = [o for o in outputs if not record.is_record(o)]
        return nb, resources

    @staticmethod
    def recheck(blob, lesson: str, test: str, names, keywords=()) -> str | None:
        if blob is None:
            return ("this hidden test reported success but left no record of the results it checked, so the "
                    "notebook must have interfered with the grading code; it scores 0 and is flagged for review")
        try:
            arguments, keyword_arguments = record.replay_arguments(blob, names, keywords)
            module = importlib.import_module(f"autograder.checks.{lesson}")
            getattr(module, test)(*arguments, **keyword_arguments)
        except AssertionError as exc:
            return f"re-checked outside the notebook, the recorded results are wrong: {exc}"
        except Exception as exc:  # a malformed record is the notebook's doing
            detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
            return f"the record of this hidden test could not be re-checked ({detail}); scored 0 for review"
        return None

"""Error outputs a learner can read (an nbgrader preprocessor of the autograde step).

``LearnerFacingErrors`` runs right after ``SafeExecute``, so the error outputs that nbgrader stores and
scores are already the ones the feedback page shows. nbgrader scores a graded cell 0 when it has an error output:
every cell that had one keeps one, only its text changes.

* **Test cells** (graded, locked): each error becomes the single line ``ename: evalue``. Their frames would show
  the hidden test's source, the hidden checks and the reference; the diagnosis is in ``evalue``
  (``autograder/checks/runner.py`` writes it there, with the learner's own frames when their code raised).
* **A cell stopped by the timeout** (marked by ``SafeExecute``) says so in one sentence that names the function
  under test, instead of a ``KeyboardInterrupt`` traceback through the reference.
* **The learner's own cells** keep IPython's traceback, trimmed to the frames of notebook cells.
* **Every output**: absolute paths of the grading machine (the course, the grading folder, Python's
  installation, the home folder, the kernel's cell files) are replaced by ``…``.

``unread_cells`` finds, in a graded notebook, the learner's cells Python could not read (a ``SyntaxError``): none of
such a cell ran, so what it defines is undefined for every later cell and test. The feedback page leads with them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor
from nbformat.notebooknode import NotebookNode

from autograder import course
from autograder.grading.pipeline.execute import TIMED_OUT
from autograder.checks import registry

TIMEOUT_ENAME = "CellTimeoutError"  # the name nbclient gives it; the report flags it as a timeout
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CELL_FILE = re.compile(r"/tmp/ipykernel_\d+/\d+\.py")


def grading_paths() -> list:
    """Folders of the grading machine that must not appear in a learner's page, longest first."""
    found = {Path.cwd(), Path.cwd().parent, course.ROOT, Path(sys.prefix), Path(sys.base_prefix),
             Path(sys.executable).parent.parent, Path.home()}
    found |= {p.resolve() for p in found}
    names = {str(p) for p in found if len(p.parts) > 2}  # never "/" or "/tmp" alone
    return sorted(names, key=len, reverse=True)


def scrub(text: str, paths) -> str:
    """``text`` with every grading-machine path (and the kernel's temporary cell files) replaced by ``…``."""
    text = _CELL_FILE.sub("your cell", text)
    for path in paths:
        text = text.replace(path, "…")
    return text


def plain(text: str) -> str:
    return _ANSI.sub("", text)


def is_test_cell(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return bool(meta.get("grade")) and not meta.get("solution")


def function_under_test(cell, notebook: str) -> str:
    """The learner function a hidden-test cell grades (the first name its registered test uses), or ''."""
    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
    test = registry.find(notebook, grade_id)
    return test.uses[0] if test is not None and is_test_cell(cell) else ""


_UNREADABLE = ("SyntaxError", "IndentationError", "TabError")
_WHERE = re.compile(r"\s*\([^()]*, line (\d+)\)\s*$")  # str(SyntaxError) ends "(<file>, line N)"
_DEFINED = re.compile(r"^(?:async\s+def|def|class)\s+([A-Za-z_]\w*)|^([A-Za-z_]\w*)\s*(?::[^=\n]*)?=(?!=)", re.M)


def unread_cells(nb) -> list:
    """The code cells, test cells aside, that stopped with a ``SyntaxError`` (or ``IndentationError``), in order:
    ``{"cell", "ename", "message", "line", "code", "defines"}``, where ``line`` (or None) is the line Python
    stopped at, ``code`` that line of the cell, and ``defines`` the names the cell's top level would have defined."""
    found = []
    for cell in nb.cells:
        if cell.cell_type != "code" or is_test_cell(cell):
            continue
        error = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"
                      and o.get("ename") in _UNREADABLE), None)
        if error is None:
            continue
        message = plain(str(error.get("evalue", "")))
        where = _WHERE.search(message)
        line = int(where.group(1)) if where else None
        lines = cell.source.splitlines()
        found.append({"cell": cell, "ename": error["ename"], "message": message[:where.start()] if where else message,
                      "line": line, "code": lines[line - 1] if line and line <= len(lines) else "",
                      "defines": list(dict.fromkeys(a or b for a, b in _DEFINED.findall(cell.source)))})
    return found


def timeout_output(cell, seconds: int, notebook: str) -> NotebookNode:
    name = function_under_test(cell, notebook)
    if name:
        text = (f"{name} did not finish within {seconds} s on the hidden tests' inputs, so this cell was stopped "
                f"and scores 0. Look in {name} (and the functions it calls) for a loop that never ends or work "
                "that grows much faster than the input.")
    else:
        text = (f"this cell did not finish within {seconds} s, so it was stopped. Look for a loop that never "
                "ends or work that grows much faster than the input.")
    return NotebookNode(output_type="error", ename=TIMEOUT_ENAME, evalue=text, traceback=[f"{TIMEOUT_ENAME}: {text}"])


def learner_traceback(traceback: list) -> list:
    """IPython's traceback entries without the frames of files (numpy, the grading code, ...): only cells'."""
    return [entry for entry in traceback if not plain(entry).lstrip().startswith("File ")]


class LearnerFacingErrors(NbGraderPreprocessor):
    """Rewrite error outputs for the learner; see the module docstring."""

    def preprocess(self, nb, resources):
        self._paths = grading_paths()
        self._notebook = ((resources or {}).get("nbgrader") or {}).get("notebook") or ""
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        seconds = cell.metadata.pop(TIMED_OUT, None)
        outputs = list(cell.get("outputs", []))
        if seconds is not None and any(o.get("output_type") == "error" for o in outputs):
            outputs = [o for o in outputs if o.get("output_type") != "error"] + [timeout_output(cell, seconds, self._notebook)]
        test_cell = is_test_cell(cell)
        for out in outputs:
            if out.get("output_type") == "error":
                out["evalue"] = scrub(plain(str(out.get("evalue", ""))), self._paths)
                if test_cell:
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out['evalue']}"]
                else:
                    out["traceback"] = [scrub(entry, self._paths) for entry in learner_traceback(out["traceback"])]
            if isinstance(out.get("text"), str):
                out["text"] = scrub(out["text"], self._paths)
            for mime, value in (out.get("data") or {}).items():
                if isinstance(value, str) and (not mime.startswith("image/") or mime == "image/svg+xml"):
                    out["data"][mime] = scrub(value, self._paths)
        cell.outputs = outputs
        return cell, resources


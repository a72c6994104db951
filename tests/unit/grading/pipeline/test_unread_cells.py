"""``learner_errors.unread_cells``: the learner's cells that Python could not read, found from the error outputs
IPython stores (``ename``, and ``evalue`` = ``str`` of the exception, ending with the cell file and the line), with
the line and the names the cell would have defined; a test cell, or a cell that ran and raised, is not one.
The graded path (a real notebook, its feedback page) is tests/grading/test_feedback_page.py."""

from __future__ import annotations

import nbformat
import pytest

from autograder.grading.pipeline import learner_errors


def _cell(source: str, nbgrader=None):
    """A code cell holding ``source`` with the error output IPython stores when it runs it (if it raises)."""
    cell = nbformat.v4.new_code_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    try:
        exec(compile(source, "/tmp/ipykernel_1/2131231.py", "exec"), {})
    except Exception as exc:  # noqa: BLE001 - whatever the cell raises is its output
        cell.outputs = [nbformat.v4.new_output("error", ename=type(exc).__name__, evalue=str(exc), traceback=[])]
    return cell


@pytest.mark.parametrize("source, ename, line, names", [
    ("import math\n\ndef softmax(x):\n    return x +\n\nclass Head:\n    pass\nscale: float = 2.0\n",
     "SyntaxError", 4, ["softmax", "Head", "scale"]),
    ("def split_heads(x, h):\nreturn x\n", "IndentationError", 2, ["split_heads"]),
])
def test_a_cell_that_does_not_parse_is_found_with_its_line_and_names(source, ename, line, names):
    nb = nbformat.v4.new_notebook(cells=[_cell("x = 1\n"), _cell(source, {"solution": True, "grade": False})])
    (found,) = learner_errors.unread_cells(nb)
    assert (found["ename"], found["line"], found["defines"]) == (ename, line, names)
    assert found["code"] == source.splitlines()[line - 1] and ".py, line" not in found["message"]
    assert "2131231" not in found["message"] and found["message"]


def test_a_cell_that_ran_and_raised_or_a_test_cell_is_not_one():
    nb = nbformat.v4.new_notebook(cells=[
        _cell("def f():\n    return 1\nf() + None\n"),  # parsed, ran, raised TypeError
        _cell("assert (1 +\n", {"grade": True, "solution": False, "points": 1}),  # a test cell
    ])
    assert [c.outputs[0].ename for c in nb.cells] == ["TypeError", "SyntaxError"]
    assert learner_errors.unread_cells(nb) == []

"""What one notebook may cost the grader's process, without a kernel: the limits read before a notebook is parsed
(``size_limits.NotebookLimits``), a static scan that never raises, reads a bounded amount of code in each cell and each
notebook, and costs time linear in it, even on code built to make it backtrack or walk again (``code_scan``), and a
structure check linear in the number of cells (``findings.structure_flags``).

The grading command's handling of the same notebooks, beside honest students, is ``tests/grading/test_swamp.py``.
"""

from __future__ import annotations

import ast
import json
import sys
import time
import tracemalloc

import nbformat
import pytest
from cost import fastest

from autograder import course
from autograder.grading.intake import class_folder, code_scan, file_access, size_limits
from autograder.grading.records import findings
from autograder.grading.records.settings import Settings

LESSON = "01_warmup"
LIMITS = size_limits.NotebookLimits(max_bytes=2**20, max_cells=50, max_cell_output=2**16, max_output=2**18)


def _notebook(cells=3, outputs=()):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"cell {i}", id=f"m{i}") for i in range(cells)]
    for i, size in enumerate(outputs):
        cell = nbformat.v4.new_code_cell("print()", id=f"o{i}")
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * size)]
        nb.cells.append(cell)
    return nb


def _write(tmp_path, nb, name="01_warmup.ipynb"):
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def test_a_notebook_within_the_limits_is_read(tmp_path):
    data, nb = file_access.read_notebook(_write(tmp_path, _notebook(outputs=[1000])), LIMITS)
    assert len(nb.cells) == 4 and json.loads(data)["nbformat"] == 4


@pytest.mark.parametrize("nb, phrase", [
    (_notebook(cells=51), "notebook over 50 cells: 01_warmup.ipynb has 51"),
    (_notebook(outputs=[2**16 + 10]), "stored output over 64 KB in one cell: cell 4 of 01_warmup.ipynb"),
    (_notebook(outputs=[2**16 - 100] * 5), "stored output over 256 KB: 01_warmup.ipynb"),
])
def test_a_notebook_past_a_limit_is_refused_naming_it(tmp_path, nb, phrase):
    with pytest.raises(size_limits.OverLimit, match=phrase):
        file_access.read_notebook(_write(tmp_path, nb), LIMITS)
    assert class_folder._read_check(tmp_path / "01_warmup.ipynb", LIMITS).startswith(phrase)


def test_a_file_over_the_byte_limit_is_refused_from_its_size_without_being_read(tmp_path):
    path = tmp_path / "01_warmup.ipynb"
    with path.open("wb") as fh:
        fh.truncate(64 * 2**20)  # 64 MB of zeros: reading it would show in the peak
    tracemalloc.start()
    try:
        with pytest.raises(size_limits.OverLimit, match=r"notebook over 1 MB: 01_warmup.ipynb is 64 MB"):
            file_access.read_notebook(path, LIMITS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20


def test_the_byte_limit_is_a_setting_and_bounds_the_output_limits():
    assert Settings(out="/tmp/x", lessons=[LESSON]).notebook_limits == size_limits.NotebookLimits()
    assert size_limits.NotebookLimits().max_bytes == 20 * 2**20
    small = Settings(out="/tmp/x", lessons=[LESSON], max_notebook_mb=2).notebook_limits
    assert (small.max_bytes, small.max_cell_output, small.max_output) == (2 * 2**20,) * 3


def test_the_course_notebooks_are_well_within_the_limits():
    limits = size_limits.NotebookLimits()
    for path in sorted(course.LESSONS.glob("*.ipynb")):
        raw = json.loads(path.read_bytes())
        assert len(raw["cells"]) * 10 < limits.max_cells, path.name
        assert size_limits.over_limit(raw, path.name, limits) == ""


@pytest.mark.parametrize("source", [
    "x = " + "+".join(["1"] * 60_000),  # parses; no recursive walk of it ends
    "x = " + "-" * 60_000 + "1",  # the parser's own stack overflows (MemoryError)
    "f" + "(x)" * 30_000,
    "x = " + "not " * 40_000 + "y",
])
def test_the_scan_never_raises_on_deep_code_and_says_it_could_not_scan(source):
    found = code_scan.scan_source(source)
    assert any("could not be scanned" in f for f in found), found


def test_the_scan_reads_a_bounded_amount_of_code():
    found = code_scan.scan_source("x = 1\n" * (code_scan.MAX_SCANNED_CHARS // 6 + 1))
    assert found and "could not be scanned" in found[0]
    assert code_scan.scan_source("import os\nos.system('ls')") == ["calls os.system() (files or processes)"]


def test_a_notebook_with_deep_code_is_scanned_cell_by_cell():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = " + "+".join(["1"] * 60_000)),
                nbformat.v4.new_code_cell("import sys\nsys.exit()")]
    found = code_scan.scan_notebook(nb)
    assert any("could not be scanned" in f for f in found) and "calls sys.exit() (leaves or kills the kernel)" in found


def _many_cells(n):
    """A notebook of ``n`` cells, half of them sharing one grade_id (the duplicate check's worst case)."""
    return nbformat.from_dict({"metadata": {}, "nbformat": 4, "nbformat_minor": 5, "cells": [
        {"cell_type": "code", "source": "x = 1", "outputs": [], "execution_count": None,
         "metadata": {"nbgrader": {"grade_id": "softmax_test" if i % 2 else f"c{i}"}}} for i in range(n)]})


def test_the_structure_check_is_linear_in_the_number_of_cells():
    released = nbformat.read(course.LESSONS / f"{LESSON}.ipynb", as_version=4)
    small, big = _many_cells(1_000), _many_cells(10_000)

    def best(nb):
        times = []
        for _ in range(3):
            started = time.perf_counter()
            flags = findings.structure_flags(nb, released)
            times.append(time.perf_counter() - started)
        assert "duplicated grade_ids: softmax_test" in flags
        return min(times)

    ratio = best(big) / best(small)
    assert ratio < 30, ratio  # 10 times the cells: about 10 times the time when linear, 100 when quadratic


def test_a_check_that_fails_on_one_notebook_is_a_flag_not_an_exception():
    from autograder.grading.run import workspace

    released = nbformat.read(course.LESSONS / f"{LESSON}.ipynb", as_version=4)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = " + "+".join(["1"] * 60_000)), nbformat.v4.new_code_cell("y = 1")]
    nb.cells[1].metadata["nbgrader"] = 5  # not a mapping: the learner's own cell, flagged
    flags = workspace._flags(nb, nb, released)
    assert "nbgrader metadata without a grade_id, or not a mapping, on 1 cells" in flags
    assert any("could not be scanned" in f for f in flags)
    nb.cells[1]["metadata"] = 5  # not even a cell's metadata: the structure check cannot read it
    flags = workspace._flags(nb, nb, released)
    assert flags[0].startswith("test cells could not be compared with the release (AttributeError)")


# Code built so that a scan that backtracks or walks a subtree again at each node costs the square of its size; each
# takes the size ``n`` and stays within one cell.
_COSTLY_STRING = "kernel-strings"  # one connection-file pattern tried from every "kernel-" to the end of the string
_COSTLY = {
    _COSTLY_STRING: lambda n: "s = '" + "kernel-" * (3_000 * n) + "'\nt = 'kernel-1.json'\n",
    # each call in a chain named by rendering the chain below it
    "call-chains": lambda n: "\n".join(f"x{i} = get_ipython().set_custom_exc()" + ".set_custom_exc()" * (18 * n)
                                       for i in range(40)),
    # each open() quoted by rendering the calls inside it
    "nested-writes": lambda n: "\n".join("open(" * (24 * n) + "'f'" + ", 'w')" * (24 * n) for _ in range(40)),
    # each __eq__ walking the definitions nested inside it
    "nested-eq": lambda n: "".join(" " * i + "def __eq__(self, o):\n" for i in range(10 * n))
                           + " " * (10 * n) + "return True; " * (1_000 * n),
}


def _walked(monkeypatch, source) -> tuple:
    """(the findings, how many times the scan visited a node or listed a node's children): its work on the code,
    counted whatever walks it (the scan's own visitor, a rendering of code, ``ast.walk``)."""
    steps = []
    visit, children, depth = ast.NodeVisitor.visit, ast.iter_child_nodes, sys.getrecursionlimit()
    monkeypatch.setattr(ast.NodeVisitor, "visit", lambda self, node: steps.append(1) or visit(self, node))
    monkeypatch.setattr(ast, "iter_child_nodes", lambda node: steps.append(1) or children(node))
    sys.setrecursionlimit(2 * depth)  # the counting adds a frame to each visit
    try:
        return code_scan.scan_source(source), len(steps)
    finally:
        sys.setrecursionlimit(depth)
        monkeypatch.undo()


@pytest.mark.parametrize("name", sorted(_COSTLY))
def test_the_scan_costs_linear_work_on_code_built_to_make_it_quadratic(name, monkeypatch):
    small_source, big_source = _COSTLY[name](1), _COSTLY[name](8)
    assert 7 < len(big_source) / len(small_source) < 9 and len(big_source) <= code_scan.MAX_SCANNED_CHARS
    if name == _COSTLY_STRING:  # a pattern's backtracking is seen only in time: the fastest of five runs
        (small, small_cost), (big, big_cost) = (fastest(code_scan.scan_source, small_source),
                                                fastest(code_scan.scan_source, big_source))
    else:  # a walk's work is counted
        (small, small_cost), (big, big_cost) = _walked(monkeypatch, small_source), _walked(monkeypatch, big_source)
    assert set(big) == set(small) and not any("could not" in f for f in big), (small, big)
    ratio = big_cost / small_cost
    assert ratio < 24, ratio  # 8 times the code: about 8 times the cost when linear, 64 when quadratic


def test_the_scan_names_what_the_costly_code_does():
    kernel_file = "reads the process table or kernel files ('kernel-1.json')"
    assert code_scan.scan_source(_COSTLY["kernel-strings"](1)) == [kernel_file]
    assert code_scan.scan_source(_COSTLY["call-chains"](1)) == [
        "changes the kernel with get_ipython().set_custom_exc()"] * 40
    assert code_scan.scan_source(_COSTLY["nested-writes"](1))[0] == "writes a file (" + ("open(" * 24)[:80] + ")"
    assert "defines an __eq__ that always returns True" in code_scan.scan_source(_COSTLY["nested-eq"](1))


def test_the_scan_of_one_notebook_parses_a_bounded_amount_of_code(monkeypatch):
    parsed = []
    real_parse = code_scan.ast.parse
    monkeypatch.setattr(code_scan.ast, "parse",
                        lambda code, *a, **k: parsed.append(len(code)) or real_parse(code, *a, **k))
    filler = "x = 1\n" * (code_scan.MAX_SCANNED_CHARS // 6 - 1)  # within one cell's limit
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import os\nos.system('ls')")]
    nb.cells += [nbformat.v4.new_code_cell(filler) for _ in range(10)]
    found = code_scan.scan_notebook(nb)
    assert sum(parsed) <= code_scan.MAX_NOTEBOOK_CHARS and len(parsed) < len(nb.cells)
    skipped = len(nb.cells) - len(parsed)
    assert found[0] == "calls os.system() (files or processes)"
    assert found[-1].startswith(f"the notebook could not be fully scanned: {skipped} cells were not read"), found


def test_the_scan_names_calls_through_a_chain_of_calls():
    found = code_scan.scan_source("import IPython, subprocess\nIPython.get_ipython().events.register('x', print)\n"
                                  "subprocess.Popen(['ls']).communicate()\n")
    assert found == ["changes the kernel with get_ipython().events.register()",
                     "calls subprocess.Popen() (files or processes)"], found


def _empties(tmp_path, count: int, nested=False):
    """A notebook whose only payload is ``count`` empty objects in one cell's metadata (or nested that deep)."""
    payload = "[" * count + "]" * count if nested else "[" + ",".join(["{}"] * count) + "]"
    nb = json.loads(nbformat.writes(_notebook()))
    nb["cells"][0]["metadata"]["settings"] = "PAYLOAD"
    path = tmp_path / "01_warmup.ipynb"
    path.write_text(json.dumps(nb).replace('"PAYLOAD"', payload))
    return path


def test_a_notebook_of_millions_of_empty_objects_is_refused_before_anything_parses_it(tmp_path):
    """2 million ``{}`` (6 MB): counted in the bytes, refused naming the limit, and the check's peak memory is a few
    times the file's size (parsing it would build 2 million dicts, some 130 MB in Python before nbformat copies them)."""
    path = _empties(tmp_path, 2_000_000)
    limits = size_limits.NotebookLimits()
    tracemalloc.start()
    try:
        with pytest.raises(size_limits.OverLimit, match=r"notebook over 100,000 JSON objects and arrays: "
                                                   r"01_warmup.ipynb holds 2,000,0[0-9][0-9]"):
            file_access.read_notebook(path, limits)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5 * path.stat().st_size, peak


def test_json_nested_too_deep_is_refused_and_the_lessons_are_far_within_both_limits(tmp_path):
    with pytest.raises(size_limits.OverLimit, match="nested over 100 levels deep: 01_warmup.ipynb nests its JSON 1,00"):
        file_access.read_notebook(_empties(tmp_path, 1_000, nested=True), size_limits.NotebookLimits())
    for path in course.LESSONS.glob("*.ipynb"):
        opened, depth = size_limits.json_shape(path.read_bytes(), 10**9)
        assert opened < 1_000 and depth < 10, (path.name, opened, depth)


@pytest.mark.parametrize("text, shape", [
    (b'{"a": [1, {"b": "x\\"}{["}], "c": "\\\\"}', (3, 3)),  # brackets and escaped quotes inside strings
    (b'[[], {}, "[[[", "\\\\\\"{"]', (3, 2)),
    (b'"unterminated {[', (0, 0)),  # a string runs to the end of the text
    (b'["\\', (1, 1)),  # a backslash as the last byte
])
def test_json_shape_counts_only_brackets_outside_strings(text, shape):
    assert size_limits.json_shape(text, 100) == shape


@pytest.mark.parametrize("unit", [b'"\\"', b'\\"', b'"{'])
def test_json_shape_reads_each_byte_once_whatever_the_text(unit):
    """Texts built to make a string pattern start again at every quote: 4 times the text costs about 4 times
    (a pattern that started again would cost 16 times)."""
    small, large = unit * 500_000, unit * 2_000_000
    ratio = (fastest(size_limits.json_shape, large, 10**9, runs=3)[1]
             / fastest(size_limits.json_shape, small, 10**9, runs=3)[1])
    assert ratio < 10, ratio

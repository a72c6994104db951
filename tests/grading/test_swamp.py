"""One notebook cannot stop, stall or swamp the class: notebooks built to crash the static scan or the structure
checks, to outgrow what the scan reads, to print past the output limits, or past a size limit, graded in one batch
beside honest ones through the grading command itself (``autograder.grade.main``, what ``make grade`` runs).

Each attacker is its own outcome, flagged with what happened (a notebook past a limit is ``malformed``, scores 0
and its flag names the limit; one that prints too much keeps its score, its output cut to the limit); the honest
students keep their full marks, the originals are untouched, and the command exits normally (status 0).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import nbformat
import pytest
from grading_helpers import with_cell
from run_once import once

from autograder import grade
from autograder.bugs import by_id
from autograder.course import answers, notebooks
from autograder.grading.intake import code_scan, integrity, size_limits

LESSON = "01_warmup"
FULL = 8.0  # lesson 01's autograded points (tests/grading/test_grading_lesson01.py)
pytestmark = [pytest.mark.grading]
LIMITS = size_limits.NotebookLimits()
DEEP = "deep = " + "+".join(["1"] * 60_000)  # parses, but no recursive walk of it ends
NOTEBOOK_OUTPUT = 4_000_000  # --max-notebook-output of the batch
MISNESTED = "<b><i></b></i>"
HUGE_PROMPT = answers.model_answers(LESSON)["softmax"].replace(
    '    """', '    if not globals().get("_asked"):\n        globals()["_asked"] = True\n'
    '        input("x" * 80_000_000)\n    """', 1)
EMPTY_DISPLAYS = ("from IPython.display import display\nfor _ in range(40):\n"
                  "    display({'text/plain': ''}, raw=True, metadata={'settings': [[]] * 1_000_000})")
OVERFLOW_SOFTMAX = by_id("softmax_no_max_subtraction").source  # loses softmax_stable, 1 point (test_hostile.py)


def _padded(nb, cells: int):
    """``nb`` with ``cells`` more markdown cells at its end."""
    nb.cells += [nbformat.v4.new_markdown_cell(f"note {i}") for i in range(cells)]
    for i, cell in enumerate(nb.cells):
        cell["id"] = cell.get("id") or f"pad-{i}"
    return nb


def _with_output(nb, sizes):
    """``nb`` with one learner cell per size, each storing a stream output of that many bytes."""
    for i, size in enumerate(sizes):
        cell = nbformat.v4.new_code_cell(f"print('x' * {size})", id=f"out-{i}")
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * size)]
        nb.cells.append(cell)
    return nb


def _class(root: Path) -> dict:
    """Write the class; return {student: (status, score, a phrase its flags must hold)}."""
    expected, nbs = {}, {}
    nbs["honest_a"], expected["honest_a"] = answers.fill(LESSON), ("graded", FULL, "")
    nbs["honest_b"], expected["honest_b"] = answers.fill(LESSON), ("graded", FULL, "")
    # an expression too deep to walk crashed the static scan, and with it the run, before anyone was graded
    nbs["deep_expression"] = with_cell(answers.fill(LESSON), "softmax", DEEP)
    expected["deep_expression"] = ("graded", FULL, "could not be scanned")
    # nbgrader metadata that is not a mapping crashed the structure checks for the whole class; the cell is the
    # learner's own, and the work around it is graded
    odd = with_cell(answers.fill(LESSON), "softmax", "x = 1")
    next(c for c in odd.cells if c.source == "x = 1").metadata["nbgrader"] = 5
    nbs["odd_metadata"] = odd
    expected["odd_metadata"] = ("graded", 8.0, "nbgrader metadata without a grade_id, or not a mapping, on 1 cells")
    nbs["many_cells"] = _padded(answers.fill(LESSON), LIMITS.max_cells)
    expected["many_cells"] = ("malformed", 0.0, f"notebook over {LIMITS.max_cells:,} cells")
    nbs["cell_output"] = _with_output(answers.fill(LESSON), [LIMITS.max_cell_output + 1])
    expected["cell_output"] = ("malformed", 0.0, "stored output over 5 MB in one cell")
    per_cell = LIMITS.max_output // 4 - 2**19  # each within the cell limit, all within the file's
    nbs["all_output"] = _with_output(answers.fill(LESSON), [per_cell] * (LIMITS.max_output // per_cell + 1))
    expected["all_output"] = ("malformed", 0.0, "stored output over 16 MB:")
    # code the scan reads only in part (more than it reads in one notebook, each cell within its limit), and
    # markdown that made the sanitiser of its feedback page quadratic (about 40 s)
    nbs["unscanned"] = answers.fill(LESSON)
    for i in range(code_scan.MAX_NOTEBOOK_CHARS // code_scan.MAX_SCANNED_CHARS + 1):
        with_cell(nbs["unscanned"], "softmax", f"s{i} = '" + "kernel-" * (code_scan.MAX_SCANNED_CHARS // 8) + "'")
    nbs["unscanned"].cells.append(nbformat.v4.new_markdown_cell(MISNESTED * 30_000, id="misnested"))
    expected["unscanned"] = ("graded", FULL, "the notebook could not be fully scanned")
    # an error far over the cell's output limit, then more output than the notebook's limit, cell by cell: the
    # wrong softmax before them still loses its point
    loud = answers.fill(LESSON, {"softmax": OVERFLOW_SOFTMAX})
    for _ in range(2 * NOTEBOOK_OUTPUT // 500_000):
        with_cell(loud, "softmax", "print('y' * 500_000)")
    nbs["loud"] = with_cell(loud, "softmax", "raise Exception('x' * 30_000_000)")
    expected["loud"] = ("graded", FULL - 1, "output limit: the notebook's output reached 4,000,000 bytes in all")
    # displays whose metadata is a million empty lists each (3 MB of JSON that once counted 0 towards the caps:
    # a 110 MB graded notebook): counted as their JSON, the first is over the cell's cap and none is kept
    nbs["empty_displays"] = with_cell(answers.fill(LESSON), "softmax", EMPTY_DISPLAYS)
    expected["empty_displays"] = ("graded", FULL, "output truncated: printed more than the per-cell output limit")
    # a softmax that first sends an 80 MB prompt up the stdin channel, the hidden tests' channel, while its test
    # runs (three 300 MB prompts once took the grader's process to 1 GB): dropped before the grader reads it, the
    # kernel waits until the cell's time limit, and only that cell is lost
    nbs["huge_prompt"] = answers.fill(LESSON, {"softmax": HUGE_PROMPT})
    expected["huge_prompt"] = ("graded", FULL - 2, "timeout")
    for student, nb in nbs.items():
        notebooks.write_notebook(nb, root / student / f"{LESSON}.ipynb")
    big = root / "too_big" / f"{LESSON}.ipynb"  # past the byte limit: never read, whatever it holds
    big.parent.mkdir(parents=True)
    with big.open("wb") as fh:
        fh.truncate(LIMITS.max_bytes + 1)
    expected["too_big"] = ("malformed", 0.0, "notebook over 20 MB:")
    # 6 million empty objects in one cell's metadata (18 MB, within the byte limit): parsed, they cost the grader's
    # process 10 GB and a worker 17.6 GB, and the run 670 s; counted in the bytes, the notebook is never parsed
    empties = json.loads(nbformat.writes(answers.fill(LESSON)))
    empties["cells"][0]["metadata"]["settings"] = "PAYLOAD"
    text = json.dumps(empties).replace('"PAYLOAD"', "[" + ",".join(["{}"] * 6_000_000) + "]")
    (root / "empty_objects").mkdir()
    (root / "empty_objects" / f"{LESSON}.ipynb").write_text(text)
    expected["empty_objects"] = ("malformed", 0.0, "notebook over 100,000 JSON objects and arrays")
    return expected


def _grade_batch(base: Path) -> dict:
    root, out = base / "class", base / "out"
    expected = _class(root)
    originals = integrity.tree_hashes(root)
    status = grade.main([str(root), "--out", str(out), "--lessons", LESSON, "--workers", "2", "--timeout", "20",
                         "--max-notebook-output", str(NOTEBOOK_OUTPUT), "--quiet"])
    with (out / "grades.csv").open() as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    loud = out / "course" / "autograded" / "loud" / LESSON / f"{LESSON}.ipynb"
    deep = out / "course" / "autograded" / "deep_expression" / LESSON / f"{LESSON}.ipynb"
    empty = out / "course" / "autograded" / "empty_displays" / LESSON / f"{LESSON}.ipynb"
    return {"status": status, "rows": rows, "expected": expected, "unchanged": originals == integrity.tree_hashes(root),
            "staged": sorted(p.parent.parent.name for p in (out / "course" / "submitted").glob(f"*/{LESSON}/*.ipynb")),
            "loud_bytes": loud.stat().st_size, "empty_displays_bytes": empty.stat().st_size,
            "unscanned_page": (out / "feedback" / "unscanned" / f"{LESSON}.html").read_text(encoding="utf-8"),
            "loud_outputs": [o for c in nbformat.read(loud, as_version=4).cells for o in c.get("outputs", [])],
            "deep_outputs": [o for c in nbformat.read(deep, as_version=4).cells if c.source == DEEP
                             for o in c.get("outputs", [])]}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return once(tmp_path_factory, "swamp", _grade_batch)


def test_the_run_ends_normally_and_grades_everyone(batch):
    assert batch["status"] == 0
    assert set(batch["rows"]) == set(batch["expected"])
    assert batch["unchanged"]


@pytest.mark.parametrize("student", ["honest_a", "honest_b", "deep_expression", "odd_metadata", "many_cells",
                                     "cell_output", "all_output", "too_big", "unscanned", "loud", "empty_objects",
                                     "empty_displays", "huge_prompt"])
def test_each_notebook_is_its_own_outcome(batch, student):
    row, (status, score, flag) = batch["rows"][student], batch["expected"][student]
    assert (row[f"{LESSON} status"], float(row[f"{LESSON} score"])) == (status, score), row
    assert flag in row["flags"], row["flags"]
    if not flag:
        assert "malformed" not in row["flags"] and "could not" not in row["flags"], row["flags"]


def test_a_cell_too_deep_to_compile_fails_at_once_as_the_learners_own_error(batch):
    """IPython's first compile of such a cell (to see whether it awaits) raised outside its handlers, ipykernel never
    replied, and the cell ran to the timeout, whose interrupt could cost the next, honest cell its points; the
    kernel's compile guard (``sandbox.compile_guard_line``) makes it an error of that cell alone."""
    errors = [o["ename"] for o in batch["deep_outputs"] if o["output_type"] == "error"]
    assert errors == ["RecursionError"], batch["deep_outputs"]
    assert "timeout" not in batch["rows"]["deep_expression"]["flags"], batch["rows"]["deep_expression"]["flags"]


def test_a_notebook_past_a_limit_is_never_staged_for_grading(batch):
    assert batch["staged"] == ["deep_expression", "empty_displays", "honest_a", "honest_b", "huge_prompt", "loud",
                               "odd_metadata", "unscanned"]


def test_output_past_the_limits_is_cut_and_the_graded_notebook_stays_bounded(batch):
    assert batch["loud_bytes"] < NOTEBOOK_OUTPUT + 2**20  # the notebook's own cells take under 1 MB
    assert batch["empty_displays_bytes"] < 2 * 2**20  # 40 displays of 3 MB each: none kept
    errors = [o for o in batch["loud_outputs"] if o["output_type"] == "error" and o["ename"] == "Exception"]
    assert len(errors) == 1 and 0 < len(errors[0]["evalue"]) < 2_000, errors  # the cell still failed, briefly
    assert "output truncated: printed more than the per-cell output limit" in batch["rows"]["loud"]["flags"]
    dropped = [o for o in batch["loud_outputs"] if "output dropped" in o.get("text", "")]
    assert len(dropped) == 1, dropped


def test_markup_that_would_stall_the_feedback_page_is_shown_as_text(batch):
    shown = MISNESTED.replace("<", "&lt;").replace(">", "&gt;")
    assert shown * 100 in batch["unscanned_page"] and MISNESTED not in batch["unscanned_page"]

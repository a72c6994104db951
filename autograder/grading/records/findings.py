"""What happened to one graded notebook, as short flags for the report, and the copy of it that nbgrader grades.

``structure_flags`` compares the submitted notebook with the released one (test and locked cells edited, deleted or
with changed nbgrader metadata, cells claiming grade_ids the release does not have or twice, code placed before the
setup cell; one pass over the cells, linear in their number). ``restore_metadata`` makes the copy nbgrader grades:
the released nbgrader metadata on the first cell claiming each released grade_id, none on any other cell, so no
metadata a notebook carries can make nbgrader fail (the learner's tampering is then the learner's outcome, flagged,
never a grading error); and the release's opening (its code cells up to and including the setup cell) before any
other code cell, so no code of the learner's runs before the setup cell.
``run_flags`` reads the autograded notebook (timeouts, dead kernel, memory limit, tampering refused by the hidden
tests, a course module whose import the notebook broke, ``sys.exit``, truncated output). ``given_elsewhere`` flags a
graded function whose answer is another lesson's given code, unchanged (it earns the points: the instructor
decides).
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Mapping

from nbformat.v4 import new_code_cell

from autograder.checks import registry
from autograder.course import notebooks
from autograder.grading.pipeline.execute import KERNEL_DIED, NOT_RUN, TRUNCATED_MARKER
from autograder.grading.records.outcome import SETUP, course_import_error

_META_KEYS = ("grade", "solution", "locked", "points", "grade_id", "task")


def _nbgrader(cell):
    return cell.get("metadata", {}).get("nbgrader")


def claimed_id(cell) -> str | None:
    """The grade_id a cell claims: its nbgrader metadata's, when that metadata is a mapping and the id a string."""
    meta = _nbgrader(cell)
    gid = meta.get("grade_id") if isinstance(meta, Mapping) else None
    return gid if isinstance(gid, str) and gid else None


def _cells(nb) -> dict:
    """{grade_id: the first cell claiming it}."""
    cells: dict = {}
    for cell in nb.cells:
        gid = claimed_id(cell)
        if gid:
            cells.setdefault(gid, cell)
    return cells


def _meta(cell) -> str:
    meta = _nbgrader(cell)
    return json.dumps({k: meta.get(k) for k in _META_KEYS}, sort_keys=True, default=repr)


def structure_flags(submitted, released) -> list:
    sub, rel = _cells(submitted), _cells(released)
    flags = []
    deleted = [gid for gid, cell in rel.items() if gid not in sub and cell.metadata["nbgrader"].get("locked")]
    if deleted:
        flags.append("deleted locked/test cells: " + ", ".join(deleted))
    edited = [gid for gid, cell in rel.items() if gid in sub and cell.metadata["nbgrader"].get("locked")
              and sub[gid].source.strip() != cell.source.strip()]
    if edited:
        flags.append("edited locked/test cells: " + ", ".join(edited))
    changed = [gid for gid, cell in rel.items() if gid in sub and _meta(sub[gid]) != _meta(cell)]
    if changed:
        flags.append("changed nbgrader metadata of: " + ", ".join(changed))
    retyped = [gid for gid, cell in rel.items() if gid in sub and sub[gid].cell_type != cell.cell_type]
    if retyped:
        flags.append("changed cell type of: " + ", ".join(retyped))
    fake = [gid for gid, cell in sub.items() if gid not in rel and (_nbgrader(cell).get("locked")
                                                                     or _nbgrader(cell).get("grade"))]
    if fake:
        flags.append("fake locked/test cells (grade_ids not in the release): " + ", ".join(fake[:5]))
    unknown = [gid for gid in sub if gid not in rel and gid not in fake]
    if unknown:
        flags.append("cells with unknown grade_ids: " + ", ".join(unknown[:5]))
    ids = Counter(claimed_id(c) for c in submitted.cells)
    dupes = sorted(i for i, n in ids.items() if i and n > 1)  # counted once each: linear in the cells
    if dupes:
        flags.append("duplicated grade_ids: " + ", ".join(dupes[:5]))
    broken = sum(1 for c in submitted.cells if "nbgrader" in c.get("metadata", {}) and not claimed_id(c))
    if broken:
        flags.append(f"nbgrader metadata without a grade_id, or not a mapping, on {broken} cells")
    early = _before_setup(submitted, opening(released))
    if early:
        flags.append(f"code placed before the setup cell, run after it: {early} cells")
    return flags


def opening(released) -> list:
    """The grade_ids of the release's code cells up to and including the setup cell, in order: the cells that run
    before any code of the learner's (empty when the release has no setup cell)."""
    ids = []
    for cell in released.cells:
        gid = claimed_id(cell)
        if cell.cell_type == "code" and gid:  # every lesson's are locked cells (tests/unit/grading/records/test_outcome_rules.py)
            ids.append(gid)
            if gid == SETUP:
                return ids
    return []


def _before_setup(submitted, ids) -> int:
    """How many code cells of the learner's the submitted notebook has before its setup cell."""
    seen, count = set(), 0
    for cell in submitted.cells:
        gid = claimed_id(cell)
        if gid == SETUP:
            return count
        if cell.cell_type == "code":
            count += gid not in ids or gid in seen
            seen.add(gid)
    return 0  # no setup cell: the released one is added first


def given_elsewhere(lesson: str, autograded) -> list:
    """A flag for each function of ``lesson`` that a hidden test grades and whose answer cell holds another lesson's
    given code of it, unchanged but for layout, comments and docstring (``notebooks.given_functions``): when lessons
    are released together, lesson 07's working ``softmax`` pasted into lesson 01 earns lesson 01's points. It is
    correct, so it keeps them; the flag lets the instructor see whose work it is."""
    import ast

    graded = {n for t in registry.tests_of(lesson).values() for n in (*t.uses, *t.together)}
    given, flags = notebooks.given_functions(), []
    for cell in autograded.cells:
        if cell.cell_type != "code" or not (_nbgrader(cell) or {}).get("solution"):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in graded:
                where = [other for other, _ in given.get(notebooks.function_fingerprint(node), ()) if other != lesson]
                if where:
                    flags.append(f"given code of another lesson: {node.name} is the code lesson {', '.join(where)} "
                                 "gives, pasted unchanged; it earns this lesson's points, so check that the work is "
                                 "the learner's own")
    return flags


def run_flags(autograded) -> list:
    flags, seen = [], set()

    def add(flag):
        if flag not in seen:
            seen.add(flag)
            flags.append(flag)

    for cell in autograded.cells:
        locked = bool((_nbgrader(cell) or {}).get("locked"))
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind == "error":
                ename, evalue = out.get("ename", ""), out.get("evalue", "")
                if ename == "CellTimeoutError" or (ename == "KeyboardInterrupt"):
                    add("timeout: a cell ran past the per-cell time limit and was interrupted")
                elif ename == KERNEL_DIED:
                    add("kernel died (sys.exit/os._exit/exit()/kill/crash); later cells not run")
                elif ename == NOT_RUN and "ignored the interrupt" in evalue:
                    add("kernel stopped: it ignored the interrupt after a timeout; later cells not run")
                elif "MemoryError" in ename:
                    add("memory limit: an allocation exceeded the kernel's memory limit")
                elif ename == "Tampered":
                    add("tampering refused by the hidden tests: " + evalue[:300])
                elif locked and course_import_error(out):
                    add(f"broke the import of the course's module {course_import_error(out)!r}: the notebook's "
                        "own code changed sys.modules, sys.path or a module of that name, and the cells that need it "
                        "failed")
                elif ename == "SystemExit":
                    add("calls sys.exit()")
            elif kind == "stream" and TRUNCATED_MARKER in out.get("text", ""):
                add("output truncated: printed more than the per-cell output limit")
    return flags


def restore_metadata(submitted, released):
    """The submitted notebook as nbgrader is to grade it: the first cell claiming each released grade_id gets that
    cell's released nbgrader metadata and cell type; every other cell (a grade_id the release does not have or that
    an earlier cell claimed, a fake locked cell, metadata that is not a mapping) loses its nbgrader metadata and is
    the learner's own cell. nbgrader then restores the locked cells' sources (and adds deleted ones back).

    The release's opening (``opening``: the code cells up to and including the setup cell) is placed, in the release's
    order, before the notebook's first code cell, and an opening cell the notebook lacks is added there: the learner's
    code cells placed above the setup cell run after it, so the setup cell runs in a kernel no code of the learner's
    has touched, and whatever makes it fail is the grader's (``outcome.grading_error``)."""
    rel = _cells(released)
    nb = copy.deepcopy(submitted)
    kept = set()
    for cell in nb.cells:
        gid = claimed_id(cell)
        if gid not in rel or gid in kept:
            cell.metadata.pop("nbgrader", None)
            continue
        kept.add(gid)
        cell.metadata["nbgrader"] = copy.deepcopy(rel[gid].metadata["nbgrader"])
        if cell.cell_type != rel[gid].cell_type:
            cell.cell_type = rel[gid].cell_type
            if cell.cell_type == "markdown":
                cell.pop("outputs", None)
                cell.pop("execution_count", None)
            else:
                cell.outputs, cell.execution_count = [], None
    ids = opening(released)
    kept_cells = {claimed_id(c): c for c in nb.cells if claimed_id(c) in ids}  # one each: the loop above dropped copies
    first = [kept_cells.get(gid) or _added(rel[gid], nb) for gid in ids]
    moved = {id(c) for c in first}
    at = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    rest = [c for c in nb.cells if id(c) not in moved]  # the cells before ``at`` are not code, so none of them moved
    nb.cells = rest[:at] + first + rest[at:]
    return nb


def _added(released_cell, nb):
    """A fresh copy of a released cell the notebook lacks, with a cell id of its own when the notebook's cells have
    ids (nbformat 4.5)."""
    cell = new_code_cell(released_cell.source, metadata=copy.deepcopy(released_cell.metadata))
    if nb.get("nbformat_minor", 0) < 5:
        cell.pop("id")
    return cell

"""What happened to one graded notebook, as short flags for the report.

``structure_flags`` compares the submitted notebook with the released one (test and locked cells edited, deleted or
with changed nbgrader metadata; nbgrader restores them before grading, so this never raises a score, but a human
should know; one pass over the cells, linear in their number). ``run_flags`` reads the autograded notebook (timeouts, dead kernel, memory limit, tampering refused
by the hidden tests, ``sys.exit``, truncated output).
"""

from __future__ import annotations

import json
from collections import Counter

from autograder.grading.pipeline.execute import KERNEL_DIED, NOT_RUN, TRUNCATED_MARKER

_META_KEYS = ("grade", "solution", "locked", "points", "grade_id", "task")


def _cells(nb) -> dict:
    return {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade_id")}


def _meta(cell) -> str:
    meta = cell.metadata.get("nbgrader", {})
    return json.dumps({k: meta.get(k) for k in _META_KEYS}, sort_keys=True)


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
    unknown = [gid for gid in sub if gid not in rel]
    if unknown:
        flags.append("cells with unknown grade_ids: " + ", ".join(unknown[:5]))
    ids = Counter(c.metadata.get("nbgrader", {}).get("grade_id") for c in submitted.cells)
    dupes = sorted(i for i, n in ids.items() if i and n > 1)  # counted once each: linear in the cells
    if dupes:
        flags.append("duplicated grade_ids: " + ", ".join(dupes))
    return flags


def run_flags(autograded) -> list:
    flags, seen = [], set()

    def add(flag):
        if flag not in seen:
            seen.add(flag)
            flags.append(flag)

    for cell in autograded.cells:
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
                elif ename == "SystemExit":
                    add("calls sys.exit()")
            elif kind == "stream" and TRUNCATED_MARKER in out.get("text", ""):
                add("output truncated: printed more than the per-cell output limit")
    return flags


def restore_locked_metadata(submitted, released):
    """The submitted notebook with the released nbgrader metadata (and cell type) on each locked cell it kept."""
    import copy

    rel = {gid: cell for gid, cell in _cells(released).items() if cell.metadata["nbgrader"].get("locked")}
    nb = copy.deepcopy(submitted)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in rel:
            cell.metadata["nbgrader"] = copy.deepcopy(rel[gid].metadata["nbgrader"])
            if cell.cell_type != rel[gid].cell_type:
                cell.cell_type = rel[gid].cell_type
                if cell.cell_type == "markdown":
                    cell.pop("outputs", None)
                    cell.pop("execution_count", None)
                else:
                    cell.outputs, cell.execution_count = [], None
    return nb

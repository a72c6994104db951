"""What a zip and a notebook may hold, checked before either is unpacked or parsed.

A zip is unpacked (``archives.safe_extract``) within ``ZipLimits`` (total size, number of files, depth of paths,
compression ratio, free disk space); a zip past one is refused whole and leaves nothing behind. A notebook is read
(``file_access.read_notebook``) within ``NotebookLimits``: its file size before reading, then the shape of its JSON
(``json_shape``, ``over_shape``), then cells and stored output (``over_limit``) before nbformat parses it; one past a
limit is ``malformed``, and its note names the limit (``OverLimit``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

MAX_NOTEBOOK_BYTES = 20 * 2**20  # the default of NotebookLimits.max_bytes (``--max-notebook-mb``)


@dataclass(frozen=True)
class ZipLimits:
    """What ``archives.safe_extract`` unpacks at most. The ratio is checked once the total passes ``ratio_floor``."""

    max_bytes: int = 4 * 2**30
    max_files: int = 50_000
    max_depth: int = 16
    max_ratio: int = 100
    ratio_floor: int = 16 * 2**20


@dataclass(frozen=True)
class NotebookLimits:
    """What one notebook may hold, checked in the grader's process before it is parsed as a notebook: its file size
    (from ``fstat``, and never more than ``max_bytes`` read), then, on its JSON, the number of cells and the bytes of
    the outputs it stores (each cell's, and all cells'). Before the JSON is parsed at all, its objects and arrays are
    counted, and how deep they nest, in the bytes (``json_shape``): parsing builds a Python object for each, so 17 MB
    of empty objects would cost gigabytes in every step that reads the notebook. The course's own notebooks hold
    under 60 cells, under 300 objects and arrays (a few thousand with every output), nesting under 10 deep, and
    well under 1 MB; a notebook past a limit is ``malformed`` and the note names the limit (``over_limit``)."""

    max_bytes: int = MAX_NOTEBOOK_BYTES
    max_containers: int = 100_000  # JSON objects and arrays, counted in the bytes before any parse
    max_depth: int = 100  # how deep they nest
    max_cells: int = 2_000
    max_cell_output: int = 5 * 2**20
    max_output: int = 16 * 2**20


class OverLimit(OSError):
    """A notebook past one of ``NotebookLimits``; the message starts with the limit ("notebook over 20 MB: ...")."""


def in_mb(n: int) -> str:
    """Bytes as MB (KB below 1 MB), rounded up to a tenth: a file just past a limit never reads as the limit."""
    unit, name = (2**20, "MB") if n >= 2**20 else (2**10, "KB")
    return f"{-(-n * 10 // unit) / 10:g} {name}"


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\(?:.|\Z)[^"\\]*)*(?:"|\Z)', re.DOTALL)  # to its end, or the text's


def json_shape(data: bytes, max_containers: int) -> tuple:
    """(objects and arrays, deepest nesting) of JSON text, counted without parsing it: strings are cut out first
    (one regular expression that always matches from an opening quote to its closing one or the end, so every byte
    is read once whatever the text is), then brackets are counted. The depth is only measured when the count is
    within ``max_containers`` (it is then at most that)."""
    bare = _JSON_STRING.sub(b"", data)
    opened = bare.count(b"{") + bare.count(b"[")
    if not opened or opened > max_containers:
        return opened, 0
    brackets = re.sub(rb"[^\[\]{}]+", b"", bare)
    steps = [1 if ch in b"[{" else -1 for ch in brackets]
    depth = deepest = 0
    for step in steps:
        depth += step
        deepest = max(deepest, depth)
    return opened, deepest


def over_shape(data: bytes, name: str, limits: NotebookLimits) -> str:
    """'' when the JSON text of a notebook is within ``limits``' objects and depth, else the note that says which."""
    opened, depth = json_shape(data, limits.max_containers)
    if opened > limits.max_containers:
        return (f"notebook over {limits.max_containers:,} JSON objects and arrays: {name} holds {opened:,}, far more "
                "than any lesson needs (a cell's metadata or outputs filled by a program?); open the lesson's "
                "notebook again, copy your answers into it, save and submit that")
    if depth > limits.max_depth:
        return (f"notebook nested over {limits.max_depth} levels deep: {name} nests its JSON {depth:,} levels deep; "
                "open the lesson's notebook again, copy your answers into it, save and submit that")
    return ""


def over_limit(raw, name: str, limits: NotebookLimits) -> str:
    """'' when the parsed JSON of a notebook is within ``limits`` (cells, stored output), else the note that says
    which limit it is past. One pass over the cells, each output measured once: linear in the notebook's size."""
    cells = raw.get("cells") if isinstance(raw, dict) else None
    if not isinstance(cells, list):
        return ""  # not a notebook: nbformat says why
    if len(cells) > limits.max_cells:
        return (f"notebook over {limits.max_cells:,} cells: {name} has {len(cells):,}; submit the lesson's notebook "
                "with your answers in its own cells")
    total = 0
    for index, cell in enumerate(cells):
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        if not outputs:
            continue
        size = len(json.dumps(outputs))
        if size > limits.max_cell_output:
            return (f"stored output over {in_mb(limits.max_cell_output)} in one cell: cell {index + 1} of {name} "
                    f"stores {in_mb(size)} of output; clear the outputs (Edit > Clear Outputs of All Cells), save "
                    "and submit again")
        total += size
        if total > limits.max_output:
            return (f"stored output over {in_mb(limits.max_output)}: {name} stores more than that in its outputs; "
                    "clear the outputs (Edit > Clear Outputs of All Cells), save and submit again")
    return ""

"""The first code cell of every lesson: it carries the lesson's self-check modules, so a notebook works alone.

A learner may open one notebook by itself (uploaded to Colab, attached in an LMS, downloaded into an empty
folder). This cell, which ``notebooks.read_source`` puts before the lesson's setup cell, holds every self-check module
the setup cell imports (``selfcheck_NN.py`` and the modules it imports in turn), compressed and each with its
SHA-256. Run, it writes a module beside the notebook (the kernel's working folder) when it is missing or differs,
and leaves an identical one untouched, so opening ``lessons/`` changes nothing. It needs only the standard
library and the network never.

The cell is locked and ungraded. Grading never trusts what it writes: nbgrader restores a locked cell's source
from the release before grading (an edited copy is flagged for a human), the setup cell's hidden part drops the
notebook's folder from ``sys.path`` before anything is imported, so the graded kernel imports the self-checks
from the kernel library (``autograder/grading/run/workspace.py``), and the hidden tests run in the grader itself.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import textwrap
import zlib

import nbformat

from autograder import course

GRADE_ID = "helper_files"
_CHUNK = 100  # characters of base64 per line of the cell
_HEADER = ("Run this cell first: it writes this lesson's self-check modules ({names}) beside the notebook when "
           "they are missing or differ from the copies it carries (an identical file is left as it is), so this "
           "notebook also works on its own: in Colab, downloaded alone, in any Jupyter. Nothing here is graded.")
_WRITER = '''\
def _write_self_checks(files):
    import base64, hashlib, importlib, pathlib, sys, zlib  # noqa: E401
    written = []
    for name, (digest, chunks) in files.items():
        text = zlib.decompress(base64.b64decode("".join(chunks)))
        if hashlib.sha256(text).hexdigest() != digest:
            raise RuntimeError(f"This cell's copy of {name} is damaged: download the lesson again.")
        path = pathlib.Path(name)
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == digest:
            continue
        try:
            path.write_bytes(text)
        except OSError as exc:
            raise RuntimeError(f"Could not write {name} beside this notebook ({exc}): move the notebook to a "
                               "folder you can write to, then run this cell again.") from None
        written.append(name)
    if written:
        for name in files:  # a module imported before is read again from its new file
            sys.modules.pop(name[:-3], None)
        importlib.invalidate_caches()
        print("wrote " + ", ".join(written) + " beside this notebook (the lesson's self-checks)")


'''


def modules(lesson: str) -> list:
    """The self-check modules a lesson needs: its own and, in turn, every course module they import."""
    known = {name[:-3] for name in course.SELFCHECK_FILES}
    todo, needed = [course.selfcheck_module(lesson)], []
    while todo:
        module = todo.pop()
        if module in needed:
            continue
        needed.append(module)
        tree = ast.parse((course.SOLUTIONS / f"{module}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in known:
                todo.append(node.module)
            elif isinstance(node, ast.Import):
                todo += [alias.name for alias in node.names if alias.name in known]
    return [name for name in (h[:-3] for h in course.SELFCHECK_FILES) if name in needed]  # in course.SELFCHECK_FILES' order


def has_cell(lesson: str) -> bool:
    return f"{course.selfcheck_module(lesson)}.py" in course.SELFCHECK_FILES


def files(lesson: str) -> dict:
    """{file name: bytes} the cell writes: exactly the files the build writes into ``lessons/``."""
    return {f"{m}.py": course.helper_text(f"{m}.py").encode("utf-8") for m in modules(lesson)}


def source(lesson: str) -> str:
    """The cell's code: a short note, the writer, and each module as SHA-256 and zlib-compressed base64."""
    entries = []
    for name, data in files(lesson).items():
        packed = base64.b64encode(zlib.compress(data, 9)).decode("ascii")
        chunks = "".join(f'        "{packed[i:i + _CHUNK]}",\n' for i in range(0, len(packed), _CHUNK))
        entries.append(f'    "{name}": ("{hashlib.sha256(data).hexdigest()}", (\n{chunks}    )),\n')
    note = textwrap.fill(_HEADER.format(names=", ".join(files(lesson))), width=116, initial_indent="# ",
                         subsequent_indent="# ", break_on_hyphens=False)
    return (note + "\n" + _WRITER + "_write_self_checks({\n" + "".join(entries)
            + "})\ndel _write_self_checks\n")


def carried(cell_source: str) -> dict:
    """{file name: (sha256, bytes)} that a cell's source carries (read back without running it)."""
    call = next(node for node in ast.walk(ast.parse(cell_source)) if isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "_write_self_checks")
    out = {}
    for name, (digest, chunks) in ast.literal_eval(call.args[0]).items():
        out[name] = (digest, zlib.decompress(base64.b64decode("".join(chunks))))
    return out


def summary(cell_source: str) -> str:
    """The cell as a feedback page shows it: its note, without the modules' contents."""
    note = [line for line in cell_source.splitlines() if line.startswith("#")]
    return "\n".join(note + ["# (the modules' contents are left out of this page)"])


def cell(lesson: str) -> nbformat.NotebookNode:
    meta = course.nbgrader_metadata({"grade_id": GRADE_ID}, f"the self-check files cell of {lesson}")
    new = nbformat.v4.new_code_cell(source(lesson), id=GRADE_ID)
    new.metadata = nbformat.from_dict({"jupyter": {"source_hidden": True}, "nbgrader": meta})
    return new


def embed(nb, lesson: str):
    """Put the cell before the lesson's first code cell (its setup cell), for a lesson with a self-check module."""
    if has_cell(lesson):
        first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
        nb.cells.insert(first_code, cell(lesson))
    return nb


def is_cell(cell) -> bool:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == GRADE_ID

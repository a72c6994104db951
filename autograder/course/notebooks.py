"""Lesson sources read into notebooks, and nbgrader course folders built from them.

``solutions/NN_name.py`` is a jupytext percent script whose cell headers state what differs per nbgrader cell
(``nbgrader_metadata`` fills in the rest). ``read_source`` reads it, refuses a source with a malformed header, gives
every cell a stable id and adds the lesson's helper cell; ``make_course`` writes nbgrader course folders
(``source/NN_name/NN_name.ipynb`` plus an ``nbgrader_config.py`` that loads ours) for the build and for grading.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat

from autograder.course import (LESSONS, ROOT, SOLUTIONS, SourceError, helper_cell, lesson_names, lesson_number,
                               nbgrader_metadata, provenance)

NBGRADER_CONFIG = ROOT / "autograder" / "nbgrader_config.py"


def read_source(path) -> nbformat.NotebookNode:
    """The instructor notebook of one lesson source, validated, with deterministic cell ids."""
    import jupytext  # imported here: hidden checks import this module in every graded kernel

    path = Path(path)
    nb = jupytext.read(path, fmt="py:percent")
    seen: dict = {}
    for i, cell in enumerate(nb.cells):
        where = f"{path.name}, cell {i + 1} ({cell.source.strip().splitlines()[0][:50] if cell.source.strip() else 'empty'})"
        if "incorrectly_encoded_metadata" in cell.metadata:
            raise SourceError(f"{where}: its `# %%` header is not valid JSON metadata "
                              f"({cell.metadata['incorrectly_encoded_metadata']!r}); fix the header, or a model "
                              "answer could be published")
        if cell.metadata.get("nbgrader"):
            meta = nbformat.from_dict(nbgrader_metadata(dict(cell.metadata["nbgrader"]), where))
            cell.metadata["nbgrader"] = meta
            gid = meta["grade_id"]
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", gid):
                raise SourceError(f"{where}: grade_id {gid!r} must be 1-64 letters, digits, '_' or '-'")
            if gid in seen:
                raise SourceError(f"{where}: grade_id {gid!r} is used twice (also cell {seen[gid] + 1})")
            seen[gid] = i
            if meta["solution"] and cell.cell_type == "code" and "### BEGIN SOLUTION" not in cell.source:
                raise SourceError(f"{where}: a solution cell needs ### BEGIN SOLUTION / ### END SOLUTION")
            if not meta["solution"] and "### BEGIN SOLUTION" in cell.source:
                raise SourceError(f"{where}: it holds a solution but its header lacks \"solution\": true, so "
                                  "nbgrader would not treat it as an answer cell")
            if (meta["grade"] and not meta["solution"] and cell.cell_type == "code" and meta.get("points", 0) > 0
                    and f'hidden_cell.run("{gid}")' not in cell.source.split("### END HIDDEN TESTS")[0]):
                raise SourceError(f"{where}: a graded test cell must grade through a hidden "
                                  f'`__import__("autograder.kernel.hidden_cell").kernel.hidden_cell.run("{gid}")` call (its test '
                                  "runs in the grader; visible asserts alone can be defeated by the notebook's own "
                                  "code)")
        elif "### BEGIN SOLUTION" in cell.source or "### BEGIN HIDDEN TESTS" in cell.source:
            raise SourceError(f"{where}: it holds a solution or hidden tests but has no nbgrader metadata, so it "
                              "would be given to learners as it is")
        cell.metadata.pop("lines_to_next_cell", None)
        cell.metadata.pop("jupyter", None)
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader")
        cell["id"] = meta["grade_id"] if meta else f"{lesson_number(path.stem)}-cell-{i:03d}"
    nb.metadata = nbformat.from_dict({
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "mha_course": provenance(path.stem),
    })
    nb.nbformat, nb.nbformat_minor = 4, 5
    if helper_cell.GRADE_ID in seen:
        raise SourceError(f"{path.name}: grade_id {helper_cell.GRADE_ID!r} names the cell the build adds "
                          "(the lesson's self-check files); choose another grade_id")
    helper_cell.embed(nb, path.stem)
    nbformat.validate(nb)
    return nb


def run_code_cells(lesson: str, until: str) -> dict:
    """The namespace of the lesson's source run as an instructor runs it, its code cells in order (the helper
    cell, which would write files, and hidden-test cells skipped; printing silenced), up to and including the
    first cell that defines ``until``: what a bench or a test measures with the lesson's own code. A source that
    no longer defines ``until`` is an error."""
    import contextlib
    import io

    namespace = {"__name__": f"lesson{lesson_number(lesson)}"}
    sys.path.insert(0, str(SOLUTIONS))  # the setup cell imports the lesson's self-check module
    try:
        for cell in read_source(SOLUTIONS / f"{lesson}.py").cells:
            if cell.cell_type != "code" or "hidden_cell.run" in cell.source or helper_cell.is_cell(cell):
                continue
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(cell.source, lesson, "exec"), namespace)  # noqa: S102 - the course's own source
            if f"def {until}(" in cell.source:
                return namespace
    finally:
        sys.path.remove(str(SOLUTIONS))
    raise SourceError(f"solutions/{lesson}.py defines no `{until}`")


def notebook_text(nb) -> str:
    """A notebook as the text of its file (what ``write_notebook`` writes)."""
    return nbformat.writes(nb) + "\n"


def write_notebook(nb, path, text: str | None = None):
    """Write ``nb`` (or its ``text``, made already by ``notebook_text``) to ``path``, making its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(notebook_text(nb) if text is None else text, encoding="utf-8")


def nbgrader_env(extra_path=()):
    """Environment for nbgrader and its kernels: our venv's bin/ on PATH (nbgrader runs ``alembic``), and
    PYTHONPATH with the course root (hidden checks) and ``lessons/`` (the learners' helper module)."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    paths = [str(ROOT), str(LESSONS), *map(str, extra_path)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    env.setdefault("MPLBACKEND", "Agg")
    return env


def nbgrader(args, course_root, check=True, **kwargs):
    """Run one nbgrader command in ``course_root``; raise with nbgrader's own output when it fails."""
    cmd = [sys.executable, "-m", "nbgrader", *args]
    proc = subprocess.run(cmd, cwd=course_root, env=nbgrader_env(), capture_output=True, text=True, **kwargs)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`nbgrader {' '.join(args)}` failed in {course_root}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def write_sources(course_root, lessons) -> None:
    """Write each lesson's source notebook into the course folder's ``source/`` (what nbgrader releases)."""
    for name in lessons:
        write_notebook(read_source(SOLUTIONS / f"{name}.py"), Path(course_root) / "source" / name / f"{name}.ipynb")


def make_course(course_root, lessons=None, *, generate=True):
    """Create an nbgrader course folder with the given lessons' sources and release them.

    Returns the course root. ``generate`` runs ``nbgrader generate_assignment`` once for all lessons, which
    records every cell in the gradebook (needed by ``autograde``) and writes ``release/``.
    """
    course_root = Path(course_root)
    course_root.mkdir(parents=True, exist_ok=True)
    (course_root / "nbgrader_config.py").write_text(
        "# Course folder created by autograder/course/__init__.py; settings live in the file it loads.\n"
        f"c = get_config()  # noqa: F821\nload_subconfig({str(NBGRADER_CONFIG)!r})  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(course_root)!r}\n")
    names = lessons or lesson_names()
    write_sources(course_root, names)
    if generate:
        nbgrader(["generate_assignment", "--force", "--log-level=WARN", "*"], course_root)
        missing = [n for n in names if not (course_root / "release" / n / f"{n}.ipynb").exists()]
        if missing:
            raise RuntimeError(f"nbgrader did not release {missing} in {course_root}")
    return course_root




def function_fingerprint(node) -> str:
    """A function definition as its syntax tree says it, without its docstring, comments or layout: two copies of
    one function have the same fingerprint however they are spaced or commented."""
    import ast
    import copy

    node = copy.deepcopy(node)
    body = node.body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        node.body = body[1:] or [ast.Pass()]
    return ast.dump(node, include_attributes=False)


def given_functions() -> dict:
    """{fingerprint: [(lesson, name), ...]} of every function a lesson gives its learners in a cell they do not
    answer (code they run as it is), with every lesson that gives it: what another lesson's answer cell must not
    simply hold."""
    found: dict = {}
    for fingerprint, where in _given_functions():
        found.setdefault(fingerprint, []).append(where)
    return found


@functools.lru_cache(maxsize=1)
def _given_functions() -> tuple:
    import ast

    from autograder import course

    found = []
    for path in course.lesson_sources():
        for cell in read_source(path).cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code" or meta.get("solution") or meta.get("grade"):
                continue
            try:
                tree = ast.parse(cell.source)
            except SyntaxError:
                continue
            found += [(function_fingerprint(n), (path.stem, n.name)) for n in tree.body
                      if isinstance(n, ast.FunctionDef)]
    return tuple(found)

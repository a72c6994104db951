"""The first code cell of every student notebook carries its self-check modules (``autograder/course/helper_cell.py``).

Run alone in an empty folder, every lesson works (``tests/notebooks/test_notebooks.py`` runs them so); here: what the cell
carries, that it leaves an identical file untouched and replaces a missing, tampered or stale one, that a damaged
cell says so, that nbgrader sees it as a locked, ungraded cell, and that grading does not rely on what it writes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import nbformat
import pytest
from nbgrader.utils import compute_checksum

from autograder import course
from autograder.course import helper_cell, notebooks

LESSONS = course.lesson_names()


def _released(lesson):
    return nbformat.read(course.LESSONS / f"{lesson}.ipynb", as_version=4)


def _cell(lesson):
    return next(c for c in _released(lesson).cells if helper_cell.is_cell(c))


def _run(source: str, folder, before="", after=""):
    """Run a cell's source with ``python`` in ``folder``, between two snippets; like a kernel's, the working folder
    is first on ``sys.path`` (``python -`` reads the code from its input)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-"], input=before + "\n" + source + "\n" + after, cwd=folder, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("lesson", LESSONS)
def test_cell_carries_the_lessons_self_check_modules_as_released(lesson):
    carried = helper_cell.carried(_cell(lesson).source)
    assert set(carried) == {f"{m}.py" for m in helper_cell.modules(lesson)}
    assert {"selfcheck_common.py", f"{course.selfcheck_module(lesson)}.py"} <= set(carried) <= set(course.SELFCHECK_FILES)
    for name, (digest, data) in carried.items():
        assert data == (course.LESSONS / name).read_bytes(), f"{name} differs from lessons/{name}: make lessons"


def test_modules_follow_the_imports_of_the_self_check_modules():
    assert helper_cell.modules("01_warmup") == ["selfcheck_common", "selfcheck_01"]
    assert helper_cell.modules("06_going_further") == ["selfcheck_common", "selfcheck_01", "selfcheck_02",
                                                       "selfcheck_06"]


@pytest.mark.parametrize("lesson", LESSONS)
def test_cell_is_the_first_code_cell_locked_and_ungraded(lesson):
    nb = _released(lesson)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert helper_cell.is_cell(code[0]) and code[1].metadata.nbgrader.grade_id == "setup"
    meta = code[0].metadata
    assert meta.nbgrader.locked is True and meta.nbgrader.grade is False and meta.nbgrader.solution is False
    assert meta.editable is False and meta.deletable is False
    assert meta.nbgrader.checksum == compute_checksum(code[0]), "nbgrader's checksum of the released cell"
    assert "autograder" not in code[0].source and "### BEGIN" not in code[0].source


def test_empty_folder_gets_the_modules(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    proc = _run(_cell("02_multi_head").source, folder, after="import selfcheck_02; print(selfcheck_02.__file__)")
    assert proc.returncode == 0, proc.stderr
    assert "wrote selfcheck_common.py, selfcheck_01.py, selfcheck_02.py" in proc.stdout
    assert proc.stdout.strip().endswith(str(folder / "selfcheck_02.py"))
    for name in ("selfcheck_common.py", "selfcheck_01.py", "selfcheck_02.py"):
        assert (folder / name).read_bytes() == (course.LESSONS / name).read_bytes()


def test_identical_module_is_left_untouched_and_a_tampered_one_replaced(tmp_path):
    folder = tmp_path / "beside"
    folder.mkdir()
    same = folder / "selfcheck_common.py"
    same.write_bytes((course.LESSONS / "selfcheck_common.py").read_bytes())
    os.utime(same, ns=(1_000_000_000, 1_000_000_000))
    before = same.stat()
    tampered = folder / "selfcheck_01.py"
    tampered.write_text("def check_softmax(f):\n    print('\u2714 always')\nTAMPERED = True\n", encoding="utf-8")
    # the tampered module was imported before the cell ran: after it, the course's module is imported again
    proc = _run(_cell("01_warmup").source, folder, before="import selfcheck_01; assert selfcheck_01.TAMPERED",
                after="import selfcheck_01; print('tampered:', hasattr(selfcheck_01, 'TAMPERED'))")
    assert proc.returncode == 0, proc.stderr
    assert "wrote selfcheck_01.py beside this notebook" in proc.stdout
    assert "tampered: False" in proc.stdout
    assert tampered.read_bytes() == (course.LESSONS / "selfcheck_01.py").read_bytes()
    after = same.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), "identical file was rewritten"
    proc = _run(_cell("01_warmup").source, folder)
    assert proc.returncode == 0 and proc.stdout == "", "a second run with every file in place writes nothing"


def test_damaged_cell_says_so_and_writes_nothing(tmp_path):
    folder = tmp_path / "damaged"
    folder.mkdir()
    source = _cell("01_warmup").source
    digest = helper_cell.carried(source)["selfcheck_common.py"][0]
    damaged = source.replace(digest, digest[::-1])
    proc = _run(damaged, folder)
    assert proc.returncode != 0
    assert "This cell's copy of selfcheck_common.py is damaged: download the lesson again." in proc.stderr
    assert list(folder.iterdir()) == []


def test_the_build_refuses_a_lesson_cell_with_the_reserved_grade_id(tmp_path):
    bad = tmp_path / "99_bad.py"
    bad.write_text(f'# %% [markdown] nbgrader={{"grade_id": "{helper_cell.GRADE_ID}"}}\n# text\n')
    with pytest.raises(course.SourceError, match="names the cell the build adds"):
        notebooks.read_source(bad)


def test_grading_imports_the_self_checks_from_the_kernel_library_not_from_the_cell(tmp_path):
    """What grading relies on: the setup cell's hidden part drops the notebook's folder from sys.path before the
    self-checks are imported (the kernel library holds the same modules), and the cell writes only those modules."""
    from autograder.grading.run.workspace import write_kernel_library

    library = write_kernel_library(tmp_path / "library")
    for lesson in LESSONS:
        cells = notebooks.read_source(course.SOLUTIONS / f"{lesson}.py").cells
        code = [c for c in cells if c.cell_type == "code"]
        assert helper_cell.is_cell(code[0]), lesson
        setup = code[1].source
        hidden = setup.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
        assert "_os.path.abspath(p) != _os.getcwd()" in hidden, f"{lesson}: the setup cell keeps the folder"
        assert setup.index("### END HIDDEN TESTS") < setup.index(f"from {course.selfcheck_module(lesson)} import")
        for name, (_, data) in helper_cell.carried(code[0].source).items():
            assert (library / name).read_bytes() == data, f"the kernel library's {name} differs from the cell's"


def test_feedback_page_shows_the_cells_note_not_the_modules():
    from autograder.grading.pipeline.feedback_page import shown_source

    cell = _cell("01_warmup")
    chunk = re.findall(r'"([A-Za-z0-9+/=]{100})"', cell.source)[0]  # a line of the compressed modules
    shown = shown_source(cell)
    assert shown.startswith("# Run this cell first") and chunk not in shown and "def " not in shown
    setup = next(c for c in notebooks.read_source(course.SOLUTIONS / "01_warmup.py").cells
                 if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
    assert "HIDDEN TESTS" in setup.source and "HIDDEN TESTS" not in shown_source(setup)

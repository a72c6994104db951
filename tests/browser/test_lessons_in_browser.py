"""Every lesson, in JupyterLab in Chromium, as a learner meets it.

Completed (the stubs filled with the model answers): Run → Run All Cells runs every cell with no error and no
red output box, every figure is drawn, every widget is drawn and moving each of its controls changes what it
shows. Untouched: the only errors are the stubs' NotImplementedError, and each self-check says plainly
"not implemented yet", but for the self-checks of a find-the-bug exercise's given code, which fail. Parametrised over ``autograder.course.lesson_names()``, so a new lesson is covered as
soon as its source exists. A passing completed run leaves a screenshot in ``build/screenshots/<lesson>.png``.
"""

from __future__ import annotations

import shutil

import labdriver as lab
import pytest
from labserver import SCREENSHOTS

from autograder import course
from autograder.course import answers, notebooks
from autograder.publish import given_code

pytestmark = pytest.mark.browser
LESSONS = course.lesson_names()
RUN_TIMEOUT_S = 150


@pytest.fixture(scope="session")
def folders(lab_server):
    """``untouched/``: a copy of lessons/ as released; ``completed/``: the same with every stub filled."""
    untouched = lab_server.root / "untouched"
    shutil.copytree(course.LESSONS, untouched, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    completed = lab_server.root / "completed"
    completed.mkdir()
    for helper in course.SELFCHECK_FILES:
        shutil.copy(course.LESSONS / helper, completed / helper)
    return untouched, completed


@pytest.mark.parametrize("lesson", LESSONS)
def test_completed_lesson_runs_clean_with_working_widgets(lesson, lab_server, folders, new_page):
    _, completed = folders
    path = completed / f"{lesson}.ipynb"
    notebooks.write_notebook(answers.fill(lesson), path)
    page = new_page(lab_server)
    lab.open_notebook(page, lab_server, f"completed/{lesson}.ipynb")

    state = lab.run_all(page, RUN_TIMEOUT_S)
    not_run = [i for i, (kind, p) in enumerate(state) if kind == "code" and not lab._executed(p)]
    red = lab.on_screen_errors(page)
    assert not red, f"{lesson}: red output boxes on screen (cell, text): {[(i, t[-600:]) for i, t in red]}"
    assert not not_run, f"{lesson}: Run All Cells left code cells {not_run} unexecuted: {state}"

    nb = lab.save_and_read(page, path, state)
    assert lab.saved_errors(nb) == []
    assert lab.saved_stderr(nb) == [], f"{lesson}: output on stderr (warnings count): {lab.saved_stderr(nb)}"
    for index in lab.image_cells(nb):
        assert lab.images_on_screen(page, index) >= 1, f"{lesson}: cell {index} has a figure that did not display"

    widgets = lab.widget_cells(nb)
    moved = lab.check_widgets_move_outputs(page, widgets)
    assert len(moved) >= len(widgets)

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shown = ([*widgets] or lab.image_cells(nb) or [0])[0]
    lab.hide_left_sidebar(page)
    lab.scroll_to_cell(page, shown)
    page.screenshot(path=str(SCREENSHOTS / f"{lesson}.png"))


@pytest.mark.parametrize("lesson", LESSONS)
def test_untouched_lesson_shows_only_not_implemented(lesson, lab_server, folders, new_page):
    untouched, _ = folders
    path = untouched / f"{lesson}.ipynb"
    page = new_page(lab_server)
    lab.open_notebook(page, lab_server, f"untouched/{lesson}.ipynb")

    state = lab.run_everything(page, RUN_TIMEOUT_S)
    nb = lab.save_and_read(page, path, state)
    found = lab.saved_errors(nb)
    # A find-the-bug exercise hands out working code with one bug: its self-check fails with the bug's symptom.
    given = given_code.expected_failures(lesson)
    from_given = [(i, gid, ename) for i, gid, ename, _, _ in found if gid in given]
    assert {gid for _, gid, _ in from_given} == given and {e for _, _, e in from_given} <= {"SelfCheckFailed"}, \
        f"{lesson}: the self-checks of the given buggy code must fail with SelfCheckFailed: {from_given}"
    found = [f for f in found if f[1] not in given]
    assert found, f"{lesson}: an untouched notebook must show which functions are still to be written"
    assert {ename for _, _, ename, _, _ in found} == {"NotImplementedError"}, found
    self_checks = [(i, gid, msg) for i, gid, _, msg, graded in found if graded]
    assert self_checks, f"{lesson}: no self-check cell reported a missing function: {found}"
    for i, gid, msg in self_checks:
        assert "not implemented yet" in msg, f"{lesson}: self-check {gid} (cell {i}) says {msg!r}"

    on_screen = dict(lab.on_screen_errors(page))
    for i, gid, msg in self_checks:
        text = on_screen.get(i, "")
        assert "NotImplementedError" in text and "not implemented yet" in text, \
            f"{lesson}: the self-check {gid} (cell {i}) does not show its message on screen: {text[-400:]!r}"
    # Every red box, including one inside a widget whose function is still a stub, is a NotImplementedError
    # (a warning or any other error would be a red box without it).
    given_cells = {i for i, _, _ in from_given}
    other = [(i, text[-400:]) for i, text in lab.on_screen_errors(page)
             if "NotImplementedError" not in text and i not in given_cells]
    assert other == [], f"{lesson}: red boxes on screen that are not NotImplementedError: {other}"

"""The README's "open the course" command, `make lab`, smoke-tested in Chromium: it serves lessons/, the first
lesson opens with its title, its kernel runs the self-check files cell and the setup cell (imports and the
self-check module) and shows a figure inline, and nothing in lessons/ is changed.

The test runs `make lab` as the README gives it, adding only what a learner could pass through LAB_ARGS to reach the
server headless: port, token, loopback address, --no-browser, no update checks. It adds no --allow-root: run as
root (CI, a container), `make lab` must add that itself and say so.
"""

from __future__ import annotations

import hashlib
import os
import secrets

import pytest

import labdriver as lab
from autograder import course
from autograder.course import notebooks
from labserver import LabServer, free_port, lab_args

pytestmark = pytest.mark.browser


def _snapshot(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file() and not {"__pycache__", ".ipynb_checkpoints"} & set(p.parts)}  # JupyterLab's own files


def _first_heading(nb):
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    raise AssertionError("the lesson has no level-1 heading")


def test_make_lab_serves_lessons_and_opens_the_first_lesson(browser, tmp_path, new_page):
    first = course.lesson_names()[0]
    before = _snapshot(course.LESSONS)
    port, token = free_port(), secrets.token_hex(16)
    cmd = ["make", "lab", f"LAB_ARGS={' '.join(lab_args(port, token, allow_root=False))}"]
    server = LabServer(cmd, cwd=course.ROOT, root=course.LESSONS, home=tmp_path, port=port, token=token)
    try:
        server.wait_ready()
        served = {item["name"] for item in server.api("contents")["content"]}
        expected = {f"{name}.ipynb" for name in course.lesson_names()} | set(course.SELFCHECK_FILES)
        assert expected <= served, f"`make lab` does not serve lessons/: it shows {sorted(served)}"

        page = new_page(server)
        lab.open_notebook(page, server, f"{first}.ipynb")
        title = page.locator(".jp-NotebookPanel .jp-MarkdownOutput h1").first.inner_text()
        assert title.replace("¶", "").strip() == _first_heading(notebooks.read_source(course.SOLUTIONS / f"{first}.py"))

        state = lab.prompts(page)
        # the self-check files cell (it finds lessons/' own modules and leaves them as they are), then the setup cell
        helper, setup = [i for i, (kind, _) in enumerate(state) if kind in ("hidden code", "code")][:2]
        assert state[helper][0] == "hidden code", "the self-check files cell is collapsed"
        for cell in (helper, setup):
            lab.select_cell(page, cell)
            lab.run_menu(page, "Run Selected Cell")
            lab.wait_settled(page, cell, 60)
        assert lab.on_screen_errors(page) == [], "the first code cells of the first lesson fail under `make lab`"

        # A scratch cell below the setup cell: a figure must show inline (MPLBACKEND=Agg would hide it).
        lab.select_cell(page, setup)
        page.keyboard.press("b")
        page.keyboard.press("Enter")
        page.keyboard.insert_text("plt.plot([0, 1, 4]); plt.title('scratch'); plt.show()")
        lab.run_menu(page, "Run Selected Cell")
        lab.wait_settled(page, setup + 1, 60)
        assert lab.on_screen_errors(page) == []
        assert lab.images_on_screen(page, setup + 1) == 1, "a figure does not display in `make lab`"
        if os.geteuid() == 0:
            assert "make lab: you are root, so JupyterLab starts with --allow-root" in server.log.read_text()
    finally:
        server.stop()
    assert _snapshot(course.LESSONS) == before, "opening the course changed files in lessons/"

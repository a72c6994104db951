"""A learner's packages, set once in ``binder/environment.yml``: what the lessons import (read from the notebooks'
code here, not from a list kept by hand), plus JupyterLab, with the pins of ``requirements.txt``; the README's
Binder badge and its first screen. (A fresh venv of exactly these packages runs every lesson:
``tests/notebooks/test_notebooks.py``.)"""

from __future__ import annotations

import ast
import importlib.metadata
import sys

import nbformat
import pytest

from autograder.publish import bundle, learner_env
from autograder import course
from autograder.course import helper_cell


def imported_modules(nb) -> set:
    """Top-level names of every module a notebook's code imports, the self-check modules it carries included."""
    names = set()

    def scan(code):
        code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines())
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split(".")[0])

    for cell in nb.cells:
        if cell.cell_type == "code":
            scan(cell.source)
            if helper_cell.is_cell(cell):
                for _, data in helper_cell.carried(cell.source).values():
                    scan(data.decode("utf-8"))
    return names


def distributions(modules) -> set:
    """The installed distributions that provide the modules outside the standard library and the course."""
    course_modules = {name[:-3] for name in course.SELFCHECK_FILES}
    providers = importlib.metadata.packages_distributions()
    found = set()
    for module in sorted(set(modules) - set(sys.stdlib_module_names) - course_modules - {"__future__"}):
        assert module in providers, f"no installed distribution provides {module!r}, which a lesson imports"
        found |= {name.lower() for name in providers[module]}
    return found


def lessons_need() -> set:
    modules = set()
    for lesson in course.lesson_names():
        modules |= imported_modules(nbformat.read(course.LESSONS / f"{lesson}.ipynb", as_version=4))
    return distributions(modules)


def test_the_import_reader_finds_imports_in_cells_and_in_the_carried_modules():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("%matplotlib inline\nimport numpy.linalg as la\n"
                                                                    "def f():\n    from IPython.display import HTML")])
    assert imported_modules(nb) == {"numpy", "IPython"}
    assert distributions({"numpy", "IPython", "math", "selfcheck_01"}) == {"numpy", "ipython"}
    cell = nbformat.read(course.LESSONS / "01_warmup.ipynb", as_version=4).cells
    assert "selfcheck_common" in imported_modules(nbformat.v4.new_notebook(cells=[c for c in cell
                                                                                 if helper_cell.is_cell(c)]))


def test_binder_environment_has_every_package_the_lessons_import():
    need = lessons_need()
    assert {"numpy", "matplotlib", "ipywidgets"} <= need, need
    missing = need - set(learner_env.packages())
    assert not missing, f"the lessons import {sorted(missing)}: add them to binder/environment.yml"


def test_binder_environment_is_slim():
    assert set(learner_env.packages()) == lessons_need() | {"jupyterlab"}, \
        "binder/environment.yml holds only what the lessons import, plus JupyterLab"


def test_binder_pins_are_the_courses_pins():
    course_pins = learner_env.read_pins((course.ROOT / "requirements.txt").read_text().splitlines())
    root_env = learner_env.read_pins((course.ROOT / "environment.yml").read_text().split("dependencies:")[1]
                                     .splitlines())
    for name, spec in learner_env.packages().items():
        assert course_pins.get(name) == spec, f"{name}: {spec} in binder/environment.yml, " \
                                              f"{course_pins.get(name)} in requirements.txt"
    assert learner_env.environment()["python"] == root_env["python"]


def test_the_bundle_requirements_are_the_binder_set():
    written = learner_env.read_pins(learner_env.requirements().splitlines())
    assert written == learner_env.packages()
    assert bundle.contents()["requirements.txt"].decode() == learner_env.requirements()


def test_readme_badge_is_written_from_the_one_repository_setting():
    readme = learner_env.README.read_text(encoding="utf-8")
    assert learner_env.badge() in readme, "run `make docs`"
    assert readme.count("mybinder.org/v2/gh/") == 1
    assert f"/gh/{learner_env.REPOSITORY}/" in learner_env.binder_url()
    assert (course.ROOT / learner_env.FIRST_LESSON).is_file()
    with pytest.raises(ValueError, match="no Binder badge line"):
        learner_env.readme_with_badge("# A README without a badge\n")
    stale = readme.replace(learner_env.badge(), learner_env.badge().replace(learner_env.REPOSITORY, "someone/else"))
    assert learner_env.readme_with_badge(stale) == readme
    assert learner_env.main(["--check"]) == 0


def test_readme_first_screen_names_the_ways_in():
    first_screen = "\n".join(learner_env.README.read_text(encoding="utf-8").splitlines()[:25])
    for way in ("make lab", "Binder", "One notebook in any Jupyter", "make bundle"):
        assert way in first_screen, f"the README's first screen does not name {way!r}"

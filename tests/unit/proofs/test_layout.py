"""The package's layout, read from the source: no import circle, no upward import, a self-contained kernel package,
few loose modules, no module loose in ``autograder/grading/`` beside its rooms, no module over 600 lines, nothing but
nbgrader's steps in ``autograder/grading/pipeline/``, and the layer picture in the docs generated from the same
declaration (``autograder/proofs/layout.py``)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

from autograder.proofs import layout

GRAPH = layout.read_graph()


def test_no_import_circles():
    assert layout.circles(GRAPH) == [], "break these circles: a lower module must not import a higher one"


def test_no_module_imports_from_a_layer_above_its_own():
    assert layout.upward_imports(GRAPH) == [], \
        "move the code to the layer that needs it, or declare the import in layout.DECLARED_UPWARD with the reason"


def test_every_module_belongs_to_a_declared_layer():
    assert layout.undeclared(GRAPH) == [], "place the new package or module in layout.LAYERS"


def test_the_kernel_package_imports_nothing_else_of_the_course():
    """The kernel library (``workspace.write_kernel_library``) is ``autograder/kernel/`` whole, nothing more."""
    assert layout.kernel_reaches_out(GRAPH) == []


def test_few_loose_modules_beside_the_packages():
    assert len(layout.loose_modules()) <= layout.MAX_LOOSE_MODULES, layout.loose_modules()


def test_no_module_sits_loose_in_grading_beside_its_rooms():
    assert layout.loose_modules(layout.PACKAGE / "grading") == [], "put the module in the room it belongs to"


def test_no_module_is_longer_than_600_lines():
    assert layout.MAX_MODULE_LINES == 600
    assert layout.long_modules() == [], "split these modules by concern"


def test_the_line_limit_catches_a_module_one_line_too_long(tmp_path):
    pkg = tmp_path / "autograder"
    (pkg / "grading").mkdir(parents=True)
    (pkg / "fits.py").write_text("x = 1\n" * 600)
    (pkg / "grading" / "long.py").write_text("x = 1\n" * 601)
    assert layout.long_modules(pkg) == [("autograder/grading/long.py", 601)]


def test_the_pipeline_holds_exactly_the_declared_nbgrader_steps():
    folder = layout.PACKAGE / "grading" / "pipeline"
    found = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
    assert found == set(layout.PIPELINE), "a module of grading/pipeline/ must be one of nbgrader's steps: declare " \
                                          "it in layout.PIPELINE, or move it to the room that uses it"
    assert not [p for p in folder.iterdir() if p.is_dir() and p.name not in ("templates", "__pycache__")]


def test_nbgrader_config_reaches_every_pipeline_module():
    """A pipeline module nbgrader's configuration never reaches (directly or through another pipeline module) is not
    part of any nbgrader step."""
    assert layout.pipeline_reached(GRAPH) == {f"autograder.grading.pipeline.{m}" for m in layout.PIPELINE}


def test_the_classes_each_pipeline_step_names_are_that_module_s():
    for module, step in layout.PIPELINE.items():
        loaded = importlib.import_module(f"autograder.grading.pipeline.{module}")
        for name in re.findall(r"\b[A-Z][a-z]+[A-Z]\w*", step):
            assert hasattr(loaded, name), f"layout.PIPELINE says {module} holds {name}"


def test_every_declared_upward_import_exists_and_has_a_reason():
    for (source, target), reason in layout.DECLARED_UPWARD.items():
        assert target in GRAPH.edges[source], f"{source} no longer imports {target}: drop the declaration"
        assert len(reason) > 40


def test_the_reader_finds_circles_upward_imports_and_function_level_imports(tmp_path):
    """The checks above can fail: a made-up package with a circle through an import inside a function."""
    pkg = tmp_path / "autograder"
    (pkg / "kernel").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "kernel" / "__init__.py").write_text("")
    (pkg / "reference.py").write_text("from autograder import grade\n")
    (pkg / "grade.py").write_text("def f():\n    from .kernel import protocol\n")
    (pkg / "kernel" / "protocol.py").write_text("import autograder.reference as r\n")
    graph = layout.read_graph(pkg)
    assert graph.edges["autograder.grade"] == {"autograder.kernel.protocol"}
    assert layout.circles(graph) == [["autograder.grade", "autograder.kernel.protocol", "autograder.reference"]]
    assert ("autograder.reference", "autograder.grade") in layout.upward_imports(graph)
    assert layout.kernel_reaches_out(graph) == [("autograder.kernel.protocol", "autograder.reference")]


def test_the_layer_picture_is_what_the_source_gives():
    proc = subprocess.run([sys.executable, "-m", "autograder.proofs.layout", "--check"], capture_output=True,
                          text=True, cwd=layout.ROOT)
    assert proc.returncode == 0, proc.stderr

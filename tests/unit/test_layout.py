"""The package's layout, read from the source: no import circle, no upward import, a self-contained kernel package,
few loose modules, and the layer picture in the docs generated from the same declaration
(``autograder/proofs/layout.py``)."""

from __future__ import annotations

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

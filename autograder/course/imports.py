"""The package's import graph, read from the source (nothing is run): every module of ``autograder/`` and the course
modules each imports, at module level or inside functions.

Two readers: the layer proof (``autograder/proofs/layout.py``) and the settings key
(``autograder/grading/records/settings.py``), which takes every module the grading pipeline reaches as grade-deciding.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Graph:
    modules: dict  # dotted name -> path
    edges: dict  # dotted name -> set of dotted names it imports (at module level or inside functions)


def read_graph(package: Path = PACKAGE) -> Graph:
    """Every module of ``package`` and the course modules each imports, read from the source (nothing is run)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path

    def resolve(name: str):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == package.name and resolve(target) not in (None, name):
                    found.add(resolve(target))
        edges[name] = found
    return Graph(modules, edges)


def reached(graph: Graph, roots) -> set:
    """The modules ``roots`` import, directly or through each other (the roots included)."""
    found, pending = set(roots), list(roots)
    while pending:
        for target in graph.edges.get(pending.pop(), ()):
            if target not in found:
                found.add(target)
                pending.append(target)
    return found

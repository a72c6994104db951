"""The package's layers, declared once, and the import graph read from the source to prove them.

    python -m autograder.proofs.layout            # rewrite docs/layers.svg (what `make docs` runs)
    python -m autograder.proofs.layout --check    # fail if docs/layers.svg differs from what the source gives

A layer may import from its own layer and the layers below it, never from one above; no import circle exists at
all (imports inside functions count too). ``tests/unit/proofs/test_layout.py`` reads the graph and fails on a new circle,
an upward import, a kernel module that imports the rest of the course, a loose module too many, a module loose in
``autograder/grading/`` beside its rooms, a module over ``MAX_MODULE_LINES`` lines, or a module of
``autograder/grading/pipeline/`` that is not one of nbgrader's steps (``PIPELINE``).
"""

from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path

from autograder.course.imports import Graph, read_graph

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autograder"
DIAGRAM = ROOT / "docs" / "layers.svg"

# Lowest first. Each entry: a package (or loose module) of autograder/ and what it is for.
LAYERS = (
    (("reference", "the one reference implementation (numpy), one module per lesson"),
     ("kernel", "what runs inside the sandbox or starts it: hidden cell, wire protocol, launcher, bubblewrap, "
                "warm server, cgroups, uids, what a killed grader's kernels leave behind")),
    (("course", "the lesson sources: ids, paths, notebooks read from solutions/, the helper cell, model answers"),),
    (("bugs", "the catalog of learner bugs: data"),
     ("alternatives", "the catalog of correct solutions written differently from the model answers: data")),
    (("checks", "the hidden tests: registry, stand-ins, runner, bug matcher, one module per lesson"),),
    (("publish", "generated files: lessons/, the bundle, the Binder environment, the answer key, the bug table"),
     ("grading.pipeline", "nbgrader's steps only: sandboxed execute, hidden tests in the grader, learner errors, "
                          "cell metadata, the feedback page and formgrader's page")),
    (("grading.intake", "what the grading command is handed: the class folder or zip read into a roster, LMS "
                        "layouts, student ids, limits, the static code scan"),),
    (("grading.records", "what a run keeps and decides per notebook: settings, gradebook, state, outcome, findings, "
                         "items, marks"),),
    (("grading.similarity", "work more alike than the class makes likely: code fingerprints kept per notebook, the "
                            "evidence a record holds, the pairs that share rare evidence"),),
    (("grading.run", "grading itself: workspace, canary, pool and Dask, worker, the feedback pages, the term"),),
    (("grading.reports", "what a run hands back: results, grades.csv and report.html, insights, similar work, LMS "
                         "import files"),),
    (("grading", "the grading command's rooms (the boxes below it); no module loose beside them"),
     ("nbgrader_config", "the pipeline, declared once: loaded by every course folder")),
    (("grade", "the command line: python -m autograder.grade"),),
    (("proofs", "the proofs: mutation harness, placements, salt sweep, this layout"),),
)
# Imports that go up a layer on purpose, each with the reason (docs/maintainers.md repeats it).
DECLARED_UPWARD = {
    ("autograder.kernel.hidden_cell", "autograder.checks.registry"):
        "outside grading (an instructor's kernel, nbval) a hidden cell runs its test in the kernel itself, where the "
        "whole course is importable; in the sandbox that line is never reached and the kernel library has no checks",
}
MAX_LOOSE_MODULES = 5
MAX_MODULE_LINES = 600  # no module of autograder/ is longer: past it, split it by concern
# autograder/grading/pipeline/ holds nbgrader's steps and nothing else: each module, and the step it is or serves.
# autograder/nbgrader_config.py must reach every one (import it, or import a pipeline module that does).
PIPELINE = {
    "execute": "autograde: SafeExecute, nbgrader's Execute step in the sandboxed kernel",
    "hidden_tests": "autograde: the hidden tests the execute step runs in the grader, one Session per test cell",
    "learner_errors": "autograde: LearnerFacingErrors, the error outputs a learner can read",
    "cell_metadata": "autograde and its first pass: CheckCellMetadata, nbgrader's metadata check compiled once",
    "feedback_page": "generate_feedback: FeedbackExporter and GetGradesAndPending",
    "linear_markdown": "generate_feedback: the feedback page's markdown and maths parsed in linear time",
    "page_safety": "generate_feedback and formgrader: the pages' sanitiser and Content-Security-Policy",
    "formgrader_page": "formgrader: the page of one submission, as inert as a feedback page",
    "costs": "autograde and generate_feedback: the CPU each phase of a notebook's grading took, grader and kernel",
}


def circles(graph: Graph) -> list:
    """The import circles: every strongly connected group of two or more modules (Tarjan), sorted."""
    index, low, stack, on_stack, groups, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph.modules):
        if v not in index:
            visit(v)
    return sorted(groups)


def layer_of(module: str):
    """(layer number, declared part) of a module: the longest declared part that contains it; None if none does."""
    best = None
    for number, layer in enumerate(LAYERS):
        for part, _ in layer:
            full = f"autograder.{part}"
            if (module == full or module.startswith(full + ".")) and (best is None or len(full) > len(best[1])):
                best = (number, full)
    return best


def upward_imports(graph: Graph) -> list:
    """(importer, imported) pairs where a module imports from a higher layer, declared exceptions left out."""
    found = []
    for source, targets in sorted(graph.edges.items()):
        for target in sorted(targets):
            a, b = layer_of(source), layer_of(target)
            if a and b and b[0] > a[0] and (source, target) not in DECLARED_UPWARD:
                found.append((source, target))
    return found


def undeclared(graph: Graph) -> list:
    """Modules that belong to no declared layer (a new package or loose module must be placed in ``LAYERS``)."""
    return sorted(m for m in graph.modules if m != "autograder" and layer_of(m) is None)


def kernel_reaches_out(graph: Graph) -> list:
    """Imports from ``autograder.kernel`` to the rest of the course (the kernel library holds the kernel package
    only), declared exceptions left out."""
    return sorted((s, t) for s, ts in graph.edges.items() if s.startswith("autograder.kernel")
                  for t in ts if not t.startswith("autograder.kernel") and (s, t) not in DECLARED_UPWARD)


def loose_modules(package: Path = PACKAGE) -> list:
    return sorted(p.name for p in package.glob("*.py") if p.name != "__init__.py")


def long_modules(package: Path = PACKAGE, limit: int = MAX_MODULE_LINES) -> list:
    """(path relative to the package's parent, lines) of every module of ``package`` longer than ``limit`` lines."""
    found = []
    for path in sorted(package.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found.append((path.relative_to(package.parent).as_posix(), lines))
    return found


def pipeline_reached(graph: Graph) -> set:
    """The modules of ``autograder.grading.pipeline`` that ``autograder.nbgrader_config`` reaches: those it imports,
    and those the pipeline modules it reaches import."""
    inside = "autograder.grading.pipeline."
    reached, pending = set(), ["autograder.nbgrader_config"]
    while pending:
        for target in graph.edges.get(pending.pop(), ()):
            if target.startswith(inside) and target not in reached:
                reached.add(target)
                pending.append(target)
    return reached


def svg(graph: Graph) -> str:
    """The layers as an SVG picture, top layer first: each part with what it is for and its modules."""
    width, row_gap, pad = 1000, 14, 10
    rows, y = [], 40
    for number, layer in reversed(list(enumerate(LAYERS))):
        boxes, x = [], 20
        box_w = (width - 40 - (len(layer) - 1) * 10) // len(layer)
        heights = []
        for part, purpose in layer:
            full = f"autograder.{part}"
            members = sorted(m[len(full) + 1:] for m in graph.modules if m.startswith(full + ".")
                             and layer_of(m) == (number, full))
            lines = _wrap(purpose, box_w // 7) + _wrap(", ".join(members), box_w // 7) if members else \
                _wrap(purpose, box_w // 7)
            heights.append(28 + 15 * len(lines))
            boxes.append((x, part, purpose, members, lines))
            x += box_w + 10
        h = max(heights)
        for x, part, purpose, members, lines in boxes:
            path = "autograder/" + part.replace(".", "/") + ("/" if members or (PACKAGE / part.replace(".", "/")).is_dir()
                                                             else ".py")
            rows.append(f'<rect x="{x}" y="{y}" width="{box_w}" height="{h}" rx="6" fill="#f4f6fb" stroke="#34495e"/>')
            rows.append(f'<text x="{x + pad}" y="{y + 20}" font-weight="bold">{html.escape(path)}</text>')
            for i, line in enumerate(lines):
                italic = ' font-style="italic" fill="#555"' if members and i >= len(_wrap(purpose, box_w // 7)) else ""
                rows.append(f'<text x="{x + pad}" y="{y + 38 + 15 * i}"{italic}>{html.escape(line)}</text>')
        y += h + row_gap
    height = y + 10
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">\n'
            "<!-- Generated by `python -m autograder.proofs.layout` (make docs) from LAYERS in "
            "autograder/proofs/layout.py and the package's modules; do not edit. -->\n"
            f'<title>The layers of autograder/: each imports only from its own row and the rows below</title>\n'
            f'<text x="20" y="24" font-size="14" font-weight="bold">autograder/: a layer imports only from its own '
            f'row and the rows below it (top: highest)</text>\n')
    return head + "\n".join(rows) + "\n</svg>\n"


def _wrap(text: str, width: int) -> list:
    import textwrap

    return textwrap.wrap(text, width=max(width, 20)) or [""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if docs/layers.svg is not what the source gives")
    args = parser.parse_args(argv)
    text = svg(read_graph())
    if args.check:
        if not DIAGRAM.exists() or DIAGRAM.read_text(encoding="utf-8") != text:
            print("docs/layers.svg differs from the package's layers: run `make docs`", file=sys.stderr)
            return 1
        return 0
    DIAGRAM.write_text(text, encoding="utf-8")
    print(f"wrote {DIAGRAM.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Build the student notebooks in ``lessons/`` from their single source in ``solutions/``.

    python -m autograder.publish.build            # rebuild lessons/ (what `make lessons` runs)
    python -m autograder.publish.build --check    # rebuild into a temporary folder; exit 1 if lessons/ differs

It also writes docs/written-answers.md, the written answers' model answers and rubrics (``answer_key``), which
stay out of lessons/.

The build reads every ``solutions/NN_name.py``, releases them all with one ``nbgrader generate_assignment``
(which replaces solutions with stubs and removes hidden tests), hands out the find-the-bug exercises' buggy
starting code (``given_code``), checks the result holds no solution, hidden
test or import of the grading package, and writes ``lessons/NN_name.ipynb`` plus the learners' helper modules and
pages (the glossary).
A notebook names its source and this command in its metadata (``metadata.mha_course``), not in a cell, so
learners and their feedback pages never see it; the drift check (``--check``) keeps it true.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
from pathlib import Path

import nbformat

from autograder.publish import answer_key, given_code
from autograder import course
from autograder.course import notebooks

BUILT_SUFFIXES = (".ipynb", ".py", ".md")  # what the build writes into lessons/, and so what drift compares
FORBIDDEN_IN_LESSONS = ("### BEGIN SOLUTION", "### END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS",
                        "autograder")


def leaks(nb) -> list:
    """What a student notebook must never contain: solutions, hidden tests, the grading package, outputs."""
    problems = []
    for i, cell in enumerate(nb.cells):
        for marker in FORBIDDEN_IN_LESSONS:
            if marker in cell.source:
                problems.append(f"cell {i + 1} contains {marker!r}")
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count")):
            problems.append(f"cell {i + 1} carries outputs")
    return problems


def build(dest: Path) -> list:
    """Write every lesson's student notebook and the helper modules into ``dest``; return the files written."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="mha-build-") as tmp:
        root = notebooks.make_course(Path(tmp) / "course")
        for name in course.lesson_names():
            nb = given_code.hand_out(name, nbformat.read(root / "release" / name / f"{name}.ipynb", as_version=4))
            problems = leaks(nb)
            if nb.metadata.get("mha_course") != course.provenance(name):
                problems.append("its metadata lost the provenance (metadata.mha_course) that names its source")
            if problems:
                raise course.SourceError(f"the student notebook built from solutions/{name}.py would leak: "
                                         + "; ".join(problems))
            target = dest / f"{name}.ipynb"
            notebooks.write_notebook(nb, target)
            written.append(target)
    course.copy_helpers(dest)
    course.copy_pages(dest)
    written += [dest / h for h in (*course.SELFCHECK_FILES, *course.PAGES)]
    return written


def drift(built_dir: Path, committed_dir: Path) -> list:
    """Unified diffs between freshly built files and the committed ones (empty when in sync)."""
    diffs = []
    built = {p.name for p in Path(built_dir).iterdir() if p.suffix in BUILT_SUFFIXES}
    committed = {p.name for p in Path(committed_dir).iterdir() if p.suffix in BUILT_SUFFIXES}
    for name in sorted(built | committed):
        a = (Path(committed_dir) / name).read_text().splitlines() if name in committed else []
        b = (Path(built_dir) / name).read_text().splitlines() if name in built else []
        if a != b:
            diffs.append("\n".join(difflib.unified_diff(a, b, f"lessons/{name} (committed)",
                                                        f"lessons/{name} (built from solutions/)", lineterm="",
                                                        n=1)))
    return diffs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if lessons/ differs from a fresh build")
    args = parser.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory(prefix="mha-check-") as tmp:
            build(Path(tmp))
            diffs = drift(Path(tmp), course.LESSONS)
        if answer_key.drift():
            diffs.append(f"{answer_key.TARGET.name} differs from the written answers of solutions/ "
                         "(run `make lessons`)")
        if diffs:
            print("\n\n".join(diffs)[:20000])
            print("\nlessons/ is out of date with solutions/: run `make lessons` and commit the result.",
                  file=sys.stderr)
            return 1
        print(f"lessons/ matches solutions/ ({len(course.lesson_names())} lessons)")
        return 0
    for path in [*build(course.LESSONS), answer_key.write()]:
        print(f"wrote {path.relative_to(course.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

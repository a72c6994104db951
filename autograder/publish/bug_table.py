"""Write docs/bug-catalog.md, the table of catalogued learner bugs, from ``autograder.bugs``.

    python -m autograder.publish.bug_table            # rewrite docs/bug-catalog.md (what `make docs` runs)
    python -m autograder.publish.bug_table --check    # exit 1 if docs/bug-catalog.md differs from the catalog
"""

from __future__ import annotations

import argparse
import sys

from autograder import bugs, course

TARGET = course.ROOT / "docs" / "bug-catalog.md"


def render() -> str:
    lines = [
        "<!-- Generated from autograder/bugs/ by `make docs` (python -m autograder.publish.bug_table); do not edit. -->",
        "# Learner bugs the hidden tests catch",
        "",
        "Every row is a wrong function from the catalog in `autograder/bugs/`. `python -m autograder.proofs.mutation`",
        "(`make mutants`, also run by `make test`) grades every row with the grading command (the same pipeline and",
        "sandbox as `make grade`), in rounds that each replace one function per row (bugs of functions whose tests",
        "share no cell), and proves that each row's function loses exactly the points of the tests listed, that the",
        "feedback shows the message, and, where marked, that the learner's visible self-check fails too.",
        "",
        "| bug | lesson | function | tests that lose points | visible check fails | message the learner reads |",
        "|---|---|---|---|---|---|",
    ]
    for b in bugs.CATALOG:
        message = b.diagnosis.replace("|", "\\|")
        tests = ", ".join(f"`{t}`" for t in b.tests)
        lines.append(f"| `{b.id}` | {course.lesson_number(b.lesson)} | `{b.function}` | {tests} | {'yes' if b.visible else 'no'} "
                     f"| {message} |")
    lines.append("")
    lines.append(f"{len(bugs.CATALOG)} bugs in {len({b.lesson for b in bugs.CATALOG})} lessons.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not TARGET.exists() or TARGET.read_text(encoding="utf-8") != text:
            print("docs/bug-catalog.md is out of date with autograder/bugs/: run `make docs` and commit it.",
                  file=sys.stderr)
            return 1
        print("docs/bug-catalog.md matches the catalog")
        return 0
    TARGET.parent.mkdir(exist_ok=True)
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(course.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

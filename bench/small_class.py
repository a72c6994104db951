"""How long a small class takes, as an instructor runs it: 2 students, 1 lesson, through the grading command.

    python bench/small_class.py [--lesson 01_warmup]

Three runs of ``python -m autograder.grade`` into one fresh output folder, timed from outside (wall clock):

* first:      the course is built, the canary grades the lesson's model answer, both students are graded;
* resubmit:   one student hands in again; the canary's pass is reused (nothing it depends on changed);
* fresh:      the same with ``--fresh-canary``: what the canary costs when it runs.

The goal on 2 cores is a first run under 40 s. Not a test: the figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autograder import course  # noqa: E402
from autograder.course import answers, notebooks  # noqa: E402

GOAL_SECONDS = 40


def _grade(klass: Path, out: Path, lesson: str, *extra) -> float:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(klass), "--out", str(out), "--lessons",
                           lesson, "--quiet", *extra], cwd=course.ROOT, env=notebooks.nbgrader_env(),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the grading command exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lesson", default="01_warmup")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        klass, out = Path(tmp) / "class", Path(tmp) / "out"
        notebooks.write_notebook(answers.fill(args.lesson), klass / "alice" / f"{args.lesson}.ipynb")
        notebooks.write_notebook(answers.fill(args.lesson, complete=False), klass / "bob" / f"{args.lesson}.ipynb")
        first = _grade(klass, out, args.lesson)
        notebooks.write_notebook(answers.fill(args.lesson), klass / "bob" / f"{args.lesson}.ipynb")
        resubmit = _grade(klass, out, args.lesson)
        notebooks.write_notebook(answers.fill(args.lesson, complete=False), klass / "bob" / f"{args.lesson}.ipynb")
        fresh = _grade(klass, out, args.lesson, "--fresh-canary")
    print(f"2 students, 1 lesson ({args.lesson}), {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}:")
    print(f"  first run (course built, canary, 2 notebooks): {first:6.1f} s  (goal: under {GOAL_SECONDS} s)")
    print(f"  a resubmission, canary reused:                 {resubmit:6.1f} s")
    print(f"  a resubmission, --fresh-canary:                {fresh:6.1f} s  "
          f"(the canary costs {fresh - resubmit:.1f} s; ratio {fresh / resubmit:.2f})")


if __name__ == "__main__":
    main()

"""How long lesson 07's two training runs take in numpy on this machine, and which heads they grow.

    make bench                                  # runs every bench/*.py
    PYTHONPATH=. python bench/training_speed.py

Runs the lesson's own code (``solutions/07_heads_that_learn.py``: its given model, the model answers of the
backward pass, its training settings) up to the training function, in full (not the short mode that
``MHA_SHORT_TRAINING=1`` selects), then trains both tasks and prints each run's wall time, its final losses and
every head's final score. The lesson's notebook asserts the same thresholds when it runs in full.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

os.environ.pop("MHA_SHORT_TRAINING", None)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the lesson's setup cell does, before numpy loads
os.environ.setdefault("MPLBACKEND", "Agg")

from autograder import course  # noqa: E402
from autograder.course import notebooks

LESSON = "07_heads_that_learn"


def lesson_namespace() -> dict:
    """The lesson's code cells run up to (and including) the one that defines ``trained``; test cells skipped."""
    namespace = {"__name__": "lesson07"}
    sys.path.insert(0, str(course.SOLUTIONS))
    for cell in notebooks.read_source(course.SOLUTIONS / f"{LESSON}.py").cells:
        if cell.cell_type != "code" or "hidden_cell.run" in cell.source:
            continue
        with contextlib.redirect_stdout(io.StringIO()):  # the lesson's demonstrations print; the bench does not
            exec(compile(cell.source, LESSON, "exec"), namespace)  # noqa: S102 - the course's own lesson source
        if "def trained(" in cell.source:
            return namespace
    raise RuntimeError(f"solutions/{LESSON}.py defines no `trained`: the bench no longer fits the lesson")


def main():
    import numpy as np

    ns = lesson_namespace()
    print(f"lesson 07 training, numpy {np.__version__}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for task, what in (("previous", "previous-token"), ("induction", "layer-2 induction")):
        run = ns["trained"](task)
        scores = run["scores"][-1][-1]
        halves = (f" (first half {run['first_half'][-1]:.2f}, second half {run['second_half'][-1]:.2f})"
                  if task == "induction" else "")
        print(f"{task:9s}: {run['steps'][-1]} steps in {run['seconds']:.1f} s; loss {run['loss'][-1]:.3f}{halves}; "
              f"{what} scores per head {', '.join(f'{v:.2f}' for v in scores)}")


if __name__ == "__main__":
    main()

"""How long each of lesson 07's two training tasks takes in numpy on this machine, and which heads it grows.

    make bench                                  # runs every bench/*.py
    PYTHONPATH=. python bench/training_speed.py [--seeds N]

Runs the lesson's own code (``solutions/07_heads_that_learn.py``: its given model, the model answers of the
backward pass, its training settings and its ``SEED``) up to the training function, in full (not the short mode
that ``MHA_SHORT_TRAINING=1`` selects), then trains both tasks and prints each run's steps, its wall and CPU time,
its final losses and every head's final score. ``--seeds N`` trains seeds 0 .. N-1 and prints the mean time per
task and how many seeds grew each head; ``tests/unit/lessons/test_lesson07_training.py`` asks that all twenty do.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.pop("MHA_SHORT_TRAINING", None)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the lesson's setup cell does, before numpy loads
os.environ.setdefault("MPLBACKEND", "Agg")

from autograder.course import notebooks  # noqa: E402

LESSON = "07_heads_that_learn"
WHAT = {"previous": "previous-token", "induction": "layer-2 induction"}


def timed(ns, task, seed):
    """One run of ``task``, its CPU seconds and its final best score (the lesson's measure)."""
    start = time.process_time()
    run = ns["train"](task, seed=seed, **ns["TRAINING"][task])
    return run, time.process_time() - start, float(max(run["scores"][-1][-1]))


def main(argv=None):
    import numpy as np

    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--seeds", type=int, default=0, help="also train seeds 0 .. N-1 and summarise them")
    seeds = args.parse_args(argv).seeds
    ns = notebooks.run_code_cells(LESSON, until="trained")
    print(f"lesson 07 training, numpy {np.__version__}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for task, what in WHAT.items():
        run, cpu, _ = timed(ns, task, ns["SEED"])
        halves = (f" (first half {run['first_half'][-1]:.2f}, second half {run['second_half'][-1]:.2f})"
                  if task == "induction" else "")
        print(f"{task:9s}: seed {run['seed']}, {run['steps'][-1]} steps in {run['seconds']:.1f} s ({cpu:.1f} s CPU); "
              f"loss {run['loss'][-1]:.3f}{halves}; {what} scores per head "
              f"{', '.join(f'{v:.2f}' for v in run['scores'][-1][-1])}")
    for task in WHAT if seeds else ():
        results = [timed(ns, task, seed) for seed in range(seeds)]
        grown = sum(best > 0.6 for _, _, best in results)
        print(f"{task:9s}: seeds 0-{seeds - 1}: {np.mean([c for _, c, _ in results]):.2f} s CPU per run, "
              f"{sum(c for _, c, _ in results):.1f} s in all; best score above 0.6 for {grown} of {seeds}; lowest "
              f"{min(b for _, _, b in results):.2f}")


if __name__ == "__main__":
    main()

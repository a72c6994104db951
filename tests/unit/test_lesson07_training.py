"""Lesson 07's heads appear for every seed: its own code (the given model, the model answers, its ``TRAINING``
settings and step budget), trained in full for seeds 0-19, grows a previous-token head and an induction head
whose score passes the lesson's own threshold, and the lesson's ``verdict`` says so; a run that grew no head is
told what failed and what to try. About 40 s of one core (``make bench`` prints the time per task)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
SEEDS = range(20)
THRESHOLD = 0.6  # the lesson's: verdict(run, scores, threshold=0.6)
SCRIPT = Path(__file__).resolve().parents[1] / "helpers" / "lesson07_seeds.py"
ROOT = SCRIPT.parents[2]


@pytest.fixture(scope="module")
def trained():
    proc = subprocess.run([sys.executable, str(SCRIPT), *map(str, SEEDS)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("task", ["previous", "induction"])
def test_every_seed_grows_the_head(trained, task):
    assert not trained["short"]
    best = {seed: max(r["final"]) for seed, r in trained[task].items()}
    assert sorted(map(int, best)) == list(SEEDS)
    assert min(best.values()) > THRESHOLD, best
    for seed, r in trained[task].items():
        assert "the head appeared" in r["verdict"], (seed, r)


def test_a_run_without_a_head_says_what_to_try(trained):
    said = trained["unfinished"]
    assert "no head appeared" in said and "seed 0" in said and "n_steps" in said and "SEED" in said, said

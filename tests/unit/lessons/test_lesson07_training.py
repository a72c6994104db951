"""Lesson 07's heads appear for every seed: its own code (the given model, the model answers, its ``TRAINING``
settings and step budget), trained in full for seeds 0-19, grows a previous-token head and an induction head
whose score passes the lesson's own threshold, and the lesson's ``verdict`` says so; a run that grew no head is
told what failed and what to try. About 40 s of one core (``make bench`` prints the time per task)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow
SEEDS = range(20)
THRESHOLD = 0.6  # the lesson's: verdict(run, scores, threshold=0.6)
SCRIPT = Path(__file__).resolve().parents[2] / "helpers" / "lesson07_seeds.py"
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


def test_layer_1_does_the_previous_token_work_not_sharply_as_the_lesson_says(trained):
    """Section 8: layer 1's best previous-token score ends between 0.3 and 0.6 for every seed (it once claimed
    above 0.6, while the runs gave 0.43-0.56)."""
    best = {seed: max(r["layer_1_previous"]) for seed, r in trained["induction"].items()}
    assert all(0.3 < v < 0.6 for v in best.values()), best


def test_the_induction_score_stops_short_of_one_and_the_repeated_half_is_learned(trained):
    for seed, r in trained["induction"].items():
        assert 0.6 < max(r["final"]) < 0.9, (seed, r["final"])
        random_half, repeated_half = r["halves"]
        assert repeated_half < 0.5 * random_half and random_half > 2.0, (seed, r["halves"])


def test_the_pattern_figure_s_stripe_is_where_its_description_says(trained):
    """The figure (seed 0, the best layer-2 head): a stripe from query 10, key 1 to query 19, key 10, bright on
    most of its ten queries."""
    stripe = trained["induction"]["0"]["stripe"]  # queries 10 .. 19 on keys 1 .. 10
    assert sum(v > 0.5 for v in stripe) > len(stripe) // 2 and sum(stripe) / len(stripe) > 0.5, stripe


def test_a_run_whose_head_looks_right_but_whose_loss_stays_up_is_not_called_a_success(trained):
    """A dV without its transpose once grew a head that scored above 0.6 while the loss went 5.91 -> 5.47, and the
    verdict said the head appeared."""
    from autograder.course import notebooks

    ns = notebooks.run_code_cells("07_heads_that_learn", until="verdict")
    ns["SHORT"] = False  # the test process trains short; the verdict judges a full run here
    run = {"task": "previous", "seed": 0, "steps": [0, 100], "loss": [5.91, 5.47], "first_half": [4.0, 4.0],
           "second_half": [4.0, 4.0]}
    said = ns["verdict"](run, np.array([[0.2, 0.2], [0.9, 0.3]]))
    assert "the head appeared" not in said and "5.91 -> 5.47" in said and "gradient checks" in said, said

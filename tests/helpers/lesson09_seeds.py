"""Run as a script, in a process of its own: trains lesson 09's model with the lesson's own code (its given cells and
model answers, its settings and step budget) for the seeds given, in full, and prints one JSON line: per seed, the
held-out loss against the bigram baseline, the loss on the repeated letters with each head zeroed, each block's
head scores, the K-composition of block 2 with block 1, the share of the words it writes that occur in the
training text (and the untrained model's share), and the seconds training took. Its own process, so that OpenBLAS
starts with one thread, as the lesson's setup cell asks, and the time measured is the lesson's.
``bench/small_gpt.py --seeds 0-19`` runs it for seeds 0-19."""

import json
import os
import sys

os.environ.pop("MHA_SHORT_TRAINING", None)
os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np  # noqa: E402

from autograder import reference  # noqa: E402
from autograder.course import notebooks  # noqa: E402

# the learner's functions that the lesson's given code calls after training: the model answers' twins
LATER_ANSWERS = ("sample_next", "generate", "ablate_head", "k_composition")


def measure(ns, seed):
    params, history = ns["train"](seed)
    untrained = ns["init_model"](np.random.default_rng(seed))
    intact = ns["half_losses"](params)
    heads = [(b, h) for b in range(ns["N_BLOCKS"]) for h in range(ns["N_HEADS"])]
    ablated = {f"{b},{h}": ns["half_losses"](params, [(b, h)]) for b, h in heads}
    scores = [[s.tolist() for s in ns["scores_of"](w)] for w in ns["attention_weights"](params)]
    b1, b2 = params["blocks"][:2]
    composition = ns["k_composition"](b2["W_Q"], b2["W_K"], b1["W_V"], b1["W_O"], ns["N_HEADS"])
    words = {name: ns["known_words"](ns["write"](p, "\n", 3000, np.random.default_rng(1)))
              for name, p in (("trained", params), ("untrained", untrained))}
    return {"seconds": history["seconds"], "steps": history["steps"][-1], "held_out": history["held_out"],
            "bigram": ns["bigram_loss"], "intact": intact, "ablated": ablated, "scores": scores,
            "composition": np.asarray(composition).tolist(), "words": words}


def main(seeds):
    ns = notebooks.run_code_cells("09_small_gpt", until="known_words")
    ns.update({name: getattr(reference, name) for name in LATER_ANSWERS})
    print(json.dumps({"short": ns["SHORT"], "seeds": {seed: measure(ns, seed) for seed in seeds}}))


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]])

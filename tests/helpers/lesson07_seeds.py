"""Run as a script, in a process of its own: trains lesson 07's two tasks with the lesson's own code for the seeds
given, in full, and prints JSON: for each task, each seed's final scores per head and the lesson's verdict. Its
own process, so that OpenBLAS starts with one thread, as the lesson's setup cell asks (a test process has loaded
numpy long before), and the time measured is the lesson's."""

import json
import os
import sys

os.environ.pop("MHA_SHORT_TRAINING", None)
os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np  # noqa: E402

from autograder.course import notebooks  # noqa: E402

LAYER = {"previous": 0, "induction": 1}  # the layer whose heads the lesson scores for each task


def main(seeds):
    ns = notebooks.run_code_cells("07_heads_that_learn", until="verdict")
    result = {"short": ns["SHORT"]}
    for task, layer in LAYER.items():
        result[task] = {}
        for seed in seeds:
            run = ns["trained"](task, seed)
            scores = np.array([s[layer] for s in run["scores"]])  # (checkpoints, n_heads)
            result[task][seed] = {"final": scores[-1].tolist(), "verdict": ns["verdict"](run, scores),
                                  "seconds": run["seconds"], "loss": [run["loss"][0], run["loss"][-1]],
                                  "halves": [run["first_half"][-1], run["second_half"][-1]],
                                  "layer_1_previous": np.asarray(run["scores"][-1][0]).tolist()}
            if task == "induction":  # the pattern figure's stripe: the best layer-2 head, its query t on key t - 9
                w = np.asarray(run["patterns"][-1][1][int(np.argmax(scores[-1]))])  # (T, T), the example shown
                half = w.shape[-1] // 2
                result[task][seed]["stripe"] = [float(w[t, t - half + 1]) for t in range(half, w.shape[-1])]
    quick = ns["train"]("induction", n_steps=3, every=3, n_vocab=16, seed=0)
    result["unfinished"] = ns["verdict"](quick, np.array([s[1] for s in quick["scores"]]))
    print(json.dumps(result))


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]])

"""Lesson 09's small GPT: how long its training takes on this machine, and what each seed's run shows.

    make bench                                        # runs every bench/*.py: seed 0 only
    PYTHONPATH=. python bench/small_gpt.py --seeds 0-19 [--workers 2]

Each seed trains in a process of its own with the lesson's own code (``tests/helpers/lesson09_seeds.py``: one
BLAS thread, the lesson's 1,500 steps). Printed per seed: training seconds, the held-out loss against the bigram
baseline, the repeated half's loss with every head and with the costliest head zeroed, which head that is, the
block-1 head whose removal costs most and its previous-token score, whether the induction head composes most with
the previous-token head (K-composition), and the share of the words it writes that occur in the training text,
trained and untrained.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "helpers" / "lesson09_seeds.py"


def run(seed: int) -> dict:
    proc = subprocess.run([sys.executable, str(SCRIPT), str(seed)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])["seeds"][str(seed)]


def summary(seed: int, r: dict) -> str:
    ablated = {tuple(map(int, k.split(","))): v[1] for k, v in r["ablated"].items()}
    costliest = max(ablated, key=ablated.get)
    first_block = max((bh for bh in ablated if bh[0] == 0), key=ablated.get)
    previous = r["scores"][0][0]
    inductor = max(range(len(r["scores"][1][1])), key=lambda h: r["scores"][1][1][h])
    previous_head = max(range(len(previous)), key=lambda h: previous[h])
    composes = max(range(len(r["composition"][inductor])), key=lambda j: r["composition"][inductor][j])
    return (f"seed {seed:2d}: {r['seconds']:5.1f} s, held out {r['held_out'][-1]:.2f} (bigram {r['bigram']:.2f}); "
            f"repeated half {r['intact'][1]:.2f}, block {costliest[0] + 1} head {costliest[1]} zeroed "
            f"{ablated[costliest]:.2f}; block 1's costliest head {first_block[1]} (+{ablated[first_block] - r['intact'][1]:.2f}, "
            f"previous-token score {previous[first_block[1]]:.2f}); induction head {inductor} (score "
            f"{r['scores'][1][1][inductor]:.2f}) composes most with head {composes} "
            f"({'the' if composes == previous_head else 'not the'} previous-token head {previous_head}); known words "
            f"{r['words']['trained'][1]:.0%} trained, {r['words']['untrained'][1]:.0%} untrained")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0", help="one seed or a range: 0-19")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    low, _, high = args.seeds.partition("-")
    seeds = list(range(int(low), int(high or low) + 1))
    with ThreadPoolExecutor(args.workers) as pool:
        results = dict(zip(seeds, pool.map(run, seeds)))
    for seed, r in results.items():
        print(summary(seed, r))
    print(json.dumps({str(s): r for s, r in results.items()}), file=sys.stderr)


if __name__ == "__main__":
    main()

"""How a test measures what a step costs without trusting one noisy timing: the fastest of a few runs, and the ratio
of two sizes' (a machine shared with other work slows runs down, never speeds them up)."""

from __future__ import annotations

import time


def fastest(function, *args, runs: int = 5) -> tuple:
    """(what ``function(*args)`` returned, the shortest of ``runs`` runs' seconds)."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = function(*args)
        times.append(time.perf_counter() - started)
    return result, min(times)

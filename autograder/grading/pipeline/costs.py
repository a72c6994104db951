"""What grading one notebook cost, phase by phase: the grader's CPU and the kernel's.

Grading a notebook is the learner's own work, which no grader can avoid (the kernel running the learner's cells,
and the hidden tests: the kernel's calls and the grader's comparisons), and the grader's overhead: starting and
stopping the kernel, nbgrader's steps (its conversions, preprocessors and database writes), the feedback page,
and the records and outputs. A ``Ledger`` charges every CPU second of the grading process to exactly one phase, the
innermost one open (``phase``), and the kernel's CPU, read from ``/proc`` for the processes of the kernel's own
uid (``isolation`` ``uid``, as root), to the phase of the cell that used it (``kernel_used``); the CPU a warm
kernel's launcher took counts in its start. Without a uid of its own the kernel's CPU is not known and only the
grader's is kept.

One ledger is open per grading process at a time (``begin``, by ``worker.grade_one``; a process grades one
notebook at a time); ``SafeExecute`` charges its phases to it. The worker keeps the finished ledger in the
notebook's record (``Record.costs``), and ``bench/grading_speed.py`` sums the records of a class. Nothing here
decides a score.
"""

from __future__ import annotations

import contextlib
import os
import time

KERNEL = "kernel start and stop"
LEARNER = "learner's cells"
HIDDEN = "hidden tests"
NBGRADER = "nbgrader's steps"
FEEDBACK = "feedback page"
RECORDS = "records and outputs"
PHASES = (KERNEL, LEARNER, HIDDEN, NBGRADER, FEEDBACK, RECORDS)
OWN_WORK = (LEARNER, HIDDEN)  # the limit: what grading any notebook must spend, whatever the grader
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Ledger:
    """CPU seconds per phase: ``grader`` (this process, all its threads), ``kernel`` (the kernel's processes, or
    None where they cannot be read) and ``wall``."""

    def __init__(self):
        self.grader = dict.fromkeys(PHASES, 0.0)
        self.wall = dict.fromkeys(PHASES, 0.0)
        self.kernel: dict | None = dict.fromkeys(PHASES, 0.0)
        self._open: list[str] = []
        self._cpu, self._clock = time.process_time(), time.monotonic()

    def _switch(self) -> None:
        cpu, clock = time.process_time(), time.monotonic()
        if self._open:
            self.grader[self._open[-1]] += cpu - self._cpu
            self.wall[self._open[-1]] += clock - self._clock
        self._cpu, self._clock = cpu, clock

    @contextlib.contextmanager
    def phase(self, name: str):
        """Charge what runs inside to ``name`` (a phase opened inside takes its own share)."""
        self._switch()
        self._open.append(name)
        try:
            yield self
        finally:
            self._switch()
            self._open.pop()

    def kernel_used(self, name: str, seconds: float | None) -> None:
        """The kernel spent ``seconds`` of CPU in phase ``name``; None: it could not be read, so no kernel figure."""
        if seconds is None or self.kernel is None:
            self.kernel = None
        else:
            self.kernel[name] += max(seconds, 0.0)

    def to_json(self) -> dict:
        return {name: {"grader": round(self.grader[name], 4), "wall": round(self.wall[name], 4),
                       "kernel": None if self.kernel is None else round(self.kernel[name], 4)} for name in PHASES}


_current = Ledger()


def begin() -> Ledger:
    """A new ledger for the notebook this process grades next; the phases opened from now on charge it."""
    global _current
    _current = Ledger()
    return _current


def phase(name: str):
    """``Ledger.phase`` of this process's open ledger."""
    return _current.phase(name)


def current() -> Ledger:
    return _current


class KernelClock:
    """The CPU the processes of one kernel have used, read from ``/proc/<pid>/stat`` (user and system time, with
    that of their children that were waited for). The processes are found once (``uids.processes_of``) when the
    kernel is up; a process the kernel starts later is not counted. ``read`` returns None where nothing can be read."""

    def __init__(self, pids):
        self.pids = list(pids)

    def read(self) -> float | None:
        if not self.pids:
            return None
        total = 0
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
                total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime (fields 14-17 of stat(5))
            except (OSError, IndexError, ValueError):  # a measurement never fails a notebook's grading
                continue  # it ended: what it used is lost, as for any process the grader did not wait for
        return total / _TICK


def summed(ledgers) -> dict:
    """The phases' seconds summed over many ``to_json`` ledgers: {phase: {"grader", "wall", "kernel"}}; a
    phase's kernel figure is None when any ledger lacks one."""
    total: dict[str, dict[str, float | None]] = {name: {"grader": 0.0, "wall": 0.0, "kernel": 0.0} for name in PHASES}
    for ledger in ledgers:
        for name in PHASES:
            row = ledger.get(name) or {}
            sums = total[name]
            sums["grader"] = (sums["grader"] or 0.0) + (row.get("grader") or 0.0)
            sums["wall"] = (sums["wall"] or 0.0) + (row.get("wall") or 0.0)
            kernel, before = row.get("kernel"), sums["kernel"]
            sums["kernel"] = None if kernel is None or before is None else before + kernel
    return total

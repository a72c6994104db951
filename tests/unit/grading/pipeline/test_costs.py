"""The ledger of what grading a notebook cost: every CPU second of the grader in exactly one phase, the kernel's
CPU read from /proc, and a kernel that cannot be read leaves no kernel figure rather than a zero."""

import os
import subprocess
import sys
import time

from autograder.grading.pipeline import costs


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_phase_opened_inside_another_takes_its_own_share_and_the_outer_keeps_only_the_rest():
    ledger = costs.Ledger()
    with ledger.phase(costs.RECORDS):
        _spin(0.05)
        with ledger.phase(costs.FEEDBACK):
            _spin(0.15)
        _spin(0.05)
    assert 0.14 <= ledger.grader[costs.FEEDBACK] < 0.3
    assert 0.09 <= ledger.grader[costs.RECORDS] < 0.15  # not the inner phase's 0.15 s again
    assert ledger.wall[costs.FEEDBACK] >= ledger.grader[costs.FEEDBACK] * 0.9
    assert sum(ledger.grader.values()) < 0.4
    assert ledger.to_json()[costs.HIDDEN] == {"grader": 0.0, "wall": 0.0, "kernel": 0.0}


def test_the_process_ledger_is_the_one_begun_last():
    first = costs.begin()
    with costs.phase(costs.NBGRADER):
        _spin(0.02)
    second = costs.begin()
    assert costs.current() is second and first.grader[costs.NBGRADER] > 0 and second.grader[costs.NBGRADER] == 0


def test_a_kernel_that_cannot_be_read_leaves_no_kernel_figure_at_all():
    ledger = costs.Ledger()
    ledger.kernel_used(costs.LEARNER, 0.5)
    assert ledger.to_json()[costs.LEARNER]["kernel"] == 0.5
    ledger.kernel_used(costs.HIDDEN, None)
    assert all(row["kernel"] is None for row in ledger.to_json().values())
    ledger.kernel_used(costs.HIDDEN, 1.0)  # a later reading does not bring back a partial figure
    assert ledger.kernel is None


def test_the_kernel_clock_reads_what_its_processes_spent_and_nothing_for_no_process():
    assert costs.KernelClock([]).read() is None
    child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.4\n"
                              "while time.process_time() < end: pass\nimport sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        clock = costs.KernelClock([child.pid])
        deadline = time.monotonic() + 20
        while (used := clock.read()) < 0.35 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 0.35 <= used < 5  # whole clock ticks: at most one tick below what it spun
    finally:
        child.communicate(b"")
    assert clock.read() == 0  # it ended: nothing left to read, and no error
    assert costs.KernelClock([os.getpid()]).read() > 0


def test_summed_adds_phases_and_keeps_no_kernel_figure_if_any_notebook_lacks_one():
    a, b = costs.Ledger(), costs.Ledger()
    a.grader[costs.FEEDBACK], b.grader[costs.FEEDBACK] = 0.25, 0.5
    a.kernel_used(costs.LEARNER, 1.0)
    b.kernel_used(costs.LEARNER, 2.0)
    total = costs.summed([a.to_json(), b.to_json()])
    assert total[costs.FEEDBACK]["grader"] == 0.75 and total[costs.LEARNER]["kernel"] == 3.0
    b.kernel_used(costs.LEARNER, None)
    assert costs.summed([a.to_json(), b.to_json()])[costs.LEARNER]["kernel"] is None
    assert costs.summed([])[costs.NBGRADER] == {"grader": 0.0, "wall": 0.0, "kernel": 0.0}

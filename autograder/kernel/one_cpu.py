"""One CPU for a kernel that no control group bounds (grading as an ordinary user).

Root gives each kernel a control group with a CPU share of one CPU (``cgroups.py``); an ordinary user, as a rule,
has no control group to give. So the launcher ``claim``s a CPU for the kernel: the first of the CPUs it may run on
that no other kernel of the same user holds (each claim is an abstract Unix socket named after the user and the
CPU, bound for the launcher's life and released however the launcher ends); when every CPU is held, one of them by
the launcher's pid. Then, in the process that becomes bubblewrap (or the kernel itself, without bubblewrap),
before it starts, ``hold`` pins it to that CPU (``sched_setaffinity``, which every process and thread it starts
inherits, bubblewrap's pid 1 included) and installs a seccomp filter under which neither it nor anything it starts
may change its CPUs again: ``sched_setaffinity`` fails with ``EPERM``. However many processes a
notebook starts, together they run on one CPU, and grading the class beside them goes on.

The filter (``autograder/kernel/syscall_filter.py``) also refuses what it refuses every kernel (keyrings, other
processes' memory); where it is not written for the machine's architecture, ``hold`` pins without it and
``can_hold`` says so, so that the report does not claim the bound.
"""

from __future__ import annotations

import os
import socket

from autograder.kernel import syscall_filter


def can_hold() -> bool:
    """True where ``hold`` can keep a kernel from changing its CPUs (the filter is written for this architecture)."""
    return syscall_filter.available()


def claim(uid: int | None = None) -> tuple:
    """(the CPU for a kernel, the claim: keep it open for the kernel's life; None when every CPU was held)."""
    uid = os.getuid() if uid is None else uid
    cpus = sorted(os.sched_getaffinity(0))
    for cpu in cpus:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(f"\0mha-course-cpu-{uid}-{cpu}")  # abstract: no file, gone with the last process holding it
            return cpu, sock
        except OSError:
            sock.close()
    return cpus[os.getpid() % len(cpus)], None


def hold(cpu: int) -> None:
    """Pin this process to ``cpu`` and, where ``can_hold``, forbid it and all it starts to change that (no new
    privileges, then the seccomp filter). Raises OSError when the machine refuses."""
    os.sched_setaffinity(0, {cpu})
    syscall_filter.install(syscall_filter.KERNEL + ("sched_setaffinity",))

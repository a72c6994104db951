"""Sandbox uids: one per graded notebook, used by no account and no live process, never the same twice in a row.

A uid is held (an abstract socket bound in the grader's process, freed when released or when the process dies)
from before its kernel starts until every process of it has been killed, so two kernels never share a uid, and a
process that survived somehow could not reach a later notebook: the next notebook gets another uid.
"""

from __future__ import annotations

import os
import pwd
import secrets
import signal
import socket
import time

BASE, SPAN = 100_000, 500_000  # uids [BASE, BASE + SPAN): far above the accounts of a normal machine


def processes_of(uid: int) -> list:
    """PIDs whose real uid is ``uid``, zombies and dying processes included (their threads may still run)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            found.append(int(pid))
                        break
        except (OSError, ValueError):
            continue
    return found


def kill(uid: int) -> int:
    """SIGKILL every process of ``uid`` until none is left; returns how many were killed."""
    killed: set = set()
    for _ in range(100):
        pids = processes_of(uid)
        if not pids or set(pids) <= killed and not alive(pids):
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        killed |= set(pids)
        time.sleep(0.02)
    return len(killed)


def alive(pids) -> bool:
    """True while one of ``pids`` runs (neither gone nor a zombie)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    return True
        except OSError:
            continue
    return False


class Held:
    """A uid reserved for one notebook; ``release()`` after its processes are gone."""

    def __init__(self, uid: int, lock: socket.socket):
        self.uid, self._lock = uid, lock

    def release(self) -> None:
        self._lock.close()


def _lock_name(uid: int) -> str:
    return f"\0mha-grading-uid-{uid}"


def is_held(uid: int) -> bool:
    """True while some grader on this machine holds ``uid`` (its kernel may be running)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.bind(_lock_name(uid))
        return False
    except OSError:
        return True
    finally:
        probe.close()


def acquire(base: int = BASE, span: int = SPAN) -> Held:
    """A random free uid: no account, no process, not held by another grader on this machine."""
    for _ in range(1000):
        uid = base + secrets.randbelow(span)
        try:
            pwd.getpwuid(uid)
            continue
        except KeyError:
            pass
        lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            lock.bind(_lock_name(uid))
        except OSError:
            lock.close()
            continue
        if processes_of(uid):
            lock.close()
            continue
        return Held(uid, lock)
    raise RuntimeError("no free sandbox uid")

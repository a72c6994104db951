"""One control group per graded notebook: memory (tmpfs pages and kernel objects included), processes and CPU.

The kernel launcher (``autograder/kernel/sandbox.py``, as root) creates the group named after the notebook's sandbox uid
and moves itself into it before it starts the kernel, so the kernel and everything it starts are counted
together; ``SafeExecute`` (``autograder/grading/pipeline/execute.py``) kills what is left in the group when the notebook is
done, reads whether the memory limit was hit, and removes the group.

cgroup v1 (one hierarchy per controller, as on this course's CI machines) and cgroup v2 (one unified hierarchy)
are both handled. Where no cgroup file system is writable, ``available()`` is False and the grading command
says so in its report: the per-process limits of the launcher (address space, process count, CPU time) still
apply, but memory kept in tmpfs files or IPC objects and the CPU share of a notebook are then not bounded.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

FS = Path("/sys/fs/cgroup")
PARENT = "mha-grading"
CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000


def _own_path(controller: str) -> str:
    """This process's group in ``controller``'s v1 hierarchy ("" for v2: the unified line)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        _, names, path = line.split(":", 2)
        if (controller and controller in names.split(",")) or (not controller and names == ""):
            return path
    return "/"


def _unified() -> bool:
    return (FS / "cgroup.controllers").exists()


def group_dirs(name: str) -> list:
    """The directories of group ``name``, one per controller (one in all for cgroup v2)."""
    if _unified():
        return [FS / _own_path("").lstrip("/") / PARENT / name]
    return [FS / c / _own_path(c).lstrip("/") / PARENT / name for c in CONTROLLERS if (FS / c).is_dir()]


def _write(path: Path, value) -> None:
    path.write_text(f"{value}\n")


def available() -> bool:
    """True when a group can be created here (root and a writable cgroup file system)."""
    name = f"probe-{os.getpid()}"
    try:
        create(name, memory_bytes=64 << 20, pids=8, cpus=1.0)
        return True
    except OSError:
        return False
    finally:
        remove(name)


def create(name: str, *, memory_bytes: int, pids: int, cpus: float) -> list:
    """Create group ``name`` with its limits; raise OSError when that is not possible."""
    dirs = group_dirs(name)
    if not dirs:
        raise OSError("no cgroup controllers are mounted")
    quota = max(1000, int(cpus * CPU_PERIOD_US))
    for d in dirs:
        if _unified():
            d.parent.mkdir(exist_ok=True)
            _write(d.parent.parent / "cgroup.subtree_control", "+memory +pids +cpu")
            _write(d.parent / "cgroup.subtree_control", "+memory +pids +cpu")
        d.mkdir(parents=True, exist_ok=True)
        files = {"memory.limit_in_bytes": memory_bytes, "memory.swappiness": 0, "memory.max": memory_bytes,
                 "memory.swap.max": 0, "pids.max": pids, "cpu.cfs_period_us": CPU_PERIOD_US,
                 "cpu.cfs_quota_us": quota, "cpu.max": f"{quota} {CPU_PERIOD_US}"}
        for file, value in files.items():
            if (d / file).exists():
                try:
                    _write(d / file, value)
                except OSError:
                    if file not in ("memory.swappiness", "memory.swap.max"):  # absent without swap accounting
                        raise
    return dirs


def join(name: str, pid: int) -> None:
    for d in group_dirs(name):
        _write(d / "cgroup.procs", pid)


def pids(name: str) -> set:
    found = set()
    for d in group_dirs(name):
        try:
            found |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
        except OSError:
            pass
    return found


def memory_limit_hit(name: str) -> bool:
    """True when the group's memory limit stopped an allocation or the kernel's OOM killer acted in it."""
    for d in group_dirs(name):
        for file, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
            try:
                for line in (d / file).read_text().splitlines():
                    k, _, v = line.partition(" ")
                    if k in (key, "max", "oom") and int(v or 0) > 0:
                        return True
            except OSError:
                pass
        try:
            if int((d / "memory.failcnt").read_text()) > 0:
                return True
        except (OSError, ValueError):
            pass
    return False


def process_limit_hit(name: str) -> bool:
    """True when the group's process limit refused a fork."""
    for d in group_dirs(name):
        try:
            for line in (d / "pids.events").read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == "max" and int(v or 0) > 0:
                    return True
        except (OSError, ValueError):
            pass
    return False


def kill(name: str) -> int:
    """SIGKILL every process still in the group; returns how many there were."""
    killed = set()
    for _ in range(50):
        left = pids(name)
        if not left:
            break
        for pid in left - killed:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        killed |= left
        time.sleep(0.02)
    return len(killed)


def remove(name: str) -> None:
    """Kill what is left and remove the group (no error when it does not exist)."""
    kill(name)
    for d in group_dirs(name):
        for _ in range(50):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.02)

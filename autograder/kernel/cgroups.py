"""One control group per graded notebook: memory (tmpfs pages and kernel objects included), processes and CPU.

The kernel launcher (``autograder/kernel/launcher.py``) creates the group (named after the notebook's sandbox uid as
root, after its private folder otherwise) and moves itself into it before it starts the kernel, so the kernel and
everything it starts are counted together; ``SafeExecute`` (``autograder/grading/pipeline/execute.py``) kills what is left in the group when the notebook is
done, reads whether the memory limit was hit, and removes the group.

cgroup v1 (one hierarchy per controller, as on this course's CI machines) and cgroup v2 (one unified hierarchy)
are both handled. As root, the groups are made below the grader's own group; otherwise, on cgroup v2, below the
nearest group above it that systemd delegated to the user (``delegated``), where there is one. Where no cgroup file
system is writable, ``available()`` is False and the grading command
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


def delegated(own: str, uid: int):
    """Not root, cgroup v2: the nearest group above ``own`` (this process's group) that belongs to ``uid``, where
    that user may make groups and move its processes (systemd delegates ``user@UID.service`` and what its user
    manager makes below it to the user); None where there is none (a login session's scope is root's)."""
    above = Path(own.lstrip("/")).parents
    for group in list(above)[:-1]:  # never the root group, and not ``own``, which holds processes
        try:
            if (FS / group).stat().st_uid != uid:
                return None
        except OSError:
            return None
        if all(os.access(FS / group / f, os.W_OK) for f in ("cgroup.subtree_control", "cgroup.procs")):
            return FS / group
    return None


def group_dirs(name: str) -> list:
    """The directories of group ``name``, one per controller (one in all for cgroup v2): under this process's own
    group as root, under the user's delegated group (``delegated``) otherwise; none where there is no such group."""
    if _unified():
        if os.geteuid() == 0:
            return [FS / _own_path("").lstrip("/") / PARENT / name]
        base = delegated(_own_path(""), os.geteuid())
        return [base / PARENT / name] if base is not None else []
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
        raise OSError("no control group this process may make")
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
    killed: set = set()
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

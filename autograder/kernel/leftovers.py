"""What the kernels of a grader that was killed leave behind, found and removed: the control groups of uids no
grader holds, the private folders of kernels whose grading process is gone (each named after its grader:
``private_folder_prefix``) and the folders of warm servers whose grader is gone. The grading command removes them
before a run and after it, and the pool after a worker died (``autograder/grading/run/pool.py``); a folder or uid of a
grader still running is never taken, whoever runs it."""

from __future__ import annotations

import os
import shutil

from autograder.kernel import cgroups, sandbox, uids, warm_kernels


def remove_stale_sandboxes() -> int:
    """Remove what kernels of a grader that was killed left behind (their processes died with it): control
    groups and private folders of uids no grader holds. Returns how many were removed."""
    removed = 0
    for uid in stale_sandbox_uids():
        cgroups.remove(sandbox.cgroup_name(uid))
        uids.kill(uid)
        removed += 1
    for folder in stale_private_folders() + warm_kernels.stale_folders():
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    return removed


def private_folder_prefix() -> str:
    """The start of the name of every kernel's private folder this process makes: named after the grading process,
    so that only a folder whose grader is gone is ever taken for stale (``stale_private_folders``)."""
    return f"mha-kernel-{os.getpid()}-"


def stale_private_folders() -> list:
    """Private folders of kernels whose grading process is gone. A folder of a grader still running is never one,
    whoever runs it: an ordinary user's grader beside root's, or two graders of the same user."""
    return sandbox.folders_of_gone_processes(("mha-kernel-*-*",))


def stale_sandbox_uids() -> list:
    """Uids with a control group that no grader holds any more."""
    found = set()
    for d in {d.parent for d in cgroups.group_dirs("uid-0")}:
        for group in d.glob("uid-*") if d.is_dir() else ():
            uid = int(group.name[4:]) if group.name[4:].isdigit() else None
            if uid is not None and not uids.is_held(uid):
                found.add(uid)
    return sorted(found)

"""The bounds of a kernel without root, each part on its own (no kernel): the launcher's watch over the memory and
processes of everything below it (``autograder/kernel/watchdog.py``), the one CPU it holds the kernel to
(``autograder/kernel/one_cpu.py``), and the control group systemd delegates to a user
(``autograder/kernel/cgroups.py``), found in a made-up cgroup v2 tree (this machine has none).
``tests/grading/test_non_root.py`` grades a class as an ordinary user with all of them in place."""

from __future__ import annotations

import os
import sys
import time

import pytest

from autograder.kernel import cgroups, one_cpu, syscall_filter, watchdog

HOLDER = r"""
import os, sys, time
processes, mb_each, parent_mb, seconds, pids = sys.argv[1:]
shared = b"x" * (int(parent_mb) << 20)  # resident in the parent, and in each child after fork (not copied)
for _ in range(int(processes)):
    pid = os.fork()
    if pid == 0:
        hoard = b"x" * (int(mb_each) << 20)  # touched, so resident
        time.sleep(30)
        os._exit(0)
    with open(pids, "a") as fh:
        fh.write(f"{pid}\n")
time.sleep(float(seconds))
"""

FILE_HOLDER = r"""
import mmap, os, sys, time
files, mb_each, how, seconds, pids = sys.argv[1:]
kept = []
for i in range(int(files)):  # memory in files no process needs to map: memfds, written
    fd = os.memfd_create(f"hoard-{i}")
    for _ in range(int(mb_each)):
        os.write(fd, b"x" * (1 << 20))
    if how == "mapped":  # and mapped, every page touched: resident too, which must not count it twice
        view = mmap.mmap(fd, int(mb_each) << 20)
        sum(view[::4096])
        kept.append(view)
    kept.append(fd)
if how == "mapped":  # a child holding the same files and mappings: they still count once
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    with open(pids, "a") as fh:
        fh.write(f"{pid}\n")
time.sleep(float(seconds))
"""


def _watch(tmp_path, processes: int, mb_each: int, seconds: float, *, limit_mb: int, parent_mb: int = 0,
           max_procs: int = 64, how: str | None = None):
    """Run ``HOLDER`` (or, with ``how``, ``FILE_HOLDER``: ``processes`` memfds) below the watch, as the launcher
    does; returns (exit status, seconds, events, its children)."""
    events, pids = tmp_path / watchdog.EVENTS, tmp_path / "pids"
    if how is None:
        argv = [sys.executable, "-c", HOLDER, str(processes), str(mb_each), str(parent_mb), str(seconds), str(pids)]
    else:
        argv = [sys.executable, "-c", FILE_HOLDER, str(processes), str(mb_each), how, str(seconds), str(pids)]
    pid = os.fork()
    if pid == 0:  # the launcher's place: a process of its own, which becomes a subreaper
        code = 1
        try:
            code = watchdog.run(lambda: os.execv(argv[0], argv), memory_bytes=limit_mb << 20, max_procs=max_procs,
                                events=str(events))
        finally:
            os._exit(code)
    start = time.monotonic()
    _, status = os.waitpid(pid, 0)
    children = [int(p) for p in pids.read_text().split()] if pids.exists() else []
    return os.waitstatus_to_exitcode(status), time.monotonic() - start, watchdog.read_events(str(events)), children


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_processes_that_together_pass_the_memory_limit_are_all_stopped_and_it_is_noted(tmp_path):
    code, seconds, events, children = _watch(tmp_path, 4, 100, 20, limit_mb=300)
    assert events == {watchdog.MEMORY}
    assert code == 128 + 9 and seconds < 10, (code, seconds)  # killed, long before the 20 s it meant to hold
    assert len(children) == 4 and not any(map(_running, children))


def test_memory_shared_after_fork_counts_once(tmp_path):
    # 13 processes sharing 100 MB: 1.3 GB by the sum of their resident memory, about 120 MB in fact
    code, _, events, _ = _watch(tmp_path, 12, 1, 1, limit_mb=300, parent_mb=100)
    assert (code, events) == (0, set())


def test_memory_held_in_files_no_process_maps_counts_and_is_stopped(tmp_path):
    # 400 MB in memfds, written and never mapped: no process's resident memory shows a byte of it
    code, seconds, events, _ = _watch(tmp_path, 4, 100, 20, limit_mb=300, how="unmapped")
    assert events == {watchdog.MEMORY}
    assert code == 128 + 9 and seconds < 10, (code, seconds)


def test_a_file_in_memory_held_and_mapped_by_two_processes_counts_once(tmp_path):
    # 200 MB in a memfd, mapped and resident, held by two processes: 400 MB or more if a page counted twice
    code, _, events, children = _watch(tmp_path, 1, 200, 1, limit_mb=300, how="mapped")
    assert (code, events) == (0, set())
    assert len(children) == 1


def test_the_files_held_are_counted_each_once_and_only_those_in_memory(tmp_path):
    fd = os.memfd_create("counted")
    os.write(fd, b"x" * (3 << 20))
    twice = os.dup(fd)
    on_disk = open(__file__, "rb")  # a file on disk is not memory
    try:
        files = watchdog.held([os.getpid(), os.getpid()])
        st = os.fstat(fd)
        assert files == {(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino): 3 << 20}
        view = __import__("mmap").mmap(fd, 3 << 20)
        sum(view[::4096])
        left_out = watchdog.proportional([os.getpid()]) - watchdog.proportional([os.getpid()], files)
        assert abs(left_out - (3 << 20)) < 1 << 20, left_out  # its mapped pages, left to ``held`` (this process
        # allocates a little between the two readings)
        view.close()
    finally:
        on_disk.close()
        os.close(twice)
        os.close(fd)


def test_reaching_the_process_limit_is_noted_without_stopping_anyone(tmp_path):
    code, _, events, _ = _watch(tmp_path, 6, 1, 1, limit_mb=1000, max_procs=5)
    assert (code, events) == (0, {watchdog.PROCESSES})


def test_a_refusal_the_kernel_tells_is_noted_however_short(tmp_path):
    # the kernel writes on the pipe and ends at once: no look of the watch could have seen it at its limit
    events, (heard, told) = tmp_path / watchdog.EVENTS, os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = watchdog.run(lambda: os.write(told, watchdog.PROCESSES.encode() + b"\n") and os._exit(0),
                                memory_bytes=1 << 30, max_procs=64, events=str(events), refusals=heard)
        finally:
            os._exit(code)
    os.close(heard)
    os.close(told)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert watchdog.read_events(str(events)) == {watchdog.PROCESSES}


def _in_child(body) -> int:
    """``body()`` in a forked child; its exit status (0: it returned)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            body()
            code = 0
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_kernels_claim_different_cpus_while_there_are_free_ones_and_a_released_one_is_claimed_again():
    cpus = sorted(os.sched_getaffinity(0))
    claims = [one_cpu.claim(uid=10**6 + os.getpid()) for _ in cpus]  # a uid of this test's own: no grader's claims
    try:
        assert sorted(cpu for cpu, _ in claims) == cpus and all(sock is not None for _, sock in claims)
        extra, sock = one_cpu.claim(uid=10**6 + os.getpid())
        assert sock is None and extra in cpus  # every CPU held: one of them all the same
        claims[0][1].close()
        assert one_cpu.claim(uid=10**6 + os.getpid())[0] == claims[0][0]
    finally:
        for _, sock in claims:
            sock.close()


@pytest.mark.skipif(not one_cpu.can_hold(), reason="no system-call filter for this architecture")
def test_a_held_process_and_all_it_starts_run_on_one_cpu_they_cannot_change():
    cpu = max(os.sched_getaffinity(0))

    def held():
        one_cpu.hold(cpu)
        for attempt in (lambda: os.sched_setaffinity(0, os.sched_getaffinity(1) | {cpu}),
                        lambda: os.sched_setaffinity(0, {0})):
            with pytest.raises(PermissionError):
                attempt()
        assert os.sched_getaffinity(0) == {cpu}
        assert _in_child(lambda: os.sched_setaffinity(0, {0})) != 0  # a child cannot either
        assert _in_child(lambda: os.sched_getaffinity(0) == {cpu} or os._exit(3)) == 0
        os.getpid(), os.listdir("/")  # everything else is allowed

    assert _in_child(held) == 0
    assert _in_child(lambda: os.sched_setaffinity(0, {0})) == 0  # this process is untouched


@pytest.mark.skipif(not syscall_filter.available(), reason="no system-call filter for this architecture")
def test_the_filter_refuses_a_kernel_other_processes_and_the_keyrings_and_nothing_else():
    import ctypes
    import platform

    numbers = syscall_filter._ARCHES[platform.machine()][2]
    parent = os.getpid()

    def filtered():
        syscall_filter.install()  # root's kernels: no CPU of their own to hold, so sched_setaffinity stays
        libc = ctypes.CDLL(None, use_errno=True)
        for name, args in (("ptrace", (16, parent, 0, 0)), ("process_vm_readv", (parent, 0, 0, 0, 0, 0)),
                           ("keyctl", (0, -4, 1)), ("add_key", (b"user", b"k", b"v", 1, -2)),
                           ("request_key", (b"user", b"k", None, 0)), ("pidfd_getfd", (0, 0, 0))):
            assert libc.syscall(numbers[name], *[ctypes.c_long(a) if isinstance(a, int) else a for a in args]) == -1
            assert ctypes.get_errno() == 1, name  # EPERM: refused, not merely failed
        os.sched_setaffinity(0, os.sched_getaffinity(0))
        assert _in_child(lambda: os.sched_getaffinity(0)) == 0 and os.listdir("/")  # everything else is allowed
        assert _in_child(lambda: libc.syscall(numbers["keyctl"], 0, -4, 1) == -1 or os._exit(3)) == 0  # inherited

    assert _in_child(filtered) == 0


def test_a_process_the_kernel_left_behind_is_killed_when_the_kernel_ends(tmp_path):
    code, seconds, events, children = _watch(tmp_path, 1, 1, 0, limit_mb=1000)  # the child would sleep 30 s on
    assert (code, events) == (0, set()) and seconds < 10
    assert len(children) == 1 and not _running(children[0])


MANAGER = "user.slice/user-1000.slice/user@1000.service"  # what systemd delegates to user 1000
USER = 1000 if os.getuid() == 0 else os.getuid()  # the ordinary user the made-up tree belongs to


def _tree(root, own: str, monkeypatch, *, owned_from: str) -> None:
    """A made-up cgroup v2 tree at ``root`` holding this process's group ``own``; ``owned_from`` and everything
    below it belong to ``USER`` (as root: the rest stays root's)."""
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / own).mkdir(parents=True)
    for group in [root / own, *(root / own).parents]:
        if root in group.parents:
            for name in ("cgroup.subtree_control", "cgroup.procs"):
                (group / name).write_text("")
            if os.getuid() == 0 and (group == root / owned_from or root / owned_from in group.parents):
                for path in (group, group / "cgroup.subtree_control", group / "cgroup.procs"):
                    os.chown(path, USER, USER)
    monkeypatch.setattr(cgroups, "FS", root)
    monkeypatch.setattr(cgroups, "_own_path", lambda controller: "/" + own)
    monkeypatch.setattr(os, "geteuid", lambda: USER)


def test_the_kernels_group_is_made_in_the_subtree_systemd_delegated_to_the_user(tmp_path, monkeypatch):
    _tree(tmp_path, f"{MANAGER}/app.slice/grading.scope", monkeypatch, owned_from=MANAGER)
    base = tmp_path / MANAGER / "app.slice"  # the nearest group above the grader's own (which holds processes)
    assert cgroups.delegated(f"/{MANAGER}/app.slice/grading.scope", USER) == base
    assert cgroups.group_dirs("mha-kernel-x") == [base / cgroups.PARENT / "mha-kernel-x"]
    cgroups.create("mha-kernel-x", memory_bytes=1 << 30, pids=64, cpus=1.0)
    cgroups.join("mha-kernel-x", 4242)
    assert (base / cgroups.PARENT / "mha-kernel-x" / "cgroup.procs").read_text() == "4242\n"
    assert (base / "cgroup.subtree_control").read_text() == "+memory +pids +cpu\n"


def test_a_group_of_another_user_is_not_taken(tmp_path, monkeypatch):
    _tree(tmp_path, f"{MANAGER}/app.slice/grading.scope", monkeypatch, owned_from=MANAGER)
    assert cgroups.delegated(f"/{MANAGER}/app.slice/grading.scope", USER + 1) is None


def test_a_login_sessions_scope_is_not_delegated(tmp_path, monkeypatch):
    if os.getuid() != 0:
        import pytest

        pytest.skip("a tree of two owners needs root")
    _tree(tmp_path, "user.slice/user-1000.slice/session-3.scope", monkeypatch,
          owned_from="user.slice/user-1000.slice/session-3.scope")  # its slice is root's, as systemd leaves it
    assert cgroups.group_dirs("mha-kernel-x") == []
    assert not cgroups.available()


def test_the_watch_reads_what_the_kernel_told_it_even_when_it_saw_the_limit_itself(tmp_path):
    # The kernel tells of its refusal while the watch sees it at its limit: what it told must be read all the same,
    # or the pipe stays readable and every wait between looks returns at once (a watch that spins on a core).
    events, (heard, told) = tmp_path / watchdog.EVENTS, os.pipe()
    os.write(told, watchdog.PROCESSES.encode() + b"\n")
    looks = tmp_path / "looks"
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = watchdog.run(lambda: time.sleep(1.5) or os._exit(0), memory_bytes=1 << 30, max_procs=1,
                                events=str(events), refusals=heard)
            looks.write_text(str(os.times().user + os.times().system))
        finally:
            os._exit(code)
    os.close(heard)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert watchdog.read_events(str(events)) == {watchdog.PROCESSES}
    assert float(looks.read_text()) < 0.75, "the watch spun while the kernel ran for 1.5 s"  # about 0.05 s of CPU


def test_only_private_folders_of_graders_that_are_gone_are_stale(tmp_path, monkeypatch):
    # Root's grader clears what killed graders left; the folder of a grader still running, an ordinary user's beside
    # it or another of its own, is that grader's kernel at work and must stay (its watch writes its flags there).
    import tempfile

    from autograder.kernel import leftovers

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = os.fork()
    if gone == 0:
        os._exit(0)
    os.waitpid(gone, 0)
    running = os.getppid()  # another process that runs, as another user's grader would
    folders = {name: tmp_path / f"mha-kernel-{pid}-abc_123" for name, pid in
               (("gone", gone), ("running", running), ("mine", os.getpid()))}
    for folder in folders.values():
        (folder / "channel").mkdir(parents=True)
    (tmp_path / "mha-kernel-oldstyle").mkdir()  # a name without a grader's pid: never taken for stale
    assert leftovers.stale_private_folders() == [str(folders["gone"])]
    assert leftovers.private_folder_prefix() == f"mha-kernel-{os.getpid()}-"

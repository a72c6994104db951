"""Grading as an ordinary user: the same bounds on every kernel without root.

Root makes a user (``useradd -m``); as that user, a venv from the system's Python in a folder the user owns, a
copy of the course in its home, and the grading command (``python -m autograder.grade``, what ``make grade`` runs)
on a class of lesson 01, graded by two workers at once: an honest student, and honest answers paired with

* a fork bomb: a kernel that forks until it is refused (or has 300 processes: a bound of its own, so that a grader
  without one cannot bring the machine down), holding what it got for a while, during which a *witness* notebook,
  graded by the other worker at the same time and by the same user, forks 20 processes;
* a memory bomb: 8 processes of 400 MB each, every one inside its own address-space limit, 3.2 GB together;
* a tmpfs filler: 8 MB files into every place of the file system it can write, up to 256 MB each;
* a burst of threads, let go as soon as one is refused (too short for the watch's looks to see);
* a spinner: 12 processes, each in a session of its own and asking for every CPU, busy for 3 s;
* a System V shared-memory hoarder: 2.5 GB in segments made, filled and detached;
* an escape through bubblewrap's pid 1, which has the kernel's uid: ptrace attached to every process it can see
  that is not its own (pid 1 first), their memory written, keys added to the keyrings, then 100 processes forked,
  all spinning;
* a memfd hoarder: 2.5 GB in memfds, written and never mapped (no process's resident memory shows it), held.

The honest students keep full marks; the bombs are stopped and flagged (the burst and the memfd hoarder too), the
filler writes no more than the kernel's tmpfs holds and nowhere else, the spinner gets one CPU, no segment outlives
its last mapping, the escape reaches no other process and finds pid 1 under the kernel's own bounds, the run ends well within its time limits, and nothing of the user's is left running after it.
"""

from __future__ import annotations

import csv
import os
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest
from grading_helpers import with_cell
from ordinary_user import account, chown, copy_course, run_as, venv
from run_once import once

from autograder.course import answers, notebooks
from autograder.grading.records.settings import Settings
from autograder.kernel import sandbox, uids

LESSON = "01_warmup"
USER = "mha-grader"
TMP_MB = 64  # the launcher's default tmpfs
TIMEOUT, NOTEBOOK_TIMEOUT = 30, 120
pytestmark = [pytest.mark.grading, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="making an ordinary user needs root")]

FORK_BOMB = r"""
import os, time
held = 0
while held < 300:  # a bound of its own, for a grader that has none
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.execv("/bin/sleep", ["sleep", "600"])  # small processes: the process limit stops them, not the memory limit
    held += 1
print("HOLDING", held, time.time())
time.sleep(12)
print("RELEASED", held, time.time())
"""

WITNESS = r"""
import os, resource, time
print("LIMITS", *(resource.getrlimit(getattr(resource, f"RLIMIT_{name}"))[0] for name in ("AS", "FSIZE", "CPU", "NPROC")))
time.sleep(6)  # into the time the fork bomb holds its processes
started, forked = time.time(), 0
for _ in range(20):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    forked += 1
print("WITNESS", forked, started)
"""

MEMORY_BOMB = r"""
import os, time
for _ in range(8):
    if os.fork() == 0:
        hoard = b"x" * (400 << 20)
        time.sleep(60)
        os._exit(0)
time.sleep(30)
print("MEMORY_BOMB survived")
"""

TMPFS_FILLER = r"""
import os
written = {}
places = ("/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~"), "/", "/dev", "/etc", "/home", "/opt", "/var")
for n, place in enumerate(places):
    written[place] = 0
    for i in range(32):
        try:
            with open(os.path.join(place, f"fill-{n}-{i}"), "wb") as fh:
                fh.write(b"\0" * (8 << 20))
            written[place] += 8
        except OSError:
            break
print("FILLED", sum(written.values()), " ".join(f"{p}={mb}" for p, mb in written.items()))
"""


THREAD_BURST = r"""
import threading
go, started = threading.Event(), []
while len(started) < 300:  # threads until one is refused, all let go at once: between two looks of a watch
    thread = threading.Thread(target=go.wait)
    try:
        thread.start()
    except RuntimeError:
        break
    started.append(thread)
go.set()
for thread in started:
    thread.join()
print("THREADS", len(started))
"""

SPINNER = r"""
import os, time
cpus, widened = len(os.sched_getaffinity(0)), "widened"
try:
    os.sched_setaffinity(0, range(os.cpu_count()))
except OSError:
    widened = "refused"
start, before = time.time(), os.times()
spinners = []
for _ in range(12):  # each in a session of its own, each trying to run on every CPU
    pid = os.fork()
    if pid == 0:
        os.setsid()
        try:
            os.sched_setaffinity(0, range(os.cpu_count()))
        except OSError:
            pass
        end = time.time() + 3
        while time.time() < end:
            pass
        os._exit(0)
    spinners.append(pid)
for pid in spinners:
    os.waitpid(pid, 0)
after = os.times()
print("CPUS", cpus, widened, (after.children_user + after.children_system - before.children_user
                             - before.children_system) / (time.time() - start))
"""

SHM_HOARDER = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
size, made = 320 << 20, []
for _ in range(8):  # 2.5 GB in segments made, filled and detached: mapped by no process
    segment = libc.shmget(0, size, 0o1600)
    if segment >= 0:
        address = libc.shmat(segment, None, 0)
        ctypes.memset(address, 1, size)
        libc.shmdt(ctypes.c_void_p(address))
        made.append(segment)
stat = ctypes.create_string_buffer(512)
print("SHM_HELD_MB", sum(size >> 20 for segment in made if libc.shmctl(segment, 2, stat) == 0), len(made))
"""

ESCAPE = r"""
import ctypes, os, platform, time
libc = ctypes.CDLL(None, use_errno=True)
PTRACE, VM_WRITEV, ADD_KEY = {"x86_64": (101, 311, 248), "aarch64": (117, 271, 217)}[platform.machine()]
mine, traced, written = os.getpid(), [], []
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != mine):  # pid 1 first
    if libc.syscall(PTRACE, ctypes.c_long(16), ctypes.c_long(pid), None, None) == 0:  # PTRACE_ATTACH
        traced.append(pid)
        os.waitpid(pid, 0x40000000)  # __WALL: until it stops, then let it go
        libc.syscall(PTRACE, ctypes.c_long(17), ctypes.c_long(pid), None, None)
    word = ctypes.c_long(0)
    local = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.pointer(word), ctypes.c_void_p), ctypes.c_void_p(8))
    if libc.syscall(VM_WRITEV, ctypes.c_long(pid), local, ctypes.c_ulong(1), local, ctypes.c_ulong(1),
                    ctypes.c_ulong(0)) >= 0 or ctypes.get_errno() not in (1, 3):  # allowed (EFAULT: an address
        written.append(pid)                                         # of its own), not refused (EPERM) or gone
keys = sum(libc.syscall(ADD_KEY, b"user", f"mha-{i}".encode(), b"secret", ctypes.c_size_t(6),
                        ctypes.c_int(-3)) > 0 for i in range(20))  # into the session keyring: the grader's
status = dict(line.split(":", 1) for line in open("/proc/1/status").read().splitlines())
nproc = next(line.split()[2] for line in open("/proc/1/limits") if line.startswith("Max processes"))
start, before, forks = time.time(), os.times(), 0
go = start + 2  # all forked before any spins
for _ in range(100):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        while time.time() < go:
            time.sleep(0.05)
        while time.time() < go + 2:
            pass
        os._exit(0)
    forks += 1
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
after = os.times()
cpu = (after.children_user + after.children_system - before.children_user - before.children_system) / (time.time() - start)
print("ESCAPE", len(traced), len(written), keys, status["Seccomp"].strip(), status["Cpus_allowed_list"].strip(),
      ",".join(map(str, sorted(os.sched_getaffinity(0)))), nproc, forks, round(cpu, 2))
"""

MEMFD_HOARDER = r"""
import os, time
held = []
for i in range(40):  # 2.5 GB in memfds of 64 MB (the largest file a kernel may write), written, never mapped
    fd = os.memfd_create(f"hoard-{i}")
    for _ in range(64):
        os.write(fd, b"\1" * (1 << 20))
    held.append(fd)
print("MEMFD_HELD_MB", 64 * len(held))
time.sleep(20)
print("MEMFD survived")
"""


def _class(klass: Path) -> list:
    nbs = {"a_fork_bomb": with_cell(answers.fill(LESSON), "softmax", FORK_BOMB),
           "b_witness": with_cell(answers.fill(LESSON), "softmax", WITNESS),  # graded beside the fork bomb
           "c_honest": answers.fill(LESSON),
           "d_memory_bomb": with_cell(answers.fill(LESSON), "softmax", MEMORY_BOMB),
           "e_tmpfs_filler": with_cell(answers.fill(LESSON), "softmax", TMPFS_FILLER),
           "f_thread_burst": with_cell(answers.fill(LESSON), "softmax", THREAD_BURST),
           "g_spinner": with_cell(answers.fill(LESSON), "softmax", SPINNER),
           "h_shm_hoarder": with_cell(answers.fill(LESSON), "softmax", SHM_HOARDER),
           "i_escape": with_cell(answers.fill(LESSON), "softmax", ESCAPE),
           "j_memfd_hoarder": with_cell(answers.fill(LESSON), "softmax", MEMFD_HOARDER)}
    for student, nb in nbs.items():
        notebooks.write_notebook(nb, klass / student / f"{LESSON}.ipynb")
    return sorted(nbs)


def _grade_as_user(base: Path) -> dict:
    user = account(USER)
    work = Path(user.pw_dir) / "mha-test"  # a folder of the user's, where root's test folders are out of reach
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    chown(user, work)
    start = time.monotonic()
    python = venv(user, work / "venv") / "bin" / "python"
    course = copy_course(user, work / "course")
    students = _class(work / "class")
    chown(user, work / "class")
    prepared = time.monotonic() - start
    env = {"HOME": user.pw_dir, "USER": USER, "LOGNAME": USER, "LANG": "C.UTF-8", "PYTHONPATH": str(course),
           "PATH": f"{python.parent}:/usr/bin:/bin"}
    start = time.monotonic()
    proc = run_as(user, [str(python), "-m", "autograder.grade", str(work / "class"), "--out", str(work / "out"),
                         "--lessons", "01", "--workers", "2", "--timeout", str(TIMEOUT), "--notebook-timeout",
                         str(NOTEBOOK_TIMEOUT), "--quiet"], cwd=course, env=env, timeout=600)
    seconds = time.monotonic() - start
    for _ in range(50):  # the command has ended: give its last processes a moment to be reaped
        left = uids.processes_of(user.pw_uid)
        if not left:
            break
        time.sleep(0.1)
    result = {"returncode": proc.returncode, "output": proc.stdout[-3000:] + proc.stderr[-3000:], "left": left,
              "seconds": seconds, "prepared": prepared, "rows": {}, "said": {}}
    if proc.returncode == 0:
        with (work / "out" / "grades.csv").open() as fh:
            result["rows"] = {r["student"]: r for r in csv.DictReader(fh)}
        for student in students:
            nb = nbformat.read(work / "out" / "course" / "autograded" / student / LESSON / f"{LESSON}.ipynb",
                               as_version=4)
            result["said"][student] = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
                                              if o.get("output_type") == "stream")
    shutil.rmtree(work, ignore_errors=True)
    return result


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    result = once(tmp_path_factory, "non-root", _grade_as_user)
    print(f"\nnon-root class: prepared in {result['prepared']:.1f} s, graded in {result['seconds']:.1f} s",
          file=sys.stderr)
    assert result["returncode"] == 0, result["output"]
    return result


def _said(graded, student, key) -> list:
    for line in graded["said"][student].splitlines():
        if line.startswith(key + " "):
            return line.split()[1:]
    return []


def test_the_honest_students_get_full_marks(graded):
    full = graded["rows"]["c_honest"][f"{LESSON} max"]
    assert graded["rows"]["c_honest"][f"{LESSON} score"] == full
    assert graded["rows"]["c_honest"]["flags"] == ""
    assert graded["rows"]["b_witness"][f"{LESSON} score"] == full


def test_each_process_of_the_kernel_has_the_limits_that_root_gives_it(graded):
    said = [int(n) for n in _said(graded, "b_witness", "LIMITS")]
    mb = Settings(out="", lessons=[]).memory_mb  # the grading command's default, which the test keeps
    assert said == [mb << 20, sandbox.MAX_FILE_MB << 20, sandbox.CPU_SECONDS, sandbox.MAX_PROCS], said


def test_the_report_names_the_bounds_of_an_ordinary_user(graded):
    said = " ".join(graded["output"].split())
    assert "user namespace of its own" in said and f"at most {sandbox.MAX_PROCS} processes" in said
    assert "no control group" in said  # this machine delegates none (no systemd): the report must not claim one


def test_a_fork_bomb_is_stopped_at_the_process_limit(graded):
    holding, row = _said(graded, "a_fork_bomb", "HOLDING"), graded["rows"]["a_fork_bomb"]
    assert holding, graded["said"]["a_fork_bomb"]
    assert int(holding[0]) <= sandbox.MAX_PROCS, holding
    assert "process limit" in row["flags"], row
    assert row["01_warmup status"] == "graded", row


def test_a_burst_of_threads_let_go_at_once_is_flagged_at_the_process_limit(graded):
    threads, row = _said(graded, "f_thread_burst", "THREADS"), graded["rows"]["f_thread_burst"]
    assert threads and int(threads[0]) < sandbox.MAX_PROCS, graded["said"]["f_thread_burst"]
    assert "process limit" in row["flags"], row  # the kernel's refusal itself, however short the burst


def test_a_notebook_spinning_on_every_core_gets_one_cpu(graded):
    cpus = _said(graded, "g_spinner", "CPUS")
    assert cpus, graded["said"]["g_spinner"]
    assert cpus[:2] == ["1", "refused"], cpus  # one CPU, which the kernel cannot change
    assert float(cpus[2]) <= 1.1, cpus  # 12 processes busy for 3 s used one CPU between them (clock ticks of slack)


def test_shared_memory_no_process_maps_is_not_kept(graded):
    held = _said(graded, "h_shm_hoarder", "SHM_HELD_MB")
    assert held and int(held[1]) > 0, graded["said"]["h_shm_hoarder"]  # segments were made
    assert int(held[0]) == 0, held  # each was removed when its last process detached it


def test_an_escape_through_bubblewraps_pid_1_reaches_no_process_and_finds_it_bounded_as_the_kernel(graded):
    said, row = _said(graded, "i_escape", "ESCAPE"), graded["rows"]["i_escape"]
    assert said, graded["said"]["i_escape"]
    traced, written, keys, seccomp, pid1_cpus, cpus, nproc, forks, cpu = said
    assert (traced, written, keys) == ("0", "0", "0"), said  # no ptrace, no other process's memory, no key
    assert seccomp == "2" and pid1_cpus == cpus and "," not in cpus, said  # pid 1: the filter and the one CPU
    assert int(nproc) <= sandbox.MAX_PROCS + 2, said  # and the process limit, were it ever made to fork
    assert int(forks) < sandbox.MAX_PROCS and float(cpu) <= 1.1, said
    assert "process limit" in row["flags"], row
    assert row[f"{LESSON} score"] == row[f"{LESSON} max"], row  # its honest work, as it earns


def test_memory_held_in_memfds_no_process_maps_is_stopped(graded):
    assert "MEMFD survived" not in graded["said"]["j_memfd_hoarder"], graded["said"]["j_memfd_hoarder"]
    row = graded["rows"]["j_memfd_hoarder"]
    assert "memory limit" in row["flags"], row
    assert row["01_warmup status"] == "graded", row


def test_a_fork_bomb_does_not_stop_another_kernel_of_the_same_user_from_forking(graded):
    holding, released = _said(graded, "a_fork_bomb", "HOLDING"), _said(graded, "a_fork_bomb", "RELEASED")
    witness = _said(graded, "b_witness", "WITNESS")
    assert witness and holding and released, (graded["said"]["b_witness"], graded["said"]["a_fork_bomb"])
    assert float(holding[1]) <= float(witness[1]) <= float(released[1]), "the witness did not run beside the bomb"
    assert int(witness[0]) == 20


def test_a_memory_bomb_of_many_processes_is_stopped(graded):
    assert "MEMORY_BOMB survived" not in graded["said"]["d_memory_bomb"]
    flags = graded["rows"]["d_memory_bomb"]["flags"]
    assert "memory limit" in flags, flags


def test_a_tmpfs_filler_writes_no_more_than_the_kernels_tmpfs_and_nowhere_else(graded):
    filled = _said(graded, "e_tmpfs_filler", "FILLED")
    assert filled, graded["said"]["e_tmpfs_filler"]
    assert int(filled[0]) <= TMP_MB, filled
    places = dict(item.split("=") for item in filled[1:])
    assert {p for p, mb in places.items() if int(mb)} <= {"/tmp", "/var/tmp", "/dev/shm", sandbox.HOME}, places


def test_the_run_ends_within_its_time_limits_and_nothing_of_the_user_is_left_running(graded):
    assert graded["seconds"] < NOTEBOOK_TIMEOUT * 3, graded["seconds"]  # 10 notebooks on 2 workers, and the canary
    assert not any("time limit" in row["flags"] for row in graded["rows"].values()), graded["rows"]
    assert graded["left"] == [], graded["left"]

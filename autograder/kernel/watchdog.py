"""The launcher's watch over one kernel that no control group bounds (grading as an ordinary user).

Without root, each process of a kernel is bounded by its own limits (address space, file size, CPU time, and the
process count of the kernel's own user namespace: ``autograder/kernel/launcher.py``), but nothing bounds their sum:
64 processes of 2 GB each would fit. So the launcher starts the kernel (bubblewrap, or the kernel itself at
isolation ``none``) as its child, becomes a child subreaper (a process that leaves its parent is adopted by the
launcher, never by the machine's init, and stays watched), and every ``INTERVAL`` seconds measures the memory
of every process below it, each page once (``Pss``, read only when the cheap sum of resident memory, which counts
a page shared after ``fork`` in every process, is past the limit), and the memory of every file in memory (a
``memfd``, a file of a tmpfs, deleted or not) that they hold open, each file once, whether or not it is mapped:
such a file's pages need not be mapped by anyone, and then no process's resident memory shows them (``held``;
the pages of such a file that are also mapped are then left out of ``Pss``, so no page counts twice). Past the
limit it kills them all and writes
``MEMORY`` to the events file; when their tasks (threads count, as they do for ``RLIMIT_NPROC``) reach the process
limit, or the kernel says on its pipe that a process or thread was refused it (``sandbox.refusals_line``; the watch
waits on that pipe between looks, so the refusal is noted however short the burst), it writes ``PROCESSES``. The
events file lies in the kernel's private folder, outside what the kernel can see; the grader (``SafeExecute``)
reads it when the notebook is done.

Between two looks, processes may hold more than the limit for up to ``INTERVAL`` seconds (each of them is still
bounded by its address-space limit); a file of the kernel's tmpfs no process holds open is not counted here (the
tmpfs has a size of its own), and neither is what the kernel holds for them (page tables, sockets, nor a file
whose only reference is in flight on a socket).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import stat
import time

EVENTS = "limits"  # the events file, in the kernel's private folder
MEMORY, PROCESSES = "memory", "processes"
INTERVAL = 0.1
_PR_SET_CHILD_SUBREAPER = 36
_PAGE = os.sysconf("SC_PAGE_SIZE")
_IN_MEMORY = {0x01021994, 0x958458F6}  # statfs's f_type of tmpfs (memfds and /dev/shm too) and of hugetlbfs


def descendants(pid: int) -> list:
    """Every process below ``pid`` (children of every thread, recursively), as this process sees them."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", encoding="ascii") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def usage(pids) -> tuple:
    """(resident bytes, tasks) of ``pids`` together, a page mapped by several of them counted in each (cheap);
    a process that is gone counts nothing."""
    resident = tasks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
                resident += int(fh.read().split()[1]) * _PAGE
            tasks += len(os.listdir(f"/proc/{pid}/task"))
        except (OSError, IndexError, ValueError):
            continue
    return resident, tasks


def held(pids, kinds: dict | None = None) -> dict:
    """{(device major, minor, inode): bytes} of the files in memory that ``pids`` hold open, each file once (a
    ``memfd``, a file of a tmpfs, deleted or not: their pages are memory whether or not a process maps them).
    ``kinds``: {device: in memory} learnt so far, kept by the caller (one ``statfs`` per file system)."""
    kinds = {} if kinds is None else kinds
    found = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            link = f"/proc/{pid}/fd/{fd}"
            try:
                st = os.stat(link)  # the file itself: never opened (a FIFO would block), only looked at
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if st.st_dev not in kinds:
                kinds[st.st_dev] = _file_system(link) in _IN_MEMORY
            if kinds[st.st_dev]:
                found[(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)] = st.st_blocks * 512
    return found


def _file_system(path: str) -> int:
    """statfs's f_type (the file system's magic number) of ``path``; 0 when it cannot be read."""
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type, a long, comes first
    if _libc().statfs(path.encode(), buf) != 0:
        return 0
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def proportional(pids, files=frozenset()) -> int:
    """The bytes ``pids`` hold together, a page shared by n of them counted 1/n in each (``Pss``: exact, and about
    0.4 ms a process to read), but for the pages they map of ``files`` ((major, minor, inode) as ``held`` names
    them), which ``held`` counts. One reading of each process: a mapping that goes while it is read goes from both
    sums, so no page counts twice."""
    total = 0
    for pid in pids:
        try:
            if not files:
                with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as fh:
                    total += next(int(line.split()[1]) for line in fh if line.startswith("Pss:")) << 10
                continue
            with open(f"/proc/{pid}/smaps", encoding="utf-8", errors="replace") as fh:
                counted, own = True, 0
                for line in fh:
                    head = line.split(None, 5)
                    if len(head) >= 5 and "-" in head[0] and ":" in head[3]:  # a mapping's first line
                        major, minor = (int(n, 16) for n in head[3].split(":"))
                        counted = (major, minor, int(head[4])) not in files
                    elif counted and line.startswith("Pss:"):
                        own += int(line.split()[1]) << 10
            total += own
        except (OSError, StopIteration, ValueError):
            continue
    return total


_LIBC: list = []


def _libc():
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def _note(events: str, event: str) -> None:
    try:
        with open(events, "a", encoding="ascii") as fh:
            fh.write(event + "\n")
    except FileNotFoundError:  # the grader has read the events and removed the private folder: the kernel is done
        pass


class _Below:
    """The processes below this one: reaps those that end (keeping their statuses) and kills them all."""

    def __init__(self):
        self.me, self.ended = os.getpid(), {}

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.ended[pid] = status

    def kill(self) -> None:
        for _ in range(100):
            self.reap()
            left = descendants(self.me)
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)


def run(start, *, memory_bytes: int, max_procs: int, events: str, refusals: int | None = None) -> int:
    """Run ``start()`` (which execs the kernel) in a child and watch everything below this process until that
    child ends; then kill what is left below and return the child's exit status. ``refusals``: the read end of a
    pipe on which the kernel writes ``PROCESSES`` when a process or thread is refused it (``sandbox.refusals_line``);
    what it says is noted as it is."""
    ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    child = os.fork()
    if child == 0:
        try:
            start()
        finally:
            os._exit(127)
    if refusals is not None:
        os.set_blocking(refusals, False)
    below, noted, told = _Below(), set(), _Told(refusals)
    kinds: dict = {}

    def note(event):
        if event not in noted:
            noted.add(event)
            _note(events, event)

    while True:
        below.reap()
        if child in below.ended:
            break
        looked = time.monotonic()
        pids = descendants(below.me)
        resident, tasks = usage(pids)
        files = held(pids, kinds)
        in_files = sum(files.values())
        over = (resident + in_files > memory_bytes  # cheap, and never less than the exact sum below
                and proportional(pids, files) + in_files > memory_bytes)
        refused = PROCESSES.encode() in told.said().split()  # read at every look: unread, it would wake the watch
        if refused or tasks >= max_procs:
            note(PROCESSES)
        if over:
            note(MEMORY)
            below.kill()
        near = tasks >= max_procs // 2 or resident + in_files > memory_bytes // 2  # a limit may be reached soon: look often
        told.wait(INTERVAL if near else max(INTERVAL, 10 * (time.monotonic() - looked)))  # else a tenth of a core
    if PROCESSES.encode() in told.said().split():  # what the kernel wrote just before it ended
        note(PROCESSES)
    below.kill()  # what the kernel left (at isolation ``none``; bubblewrap's namespace ended with it)
    status = os.waitstatus_to_exitcode(below.ended[child])
    return status if status >= 0 else 128 - status


class _Told:
    """The pipe on which the kernel tells the watch of a refusal (None: no pipe). The watch waits on it between two
    looks, so a refusal is noted the moment it is written; the first thing written ends the pipe's use (whatever
    else the kernel writes cannot keep the watch busy)."""

    def __init__(self, fd):
        self.fd = fd

    def wait(self, seconds: float) -> None:
        if self.fd is None:
            time.sleep(seconds)
        else:
            select.select([self.fd], [], [], seconds)

    def said(self) -> bytes:
        """What is waiting on the pipe (b"" when nothing); the pipe is closed once it said anything."""
        if self.fd is None:
            return b""
        try:
            said = os.read(self.fd, 4096)
        except BlockingIOError:
            return b""
        os.close(self.fd)
        self.fd = None
        return said


def read_events(events: str) -> set:
    """The events the watch wrote (none when it wrote nothing)."""
    try:
        with open(events, encoding="ascii") as fh:
            return set(fh.read().split())
    except OSError:
        return set()

"""The grading sandbox's building blocks: bubblewrap's file system, per-process limits, the kernelspec.

A graded kernel starts through ``autograder/kernel/launcher.py`` (the kernelspec ``autograder-sandbox``, written by
``install_kernelspec``, runs ``python -m autograder.kernel.launcher``); how much it can isolate depends on who runs
the grader (``isolation_level``). The launcher's docstring tells the steps; this module holds what the launcher and
the warm kernel server (``warm_kernels.py``) build them from. Everything here runs from the kernel library too, so
it imports nothing but the standard library.
"""


from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

KERNEL_NAME = "autograder-sandbox"
KERNEL_LIBRARY = "/opt/mha-course"  # where the kernel library is bound inside the sandbox
HOME = "/home/learner"
_KEEP_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "NBGRADER_EXECUTION", "PYTHONHASHSEED",
             "PYDEVD_DISABLE_FILE_VALIDATION", "MHA_HIDDEN_TESTS", "MHA_SHORT_TRAINING")
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "passwd", "group", "fonts",
        "alternatives", "mime.types", "matplotlibrc")
_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
_CLONE = {"ns": 0x00020000, "cgroup": 0x02000000, "uts": 0x04000000, "ipc": 0x08000000, "user": 0x10000000,
          "pid": 0x20000000, "net": 0x40000000}
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 16384, 1 << 18
TMP_INODES = 20_000
MAX_PROCS = 64  # processes and threads of one kernel
KERNEL_CPUS = 1.0  # the CPU share of one kernel
TMP_MB, MAX_FILE_MB, CPU_SECONDS = 64, 64, 3600  # its tmpfs, its largest file, CPU time per process


def isolation_level() -> str:
    """``uid`` as root with bubblewrap, ``userns`` where unprivileged bubblewrap works, else ``none``."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "none"
    if os.geteuid() == 0:
        return "uid"
    probe = subprocess.run([bwrap, "--unshare-all", "--ro-bind", "/", "/", "true"], capture_output=True)
    return "userns" if probe.returncode == 0 else "none"


def install_kernelspec(jupyter_dir, *, memory_mb: int, max_output: int = 1_000_000, library,
                       isolation: str) -> Path:
    """Write ``<jupyter_dir>/kernels/autograder-sandbox/kernel.json``.

    ``library``: the folder of modules kernels may import (the grader copies them there, world-readable).
    ``SafeExecute`` adds ``--uid N`` for each notebook when ``isolation`` is ``uid``.
    """
    spec_dir = Path(jupyter_dir) / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "autograder.kernel.launcher", "--memory-mb", str(memory_mb),
                 "--max-output", str(max_output), "--library", str(library), "--isolation", isolation,
                 "-f", "{connection_file}"],
        "display_name": "Python 3 (grading sandbox)",
        "language": "python",
        "interrupt_mode": "message",  # the kernel is not a child the grader can signal directly
        "metadata": {"debugger": False},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
    return spec_dir


def set_limits(memory_mb: int, *, max_file_mb: int = MAX_FILE_MB, max_procs: int | None = None,
               cpu_seconds: int = CPU_SECONDS):
    def lower(which, value):
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))

    lower(resource.RLIMIT_AS, memory_mb * 1024 * 1024)
    lower(resource.RLIMIT_FSIZE, max_file_mb * 1024 * 1024)
    lower(resource.RLIMIT_CORE, 0)
    lower(resource.RLIMIT_CPU, cpu_seconds)
    if max_procs is not None:
        lower(resource.RLIMIT_NPROC, max_procs)


def folders_of_gone_processes(patterns) -> list:
    """Folders in the temporary folder that match ``patterns`` (``<prefix>-<pid>-<random>``) and whose process is gone:
    what a grader killed before it could clean up left. A folder of a process that still runs, whoever runs it, is
    never among them."""
    import glob
    import tempfile

    found = []
    for pattern in patterns:
        for folder in glob.glob(os.path.join(tempfile.gettempdir(), pattern)):
            pid = os.path.basename(folder).split("-")[2]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                found.append(folder)
    return found


def cgroup_name(uid: int) -> str:
    return f"uid-{uid}"


def private_cgroup_name(private: str) -> str:
    """The control group of the kernel whose private folder is ``private`` (not root: no uid of its own)."""
    return os.path.basename(os.path.normpath(private))


def libc():
    lib = ctypes.CDLL(None, use_errno=True)
    lib.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    return lib


def mount(lib, source, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    if lib.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def unshare(lib, *kinds) -> None:
    """New namespaces of ``kinds`` (names of ``_CLONE``) for this process."""
    flags = 0
    for kind in kinds:
        flags |= _CLONE[kind]
    if lib.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare({', '.join(kinds)}): {os.strerror(err)}")


def own_user_namespace(lib=None, *, with_mounts: bool = False) -> None:
    """Move this process into a new user namespace (and, ``with_mounts``, a new mount namespace) in which it keeps
    its uid and gid and gains nothing outside. Its processes are then counted apart from the user's others for
    ``RLIMIT_NPROC`` (Linux 5.14 and later count per user namespace), and it may mount a tmpfs of its own.
    Raises OSError where the machine forbids unprivileged user namespaces."""
    lib = lib or libc()
    uid, gid = os.getuid(), os.getgid()
    unshare(lib, "user", *(["ns"] if with_mounts else []))
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as fh:
            fh.write(text)


def ipc_limits(memory_bytes: int) -> dict:
    """The System V IPC limits of a kernel's IPC namespace (``private_ipc``), by sysctl under ``/proc/sys/kernel``:
    a shared-memory segment is removed when no process maps it any more (so what it holds is always counted in some
    process's memory), and all segments, message queues and semaphores together hold at most ``memory_bytes`` and a
    few MB."""
    return {"shm_rmid_forced": 1, "shmmax": memory_bytes, "shmall": memory_bytes // os.sysconf("SC_PAGE_SIZE"),
            "shmmni": 256, "msgmni": 32, "msgmnb": 16384, "sem": "250 32000 32 128"}


def private_ipc(lib, limits: dict) -> None:
    """Move this process into a new IPC namespace with ``limits`` (``ipc_limits``). This process must hold
    CAP_SYS_ADMIN in its user namespace (one it just made: ``own_user_namespace``). An ordinary user may set the
    limits of an IPC namespace only from a user namespace in which it is root, so a child makes the namespace in a
    user namespace of its own mapping the user to root there, sets them, and this process joins it. Raises OSError
    where that cannot be done."""
    uid, gid = os.getuid(), os.getgid()
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(done_w)
            unshare(lib, "user", "ipc")
            for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
                with open(f"/proc/self/{name}", "w", encoding="ascii") as fh:
                    fh.write(text)
            for name, value in limits.items():
                with open(f"/proc/sys/kernel/{name}", "w", encoding="ascii") as fh:
                    fh.write(str(value))
            os.write(ready_w, b"1")
            os.read(done_r, 1)  # until the parent has joined
            os._exit(0)
        except BaseException:  # noqa: BLE001 - the parent raises
            os._exit(1)
    os.close(ready_w)
    os.close(done_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise OSError("could not make an IPC namespace with limits")
        fd = os.open(f"/proc/{pid}/ns/ipc", os.O_RDONLY)
        try:
            if lib.setns(fd, _CLONE["ipc"]) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns(ipc): {os.strerror(err)}")
        finally:
            os.close(fd)
    finally:
        os.close(ready_r)
        os.close(done_w)
        os.waitpid(pid, 0)


def user_namespaces_allowed() -> bool:
    """True when this user may make a user namespace here (a child process tries)."""
    pid = os.fork()
    if pid == 0:
        try:
            own_user_namespace()
            os._exit(0)
        except BaseException:  # noqa: BLE001 - the child only answers yes or no
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def _private_tmpfs(target: str, *, size_mb: int, inodes: int) -> None:
    """A tmpfs at ``target`` seen only by this process and its children (a private mount namespace; not root: in
    a user namespace of its own, where an ordinary user may mount one)."""
    lib = libc()
    if os.geteuid() == 0:
        unshare(lib, "ns")
    else:
        own_user_namespace(lib, with_mounts=True)
    mount(lib, None, "/", None, _MS_REC | _MS_PRIVATE)
    mount(lib, "tmpfs", target, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=0755,size={size_mb}m,nr_inodes={inodes}")


def python_paths() -> list:
    """What the kernel's Python needs, as (real path, path inside the sandbox) pairs: the installation, the venv
    and everything else on sys.path, each at its real path and, when it was reached through a symlink (a `.venv`
    that links to a venv elsewhere), at that path too."""
    not_python = {os.path.realpath(p) for p in [os.getcwd(), *os.environ.get("PYTHONPATH", "").split(os.pathsep)] if p}
    wanted = [sys.base_prefix, sys.prefix]
    wanted += [entry for entry in sys.path if entry and os.path.isabs(entry) and os.path.exists(entry)
               and os.path.realpath(entry) not in not_python]  # the working folder and the course are not bound
    pairs = set()
    for path in wanted:
        real = os.path.realpath(path)
        pairs |= {(real, real), (real, os.path.abspath(path))}

    def covered(src, dest):
        return any(dest.startswith(d + os.sep) and src == s + dest[len(d):] for s, d in pairs if d != dest)

    return sorted(p for p in pairs if not covered(*p))


def kernel_python() -> str:
    """The venv's interpreter by a path that exists inside the sandbox (the venv's real folder)."""
    return os.path.join(os.path.realpath(sys.prefix), "bin", os.path.basename(sys.executable))


def bwrap_command(*, library: str, scratch: str | None, channel: str, isolation: str) -> list:
    """bubblewrap's arguments: the namespaces, then the file system, built up from read-only binds. ``scratch``:
    the launcher's tmpfs, or None for the warm kernel server, whose kernels mount their own."""
    cmd = [shutil.which("bwrap") or "bwrap", "--die-with-parent", "--new-session", "--unshare-pid",
           "--unshare-net", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "grading"]
    if isolation == "userns":  # the IPC namespace is the launcher's own, with limits (``private_ipc``)
        # --as-pid-1: no init of bubblewrap's inside (the kernel once attached to it with ptrace and forked and
        # spun from it); the limits, the CPU and the filter are in place before bubblewrap starts
        # (``launcher._launch_unprivileged``), so every process of the kernel's uid inherits them
        cmd += ["--unshare-user", "--cap-drop", "ALL", "--as-pid-1"]
    else:
        cmd += ["--unshare-ipc"]
    for folder in ("/etc", "/home", "/opt", "/var"):  # bubblewrap would make them 0700
        cmd += ["--perms", "0755", "--dir", folder]
    for name in _SYSTEM:
        path = f"/{name}"
        if os.path.islink(path):
            cmd += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            cmd += ["--ro-bind", path, path]
    for name in _ETC:
        if os.path.exists(f"/etc/{name}"):
            cmd += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    # The writable places first: what is bound below may live under /tmp (a course cloned there, its venv).
    if scratch is None:  # the warm kernel server (autograder/kernel/warm_kernels.py): each kernel mounts its own
        cmd += ["--dir", "/tmp", "--dir", "/var/tmp"]
    else:  # the limited tmpfs the launcher mounted
        for place in ("/tmp", "/var/tmp", "/dev/shm"):
            cmd += ["--bind", f"{scratch}/tmp", place]
        cmd += ["--bind", f"{scratch}/home", HOME]
    binds = python_paths() + [(library, KERNEL_LIBRARY)]
    # Folders above the binds: bubblewrap would make them 0700 (root's), which the notebook's uid cannot enter.
    cmd += _folders_above([dest for _, dest in binds] + [channel])
    for src, dest in binds:
        cmd += ["--ro-bind", src, dest]
    cmd += ["--bind", channel, channel]
    if isolation == "userns":  # bubblewrap's own root and /dev belong to the user here: only the tmpfs is writable
        cmd += ["--remount-ro", "/", "--remount-ro", "/dev"]
    return cmd + ["--chdir", HOME + "/work"]


def _folders_above(paths) -> list:
    """Make the folders above ``paths`` enterable by anyone (bubblewrap would make them 0700, root's)."""
    above = {str(parent) for path in paths for parent in Path(path).parents}
    above -= {"/", "/etc", "/home", "/opt", "/var", "/tmp", "/var/tmp", "/dev", HOME, *(f"/{n}" for n in _SYSTEM)}
    return [arg for folder in sorted(above, key=lambda p: p.count("/")) for arg in ("--perms", "0755", "--dir", folder)]


TRUNCATED_MARKER = "[grader] output truncated"
_OUTPUT_CAP = """
def _grader_output_cap(limit, marker):
    from ipykernel.iostream import OutStream
    state = {"n": 0, "cut": False, "inside": False}
    original = OutStream.write

    def capped(inner):
        def write(text, *args, **kwargs):
            if state["inside"] or not isinstance(text, str):  # a cap already stands in front of this call
                return inner(text, *args, **kwargs)
            if state["cut"]:
                return len(text)
            state["inside"] = True
            try:
                room = limit - state["n"]
                state["n"] += len(text)
                if len(text) <= room:
                    return inner(text, *args, **kwargs)
                state["cut"] = True
                inner(text[:max(room, 0)] + "\\n%s: this cell printed more than %d bytes\\n" % (marker, limit))
                return len(text)
            finally:
                state["inside"] = False
        write.grader_inner = inner
        return write

    class CappedWrite:
        # A data descriptor: IPython's per-cell tee assigns stream.write and restores it afterwards; the cap
        # stays in front of whatever is assigned, and in front of the tee's copy of the output.
        def __get__(self, obj, owner=None):
            if obj is None:
                return self
            return capped(obj.__dict__.get("_grader_write") or original.__get__(obj, owner))

        def __set__(self, obj, value):
            obj.__dict__["_grader_write"] = getattr(value, "grader_inner", value)

    OutStream.write = CappedWrite()
    get_ipython().events.register("pre_run_cell", lambda *args: state.update(n=0, cut=False))


_grader_output_cap(LIMIT, MARKER)
del _grader_output_cap
"""


_REFUSALS = """
def _grader_refusals(fd, note):
    import _posixsubprocess, _thread, errno, os, threading

    def noting(inner):
        def call(*args, **kwargs):
            try:
                return inner(*args, **kwargs)
            except (BlockingIOError, RuntimeError) as exc:  # EAGAIN: RLIMIT_NPROC; "can't start new thread"
                if isinstance(exc, BlockingIOError) or "new thread" in str(exc):
                    try:
                        os.write(fd, note)
                    except OSError:
                        pass
                raise
        return call

    for module, names in ((os, ("fork", "forkpty", "posix_spawn", "posix_spawnp")), (_posixsubprocess, ("fork_exec",)),
                          (_thread, ("start_new_thread", "start_joinable_thread")),
                          (threading, ("_start_new_thread", "_start_joinable_thread"))):
        for name in names:
            if hasattr(module, name):
                setattr(module, name, noting(getattr(module, name)))


_grader_refusals(FD, NOTE)
del _grader_refusals
"""


def refusals_line(fd: int, note: str) -> str:
    """One line of code for ipykernel's exec_lines that writes ``note`` to the file descriptor ``fd`` (a pipe the
    launcher's watch reads) whenever the kernel is refused a process or a thread (``RLIMIT_NPROC``): the refusal
    itself, which the watch could miss between two looks when the notebook lets its processes go at once."""
    return _exec_line(_REFUSALS.replace("FD", str(int(fd))).replace("NOTE", repr((note + "\n").encode())))


_COMPILE_GUARD = """
def _grader_compile_guard():
    shell = get_ipython()
    original = shell.should_run_async

    def should_run_async(raw_cell, *args, **kwargs):
        try:
            return original(raw_cell, *args, **kwargs)
        except Exception:
            return False
    shell.should_run_async = should_run_async
_grader_compile_guard()
del _grader_compile_guard
"""


def compile_guard_line() -> str:
    """One line of code for ipykernel's exec_lines: a cell Python cannot compile (an expression thousands of terms
    deep) fails as the learner's own error instead of stopping the kernel's answers.

    IPython compiles each cell once to see whether it awaits anything (``should_run_async``), and lets any error of
    that compile other than a syntax error escape; ipykernel then logs it and never replies, so the cell runs until
    the grader's timeout, and the interrupt that ends it can land in the next, honest cell. With the guard such a
    cell runs as a plain cell, whose compile error (``RecursionError``) is the cell's output, in well under a second.
    """
    return _exec_line(_COMPILE_GUARD)


def _exec_line(code: str) -> str:
    """``code`` as one line for ipykernel's exec_lines."""
    import base64

    return f"exec(__import__('base64').b64decode({base64.b64encode(code.encode()).decode()!r}).decode())"


def output_cap_line(limit: int) -> str:
    """One line of code for ipykernel's exec_lines that caps what each cell prints, inside the kernel.

    Printing hundreds of MB would otherwise pile up in the kernel's output buffer until the kernel runs out of
    memory and every later cell fails: the cap keeps an honest but chatty notebook gradable. (The grader caps
    output again on its side, SafeExecute, for a notebook that removes this one.)
    """
    return _exec_line(_OUTPUT_CAP.replace("MARKER", repr(TRUNCATED_MARKER)).replace("LIMIT", str(int(limit))))


def font_caches(places=None) -> dict:
    """matplotlib's font list cache ({file name: bytes}) in ``places``, by default the folders of the user starting
    the kernel, to seed the kernel's."""
    places = places or [os.environ.get("MPLCONFIGDIR"), os.path.expanduser("~/.cache/matplotlib"),
                        os.path.expanduser("~/.matplotlib")]
    found: dict = {}
    for place in filter(None, places):
        for path in Path(place).glob("fontlist-*.json"):
            found.setdefault(path.name, path.read_bytes())
    return found


def clean_env(home: str, library: str) -> dict:
    # not JPY_PARENT_PID: inside a PID namespace the kernel's parent is pid 1, which ipykernel takes for "the
    # parent exited" when told to watch a parent pid
    env = {k: v for k, v in os.environ.items() if k in _KEEP_ENV or (k.startswith("JPY_") and k != "JPY_PARENT_PID")}
    env.update(HOME=home, TMPDIR="/tmp", USER="learner", LOGNAME="learner", MPLCONFIGDIR=f"{home}/.matplotlib",
               IPYTHONDIR=f"{home}/.ipython", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=library, MPLBACKEND=os.environ.get("MPLBACKEND", "Agg"))
    return env


def kernel_argv(python: str, connection_file: str, max_output: int, kernel_args, *, refusals=None) -> list:
    """ipykernel's command line; ``refusals``: (file descriptor, note) for ``refusals_line``."""
    kernel_args = [*kernel_args, "--IPKernelApp.exec_lines=" + compile_guard_line()]
    if max_output:
        kernel_args = [*kernel_args, "--IPKernelApp.exec_lines=" + output_cap_line(max_output)]
    if refusals is not None:
        kernel_args = [*kernel_args, "--IPKernelApp.exec_lines=" + refusals_line(*refusals)]
    return [python, "-m", "ipykernel_launcher", "-f", connection_file, *kernel_args]


def seed_home(home: Path, uid: int | None, fonts: dict) -> None:
    """The kernel's home: a work folder and matplotlib's font cache ``fonts`` (without it: seconds per kernel)."""
    for sub in ("work", ".matplotlib"):
        (home / sub).mkdir(parents=True, mode=0o700, exist_ok=True)
    for name, data in fonts.items():
        (home / ".matplotlib" / name).write_bytes(data)
    if uid is not None:
        for path in (home, *home.rglob("*")):
            os.chown(path, uid, uid)



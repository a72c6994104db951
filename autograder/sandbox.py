"""Kernel launcher for grading untrusted notebooks: ``python -m autograder.sandbox -f CONNECTION_FILE``.

It is one module, longer than most, because it runs as a program of its own from the kernel library, beside the
kernel, where it can import nothing else of the course.

The grading course's kernelspec (``autograder-sandbox``, written by ``install_kernelspec``) starts every kernel
through this module. How much it can isolate depends on who runs the grader (``isolation_level``):

``uid`` (run as root: CI, a grading server, a container). ``SafeExecute`` gives each notebook a uid that no
other live process uses, a private folder holding the kernel's connection file and its IPC sockets, and passes
``--uid``. The launcher then

1. creates the notebook's control group (``autograder/grading/cgroups.py``: memory including tmpfs pages and
   kernel objects, a process count, at most one CPU) and moves itself into it;
2. mounts one throw-away tmpfs, limited in size *and* inodes, that becomes the kernel's ``/tmp``, ``/var/tmp``,
   ``/dev/shm`` and home;
3. starts bubblewrap (``bwrap``) with new PID, IPC, network, UTS and mount namespaces. The kernel's file system
   is built up, not hidden down: read-only binds of the system's ``/usr`` (and a few files of ``/etc``), the
   Python installation and venv (each at its real path, so folders above them that others cannot enter do not
   matter), the kernel library (the modules the hidden cells and the learner's helper import, copied by the
   grader and bound at ``KERNEL_LIBRARY``), the tmpfs, and the connection folder. The original submissions, the
   grading workspace, the gradebook and other kernels are simply not there. No network exists inside (the
   grader talks to the kernel over IPC sockets in the connection folder); the kernel sees only its own
   processes and IPC objects, and when it ends, every process it started ends with it (PID namespace);
4. inside, drops to the notebook's uid (no capabilities, no new privileges), sets per-process limits (address
   space ``--memory-mb``: a memory bomb raises ``MemoryError``; file size; processes; CPU time; no core dumps),
   replaces the environment by a short allow-list, and starts ``ipykernel``.

With ``uid``, the grader usually sets ``MHA_WARM_KERNELS``: the launcher then asks the worker's warm kernel server
(``autograder/warm_kernels.py``) for the kernel instead of steps 2-4. The server runs in this module's bubblewrap file
system (``bwrap_command`` without a notebook's writable places) and builds the same namespaces, tmpfs, uid and limits
for each notebook in a forked process that already imported ipykernel, numpy and matplotlib; the launcher still
creates the control group and moves the notebook into it. When the server cannot be reached, the steps above run.

``userns`` (not root, but bubblewrap can use unprivileged user namespaces): the same namespaces and file system,
without the separate uid and control group. ``none`` (neither): only the per-process limits; the kernel can read
and write what the user running the grader can, and the report says so.
"""

from __future__ import annotations

import argparse
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
_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 16384, 1 << 18
TMP_INODES = 20_000
MAX_PROCS = 64


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
        "argv": [sys.executable, "-m", "autograder.sandbox", "--memory-mb", str(memory_mb),
                 "--max-output", str(max_output), "--library", str(library), "--isolation", isolation,
                 "-f", "{connection_file}"],
        "display_name": "Python 3 (grading sandbox)",
        "language": "python",
        "interrupt_mode": "message",  # the kernel is not a child the grader can signal directly
        "metadata": {"debugger": False},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
    return spec_dir


def set_limits(memory_mb: int, *, max_file_mb: int = 64, max_procs: int | None = None, cpu_seconds: int = 3600):
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


def cgroup_name(uid: int) -> str:
    return f"uid-{uid}"


def libc():
    lib = ctypes.CDLL(None, use_errno=True)
    lib.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    return lib


def mount(lib, source, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    if lib.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _private_tmpfs(target: str, *, size_mb: int, inodes: int) -> None:
    """A tmpfs at ``target`` seen only by this process and its children (a private mount namespace)."""
    lib = libc()
    if lib.unshare(_CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNS): {os.strerror(err)}")
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
    the launcher's tmpfs (``uid``), or None for the warm kernel server, whose kernels mount their own."""
    cmd = [shutil.which("bwrap") or "bwrap", "--die-with-parent", "--new-session", "--unshare-pid",
           "--unshare-ipc", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "grading"]
    if isolation == "userns":
        cmd += ["--unshare-user", "--cap-drop", "ALL"]
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
    if scratch is None:  # the warm kernel server (autograder/warm_kernels.py): each kernel mounts its own
        cmd += ["--dir", "/tmp", "--dir", "/var/tmp"]
    elif isolation == "uid":  # the limited tmpfs the launcher mounted
        for place in ("/tmp", "/var/tmp", "/dev/shm"):
            cmd += ["--bind", f"{scratch}/tmp", place]
        cmd += ["--bind", f"{scratch}/home", HOME]
    else:  # no privilege to mount a tmpfs with an inode limit: bubblewrap's own, limited in size
        cmd += ["--size", str(64 << 20), "--tmpfs", "/tmp", "--dir", "/var/tmp", "--dir", HOME]
    binds = python_paths() + [(library, KERNEL_LIBRARY)]
    # Folders above the binds: bubblewrap would make them 0700 (root's), which the notebook's uid cannot enter.
    cmd += _folders_above([dest for _, dest in binds] + [channel])
    for src, dest in binds:
        cmd += ["--ro-bind", src, dest]
    cmd += ["--bind", channel, channel]
    return cmd + ["--chdir", HOME + ("/work" if isolation == "uid" else "")]


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


def output_cap_line(limit: int) -> str:
    """One line of code for ipykernel's exec_lines that caps what each cell prints, inside the kernel.

    Printing hundreds of MB would otherwise pile up in the kernel's output buffer until the kernel runs out of
    memory and every later cell fails: the cap keeps an honest but chatty notebook gradable. (The grader caps
    output again on its side, SafeExecute, for a notebook that removes this one.)
    """
    import base64

    code = _OUTPUT_CAP.replace("MARKER", repr(TRUNCATED_MARKER)).replace("LIMIT", str(int(limit)))
    return f"exec(__import__('base64').b64decode({base64.b64encode(code.encode()).decode()!r}).decode())"


def font_caches(places=None) -> dict:
    """matplotlib's font list cache ({file name: bytes}) in ``places``, by default the folders of the user starting
    the kernel, to seed the kernel's."""
    places = places or [os.environ.get("MPLCONFIGDIR"), os.path.expanduser("~/.cache/matplotlib"),
                        os.path.expanduser("~/.matplotlib")]
    found = {}
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


def kernel_argv(python: str, connection_file: str, max_output: int, kernel_args) -> list:
    if max_output:
        kernel_args = [*kernel_args, "--IPKernelApp.exec_lines=" + output_cap_line(max_output)]
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


def _launch_isolated(args, kernel_args, grader: int) -> None:
    """Root: control group, limited tmpfs, then bubblewrap running ``--drop-to`` inside. ``grader``: the pid of the
    grading process that asked for this kernel (0: unknown); a kernel is started cold only while it runs (a grader
    killed before its kernel started would leave a kernel no one uses, which bubblewrap's ``--die-with-parent``
    cannot catch once the parent is gone)."""
    from autograder.grading import cgroups, uids

    uid, conn = args.uid, os.path.abspath(args.connection_file)
    channel = os.path.dirname(conn)
    scratch = os.path.join(os.path.dirname(channel), "scratch")
    for path in (channel, conn):
        os.chown(path, uid, uid)
    if os.environ.get("MHA_WARM_KERNELS") and \
            os.environ.get("MHA_WARM_KERNELS_LIBRARY") == os.path.realpath(args.library or ""):
        _launch_warm(args, kernel_args, os.environ["MHA_WARM_KERNELS"])  # returns only when the server is gone
    if grader and not uids.alive([grader]):
        raise SystemExit("the grading process that asked for this kernel is gone: not starting it")
    try:
        cgroups.create(cgroup_name(uid), memory_bytes=args.memory_mb << 20, pids=MAX_PROCS, cpus=1.0)
        cgroups.join(cgroup_name(uid), os.getpid())
    except OSError:
        pass  # no writable cgroup file system: the grader reports it; per-process limits still apply
    _private_tmpfs(scratch, size_mb=args.tmp_mb, inodes=TMP_INODES)
    os.makedirs(f"{scratch}/tmp", mode=0o1777)
    os.chmod(f"{scratch}/tmp", 0o1777)
    seed_home(Path(scratch) / "home", uid, font_caches())
    cmd = bwrap_command(library=args.library, scratch=scratch, channel=channel, isolation="uid")
    python = kernel_python()
    cmd += ["--", python, "-m", "autograder.sandbox", "--drop-to", str(uid), "--memory-mb", str(args.memory_mb),
            "--max-output", str(args.max_output), "-f", conn, *kernel_args]
    env = clean_env(HOME, KERNEL_LIBRARY)
    os.execve(cmd[0], cmd, env)


def _launch_warm(args, kernel_args, server: str) -> None:
    """Root: the kernel from the warm kernel server (``autograder/warm_kernels.py``); exits with the kernel's
    status. Returns only when the server cannot be reached (the kernel then starts cold)."""
    from autograder import warm_kernels

    conn = os.path.abspath(args.connection_file)
    request = {"uid": args.uid, "memory_mb": args.memory_mb, "max_output": args.max_output, "tmp_mb": args.tmp_mb,
               "connection_file": conn, "channel": os.path.dirname(conn),
               "channels": os.path.dirname(os.path.dirname(os.path.dirname(conn))), "kernel_args": kernel_args,
               "env": clean_env(HOME, KERNEL_LIBRARY), "umask": _umask()}
    try:
        sock = warm_kernels.connect(server)
    except OSError:
        return
    sys.exit(warm_kernels.launch(sock, request))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _drop_and_start(args, kernel_args) -> None:
    """Inside bubblewrap, still root in the new namespaces: limits, then the notebook's uid, then ipykernel."""
    uid = args.drop_to
    set_limits(args.memory_mb, max_procs=MAX_PROCS)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != uid:
        raise SystemExit("could not drop privileges")
    _exec_kernel(kernel_argv(sys.executable, args.connection_file, args.max_output, kernel_args), dict(os.environ))


def _exec_kernel(argv: list, env: dict) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)  # ipykernel's start-up notes; cell output goes over zmq
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.execve(argv[0], argv, env)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-f", dest="connection_file")
    parser.add_argument("--memory-mb", type=int, default=2048)
    parser.add_argument("--max-output", type=int, default=0, help="bytes of output kept per cell (0: no cap)")
    parser.add_argument("--tmp-mb", type=int, default=64, help="size of the kernel's tmpfs")
    parser.add_argument("--library", default=None, help="folder of the modules kernels may import")
    parser.add_argument("--isolation", choices=("uid", "userns", "none"), default="none")
    parser.add_argument("--uid", type=int, default=None, help="this notebook's sandbox uid (isolation 'uid')")
    parser.add_argument("--drop-to", type=int, default=None, help=argparse.SUPPRESS)
    # the warm kernel server (autograder/warm_kernels.py): started outside, then serving inside its bubblewrap
    parser.add_argument("--start-warm-server", default=None, help=argparse.SUPPRESS)  # the server's folder
    parser.add_argument("--channels", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--warm-server", default=None, help=argparse.SUPPRESS)  # its socket
    parser.add_argument("--lifeline", type=int, default=None, help=argparse.SUPPRESS)
    args, kernel_args = parser.parse_known_args(argv)
    if args.start_warm_server is not None or args.warm_server is not None:
        from autograder import warm_kernels

        if args.warm_server is not None:
            return warm_kernels.serve(args.warm_server, args.lifeline)
        return warm_kernels.start(args.start_warm_server, channels=args.channels, library=args.library,
                                  lifeline=args.lifeline)
    if args.connection_file is None:
        parser.error("the kernel's connection file (-f) is required")
    if args.drop_to is not None:
        return _drop_and_start(args, kernel_args)
    if args.isolation == "uid":
        if args.uid is None or os.geteuid() != 0:
            raise SystemExit("isolation 'uid' needs root and a --uid from the grader")
        # jupyter_client names the process that started this launcher (the grading worker) in JPY_PARENT_PID
        return _launch_isolated(args, kernel_args, int(os.environ.get("JPY_PARENT_PID") or 0))
    if args.isolation == "userns":
        conn = os.path.abspath(args.connection_file)
        cmd = bwrap_command(library=args.library, scratch="", channel=os.path.dirname(conn), isolation="userns")
        set_limits(args.memory_mb)
        cmd += ["--", *kernel_argv(kernel_python(), conn, args.max_output, kernel_args)]
        return _exec_kernel(cmd, clean_env(HOME, KERNEL_LIBRARY))
    set_limits(args.memory_mb)
    home = os.environ.get("HOME", "/tmp")
    return _exec_kernel(kernel_argv(sys.executable, args.connection_file, args.max_output, kernel_args),
                        clean_env(home, args.library or ""))


if __name__ == "__main__":
    main()

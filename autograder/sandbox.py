"""Kernel launcher for grading untrusted notebooks: ``python -m autograder.sandbox -f CONNECTION_FILE``.

The grading course's kernelspec (``autograder-sandbox``, written by ``install_kernelspec``) starts kernels through
this module instead of starting ``ipykernel`` directly. Before ipykernel starts, and so before any learner code
runs, it:

1. sets resource limits on the kernel process: address space (``--memory-mb``: a memory bomb raises
   ``MemoryError`` instead of exhausting the machine), largest file it may write, number of processes of its
   user (fork bombs), no core dumps, and a CPU-time ceiling (a stray process cannot spin forever);
2. when started as root (how the grading command runs in CI and on a grading server), enters a private mount
   namespace in which ``/tmp``, ``/var/tmp``, ``/run/lock`` and ``/dev/shm`` (the places every user may write) are
   fresh, size-limited tmpfs mounts that vanish with the kernel, exposes the Python installation and the course
   code read-only even when they live under a private directory (e.g. ``/root/.pyenv``) and hides the rest of such
   a directory, then switches to an unprivileged uid (``--uid``) that owns nothing on the machine. The kernel can
   then write nowhere but its own throw-away tmpfs: not the gradebook, not another student's folder, not the
   original submissions, not the course code (all root-owned and not writable by others);
3. replaces the environment by a short allow-list (no database URL or other secret of the grader leaks in), and
   starts ``ipykernel`` with a copy of the connection file the unprivileged user can read.

Run without root, step 2 is skipped: the limits still apply, and the grading command reports that kernels were not
isolated from the files of the user who ran it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import stat
import sys
from pathlib import Path

KERNEL_NAME = "autograder-sandbox"
WRITABLE_BY_ALL = ("/tmp", "/var/tmp", "/run/lock", "/dev/shm")
_KEEP_ENV = ("PATH", "PYTHONPATH", "MPLBACKEND", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "NBGRADER_EXECUTION",
             "PYTHONHASHSEED", "PYDEVD_DISABLE_FILE_VALIDATION",
             "MHA_GRADING_SALT")  # hidden-test inputs: the grader draws the salt, the kernel must use the same
_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18


def install_kernelspec(jupyter_dir, *, memory_mb: int, max_output: int = 1_000_000,
                       uid_env: str = "AUTOGRADER_SANDBOX_UID") -> Path:
    """Write ``<jupyter_dir>/kernels/autograder-sandbox/kernel.json``; put ``jupyter_dir`` on JUPYTER_PATH.

    The uid is read from the environment variable ``uid_env`` at kernel start, so each grading worker can give its
    kernels their own uid while sharing one kernelspec.
    """
    spec_dir = Path(jupyter_dir) / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "autograder.sandbox", "--memory-mb", str(memory_mb),
                 "--max-output", str(max_output), "--uid-from-env",
                 uid_env, "-f", "{connection_file}"],
        "display_name": "Python 3 (grading sandbox)",
        "language": "python",
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


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    return libc


def _mount(libc, source, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _others_can_enter(path: str) -> bool:
    return bool(os.stat(path).st_mode & stat.S_IXOTH)


def _blocked_dirs(needed) -> dict:
    """{directory others cannot enter: names of its children on the way to a needed path}."""
    blocked: dict = {}
    for path in needed:
        path = os.path.realpath(path)
        if not os.path.exists(path):
            continue
        parts = Path(path).parts
        for i in range(1, len(parts)):
            parent = str(Path(*parts[:i]))
            if not _others_can_enter(parent):
                blocked.setdefault(parent, set()).add(parts[i])
    return blocked


def _expose_read_only(libc, fd, target):
    """Bind the file or folder open as ``fd`` (O_PATH, taken before a tmpfs covered it) at ``target``, read-only."""
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.mkdir(target)
    else:
        open(target, "w").close()
    _mount(libc, f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC)
    _mount(libc, None, target, None, _MS_BIND | _MS_REC | _MS_REMOUNT | _MS_RDONLY)
    os.close(fd)


def isolate(libc, needed, *, tmp_mb: int = 64):
    """Private mount namespace: fresh tmpfs where everyone may write; needed paths reachable by anyone."""
    if libc.unshare(_CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNS): {os.strerror(err)}")
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE)
    # Deepest first, so that a re-exposed child keeps the mounts already made below it (MS_REC).
    for parent, children in sorted(_blocked_dirs(needed).items(), key=lambda kv: -len(Path(kv[0]).parts)):
        fds = {name: os.open(os.path.join(parent, name), os.O_PATH) for name in children}
        _mount(libc, "tmpfs", parent, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
        for name, fd in fds.items():
            _expose_read_only(libc, fd, os.path.join(parent, name))
    needed_real = sorted({os.path.realpath(p) for p in needed if os.path.exists(p)})
    for place in WRITABLE_BY_ALL:
        if os.path.isdir(place) and not os.path.islink(place):
            # A needed path inside a throw-away place (the course cloned under /tmp, say) is kept, read-only.
            prefix = place.rstrip("/") + "/"
            inside = [p for p in needed_real if p.startswith(prefix)]
            tops = [p for p in inside if not any(p != q and p.startswith(q + "/") for q in inside)]
            fds = {p: os.open(p, os.O_PATH) for p in tops}
            _mount(libc, "tmpfs", place, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,size={tmp_mb}m")
            for target, fd in fds.items():
                umask = os.umask(0o022)  # the grader's umask (077) would leave these folders closed to the uid
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                os.umask(umask)
                _expose_read_only(libc, fd, target)


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


def _font_caches() -> dict:
    """matplotlib's font list cache of the user starting the kernel ({file name: bytes}), to seed the kernel's."""
    places = [os.environ.get("MPLCONFIGDIR"), os.path.expanduser("~/.cache/matplotlib"),
              os.path.expanduser("~/.matplotlib")]
    found = {}
    for place in filter(None, places):
        for path in Path(place).glob("fontlist-*.json"):
            found.setdefault(path.name, path.read_bytes())
    return found


def _clean_env(home: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k in _KEEP_ENV or k.startswith("JPY_")}
    env.update(HOME=home, TMPDIR="/tmp", USER="learner", LOGNAME="learner", MPLCONFIGDIR=f"{home}/.matplotlib",
               IPYTHONDIR=f"{home}/.ipython", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1", MPLBACKEND=os.environ.get("MPLBACKEND", "Agg"))
    return env


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-f", dest="connection_file", required=True)
    parser.add_argument("--memory-mb", type=int, default=2048)
    parser.add_argument("--max-output", type=int, default=0, help="bytes of output kept per cell (0: no cap)")
    parser.add_argument("--uid", type=int, default=None)
    parser.add_argument("--uid-from-env", default=None)
    args, kernel_args = parser.parse_known_args(argv)
    uid = args.uid
    if uid is None and args.uid_from_env and os.environ.get(args.uid_from_env):
        uid = int(os.environ[args.uid_from_env])
    connection = Path(args.connection_file).read_bytes()
    font_caches = _font_caches()
    home = os.environ.get("HOME", "/tmp")
    if uid is not None and os.geteuid() == 0:
        cwd = os.getcwd()
        needed = [sys.executable, os.path.realpath(sys.executable), sys.prefix, sys.base_prefix,
                  *[p for p in sys.path if p and os.path.abspath(p) != cwd],
                  *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
        isolate(_libc(), [p for p in needed if p])
        home = "/tmp/home"
        os.makedirs(f"{home}/work", mode=0o700)
        os.makedirs(f"{home}/.matplotlib", mode=0o700)
        for name, data in font_caches.items():  # without it matplotlib rebuilds its font list: seconds per kernel
            Path(f"{home}/.matplotlib/{name}").write_bytes(data)
            os.chown(f"{home}/.matplotlib/{name}", uid, uid)
        conn = f"{home}/kernel.json"
        Path(conn).write_bytes(connection)
        for path in (home, f"{home}/work", f"{home}/.matplotlib", conn):
            os.chown(path, uid, uid)
        os.chmod(conn, 0o600)
        set_limits(args.memory_mb, max_procs=128)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if os.getuid() != uid or os.geteuid() != uid:
            raise SystemExit("could not drop privileges")
        os.chdir(f"{home}/work")
    else:
        conn = args.connection_file
        set_limits(args.memory_mb)
    env = _clean_env(home)
    devnull = os.open(os.devnull, os.O_WRONLY)  # ipykernel's start-up warnings; cell output goes over zmq
    os.dup2(devnull, 2)
    if args.max_output:
        kernel_args = [*kernel_args, "--IPKernelApp.exec_lines=" + output_cap_line(args.max_output)]
    os.execve(sys.executable, [sys.executable, "-m", "ipykernel_launcher", "-f", conn, *kernel_args], env)


if __name__ == "__main__":
    main()

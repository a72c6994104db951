"""Warm kernels: graded kernels forked from a server that has imported ipykernel, numpy and matplotlib once.

A fresh kernel spends about a second of CPU importing the same modules before the notebook's first cell runs; for
a class that is a third of the grading time. With ``isolation`` ``uid`` (root with bubblewrap, see
``autograder/kernel/sandbox.py``), each process that grades (a worker) starts one *warm server* the first time it needs a
kernel: bubblewrap with the kernels' own read-only file system, in which ``serve`` imports ``PRELOAD`` as root and
then only waits. No learner code ever runs in it.

A kernel is then started by the same launcher as before (``python -m autograder.kernel.launcher ... --uid N``), which finds
the server's socket in ``ENV`` and, instead of building a sandbox, asks the server for one (``launch``):

1. the server forks a child for the request (the *keeper*, still root) and goes back to waiting;
2. the launcher, outside, moves the keeper into the notebook's control group (it learns the keeper's pid from the
   socket's credentials) and says go;
3. the keeper unshares new mount, PID, IPC, network, UTS and cgroup namespaces and builds the notebook's own
   mounts: a fresh tmpfs, limited in size and inodes, as ``/tmp``, ``/var/tmp``, ``/dev/shm`` and home; its
   channel folder (connection file and IPC sockets) at its real path, with every other kernel's channel folder
   and the server's socket gone from view;
4. the keeper forks the namespace's first process (``/proc`` of the new PID namespace is mounted there), which
   forks the kernel: limits, the notebook's uid, no capabilities, no new privileges, the launcher's environment,
   then ``ipykernel`` in the process that already imported it;
5. the keeper waits for the kernel and tells the launcher how it ended; when the launcher is killed (the grader
   stops the kernel), the keeper kills the namespace's first process, and with it every process of the notebook.

So every notebook still gets a new process, its own uid, namespaces, tmpfs and control group, and the same limits
as a kernel started cold; what it shares with the next notebook is only what the server imported before any
notebook existed. ``tests/grading/test_warm_kernels.py`` proves both: a kernel sees the same as a cold one, and what a
notebook leaves behind (files, processes, changed modules) never reaches the next one. When the server cannot be
reached, the launcher starts the kernel cold, as it would without one.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

from autograder.kernel import sandbox, syscall_filter

ENV = "MHA_WARM_KERNELS"  # the warm server's socket, set for the launcher by the grader
ENV_LIBRARY = "MHA_WARM_KERNELS_LIBRARY"  # the kernel library it binds: a kernelspec naming another one starts cold
PRELOAD = ("numpy", "matplotlib", "matplotlib.pyplot", "ipywidgets", "ipykernel.kernelapp")
SERVER_DIR = "/run/mha-warm"  # inside the server: its socket, and the font cache it starts from
STAGE = "/run/mha-stage"  # inside a keeper: where the notebook's tmpfs is mounted before it is bound in place
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18)
_MNT_DETACH = 2
_PR_SET_NO_NEW_PRIVS = 38
_FONTS: dict = {}  # matplotlib's font list cache, read once by the server; every kernel's home gets a copy


# -- the grader's side ---------------------------------------------------------------------------------------------

class Server:
    """A warm server for this process's kernels: started on first use, restarted if it died, and ended with this
    process (its bubblewrap dies with its parent, and it leaves when the pipe it holds from here closes)."""

    _current: "Server | None" = None
    _lock = threading.Lock()

    @classmethod
    def shared(cls, *, library: str) -> "Server":
        """This process's server for ``library``. A server that died is replaced, and so is one whose library was
        written again since it started (its bind would still show the old folder); one that could not start is not
        tried again (kernels then start cold)."""
        with cls._lock:
            server = cls._current
            if server is None or server.signature != library_signature(library) or (
                    not server.error and not server.alive()):
                if server is not None:
                    server.close()
                server = cls._current = cls(library=library)
            return server

    def __init__(self, *, library: str):
        import tempfile

        self.library, self.signature = library, library_signature(library)
        # root's, 0700: no sandbox uid can reach the socket; named after this process (``stale_folders``)
        self.folder = tempfile.mkdtemp(prefix=f"mha-warm-{os.getpid()}-")
        self.channels = tempfile.mkdtemp(prefix=f"mha-kernels-{os.getpid()}-")  # every kernel's private folder
        self.socket = os.path.join(self.folder, "server.sock")
        os.mkdir(os.path.join(self.folder, "fonts"))
        for name, data in sandbox.font_caches().items():
            with open(os.path.join(self.folder, "fonts", name), "wb") as fh:
                fh.write(data)
        read, self._lifeline = os.pipe()
        # through the kernels' own launcher program, which builds the bubblewrap command in a fresh interpreter
        # (the python paths to bind are its, not this process's) and then becomes the server (``start``)
        cmd = [sys.executable, "-m", "autograder.kernel.launcher", "--start-warm-server", self.folder, "--channels",
               self.channels, "--library", library, "--lifeline", str(read)]
        self.process: subprocess.Popen[bytes] | None = subprocess.Popen(
            cmd, pass_fds=(read,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(read)
        self.error = self._wait_ready()
        import atexit

        atexit.register(self.close)

    def _wait_ready(self, timeout: float = 60.0) -> str:
        """'' once the server listens (it writes one line when it does), else why it did not start."""
        assert self.process is not None and self.process.stderr is not None  # started by __init__, piped
        stderr = self.process.stderr
        ready, _, _ = select.select([stderr], [], [], timeout)
        line = stderr.readline().decode(errors="replace").strip() if ready else ""
        if line == "ready":
            return ""
        self.process.kill()
        said = [x for x in (line + "\n" + stderr.read().decode(errors="replace")).splitlines() if x.strip()]
        self.close()
        return said[-1] if said else f"the warm kernel server did not start within {timeout:.0f} s"

    def log(self) -> str:
        """What the server and its keepers reported (errors only)."""
        try:
            with open(os.path.join(self.folder, "server.log"), encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    def alive(self) -> bool:
        return not self.error and self.process is not None and self.process.poll() is None

    def env(self) -> dict:
        """What the launcher of a kernel needs to ask this server (nothing when it is not running)."""
        return {ENV: self.socket, ENV_LIBRARY: os.path.realpath(self.library)} if self.alive() else {}

    def close(self) -> None:
        import shutil

        if self.process is None:
            return
        try:
            os.close(self._lifeline)
        except OSError:
            pass
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        shutil.rmtree(self.channels, ignore_errors=True)
        self.process = None
        if Server._current is self:
            Server._current = None


def library_signature(library: str) -> tuple:
    """What identifies the kernel library as a server bound it: its path, and every file's inode, size and time."""
    found: list = [library]
    for folder, _, files in os.walk(library):
        for name in [folder, *(os.path.join(folder, f) for f in sorted(files))]:
            st = os.stat(name)
            found.append((name, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(found)


def stale_folders() -> list:
    """Folders of warm servers whose grader process is gone (it was killed before it could remove them)."""
    return sandbox.folders_of_gone_processes(("mha-warm-*-*", "mha-kernels-*-*"))


def start(folder: str, *, channels: str, library: str, lifeline: int) -> None:
    """Become the warm server (``python -m autograder.kernel.launcher --start-warm-server``, root, outside): bubblewrap with
    the kernels' file system (``sandbox.bwrap_command``) without a notebook's writable places, with every kernel's
    channel folder (``channels``) and the server's own ``folder`` writable, running ``serve`` inside."""
    cmd = sandbox.bwrap_command(library=library, scratch=None, channel=channels, isolation="uid")
    cmd = cmd[:cmd.index("--chdir")]
    cmd += ["--bind", folder, SERVER_DIR, "--dir", STAGE, "--tmpfs", sandbox.HOME, "--chdir", "/"]
    cmd += ["--", sandbox.kernel_python(), "-m", "autograder.kernel.launcher", "--warm-server", f"{SERVER_DIR}/server.sock",
            "--lifeline", str(lifeline)]
    os.execve(cmd[0], cmd, sandbox.clean_env(sandbox.HOME, sandbox.KERNEL_LIBRARY))


def connect(socket_path: str):
    """A connection to the warm server (OSError when it cannot be reached: the launcher then starts cold)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(socket_path)
    except OSError:
        sock.close()
        raise
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    return sock


def launch(sock, request: dict) -> int:
    """The launcher's side (root, outside the sandbox): ask the server for a kernel, put its keeper in the
    notebook's control group, then wait until the kernel ends; returns its exit status (1 when the server broke
    off: nbclient then sees a dead kernel, and retries a kernel that never started)."""
    from autograder.kernel import cgroups

    try:
        _send(sock, request)
        pid = _receive_pid(sock)  # the keeper's pid, as this process sees it
        try:
            name = sandbox.cgroup_name(request["uid"])
            cgroups.create(name, memory_bytes=request["memory_mb"] << 20, pids=sandbox.MAX_PROCS,
                           cpus=sandbox.KERNEL_CPUS)
            cgroups.join(name, pid)
        except OSError:
            pass  # no writable cgroup file system: the grader reports it; per-process limits still apply
        _send(sock, {"go": True})
        reply = _receive(sock)
    except OSError:
        return 1
    return int(reply.get("status", 1)) if reply else 1


def _send(sock, message: dict) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _receive(sock) -> dict | None:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


def _receive_pid(sock) -> int:
    size = struct.calcsize("3i")
    data, ancillary, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(size))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            return struct.unpack("3i", payload[:size])[0]
    raise OSError("the warm kernel server sent no credentials")


# -- the server's side, inside its bubblewrap ----------------------------------------------------------------------

def serve(socket_path: str, lifeline: int) -> None:
    """Import ``PRELOAD``, then fork a keeper for each request until the lifeline from the grader closes."""
    if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.realpath(os.getcwd()):
        del sys.path[0]  # as ipykernel's launcher does: the kernel puts its own folder back
    _FONTS.update(sandbox.font_caches([os.path.join(os.path.dirname(socket_path), "fonts")]))
    sandbox.seed_home(Path(sandbox.HOME), None, _FONTS)  # the server's own home, a tmpfs
    for module in PRELOAD:
        __import__(module)
    import matplotlib.font_manager  # noqa: F401 - the font list, read once here
    if threading.active_count() != 1:
        raise SystemExit(f"a preloaded module started a thread ({threading.enumerate()}); forking would be unsafe")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    os.chmod(socket_path, 0o600)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # keepers are reaped as they end
    sys.stderr.write("ready\n")
    sys.stderr.flush()
    log = os.open(os.path.join(os.path.dirname(socket_path), "server.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                  0o600)
    os.dup2(log, 2)  # what goes wrong in a keeper, for the grader to read (``Server.log``)
    os.close(log)
    while True:
        ready, _, _ = select.select([listener, lifeline], [], [])
        if lifeline in ready:
            os._exit(0)
        conn, _ = listener.accept()
        if os.fork() == 0:
            status = 1
            try:
                listener.close()
                os.close(lifeline)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                status = _keep(conn)
            except BaseException:  # noqa: BLE001 - said in the log; the launcher sees the connection end
                import traceback

                traceback.print_exc()
            finally:
                os._exit(status)
        conn.close()


def _keep(conn) -> int:
    """The keeper: one notebook's namespaces and mounts, its kernel, and the message saying how it ended."""
    request = _receive(conn)
    if request is None:
        return 1
    _send(conn, {"pid": os.getpid()})  # the launcher reads the credentials, not this number
    if not _receive(conn):
        return 1  # the launcher died before the kernel started
    libc = _libc()
    sandbox.unshare(libc, "ns", "pid", "ipc", "net", "uts", "cgroup")
    libc.sethostname(b"grading", 7)
    _loopback_up()
    _mount_notebook_files(libc, request)
    first = os.fork()
    if first == 0:  # pid 1 of the notebook's PID namespace
        code = 1
        try:
            code = _first_process(libc, request)
        finally:
            os._exit(code)
    # no thread here: after unshare(CLONE_NEWPID) this process cannot start one
    ended = os.pidfd_open(first)
    while True:
        ready, _, _ = select.select([conn, ended], [], [])
        if ended in ready:
            break
        try:
            still_there = conn.recv(4096)
        except OSError:
            still_there = b""
        if not still_there:  # the launcher was stopped: the notebook's processes end with its pid 1
            os.kill(first, signal.SIGKILL)
            os.waitpid(first, 0)
            return 0
    _, status = os.waitpid(first, 0)
    code = os.waitstatus_to_exitcode(status)
    try:
        _send(conn, {"status": code if code >= 0 else 128 - code})
    except OSError:
        pass
    return 0


def _first_process(libc, request: dict) -> int:
    """pid 1 of the notebook: its own /proc, then the kernel as a child; ends (and ends every process of the
    namespace) when the kernel ends."""
    os.closerange(3, 65536)  # the keeper's socket: the launcher must see it close when the keeper ends
    sandbox.mount(libc, "proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    kernel = os.fork()
    if kernel == 0:
        code = 1
        try:
            _become_kernel(request)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        finally:
            import atexit

            atexit._run_exitfuncs()  # what a kernel's interpreter would run as it exits
            os._exit(code)
    while True:
        pid, status = os.wait()
        if pid == kernel:
            return os.waitstatus_to_exitcode(status) & 0xFF


def _become_kernel(request: dict) -> None:
    """Limits, the notebook's uid, the launcher's environment, then ipykernel, in this already warm process."""
    uid = request["uid"]
    os.setsid()
    sandbox.set_limits(request["memory_mb"], max_procs=sandbox.MAX_PROCS)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != uid:
        raise SystemExit("could not drop privileges")
    ctypes.CDLL(None).prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    syscall_filter.install()
    os.umask(request["umask"])
    os.closerange(3, 65536)  # the socket to the launcher and anything else of the server
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.environ.clear()
    os.environ.update(request["env"], PWD=sandbox.HOME + "/work")  # PWD: as bubblewrap's --chdir sets it
    os.chdir(sandbox.HOME + "/work")
    import numpy

    numpy.random.seed()  # the legacy global generator was seeded once, in the server: reseed it per notebook
    argv = sandbox.kernel_argv(sys.executable, request["connection_file"], request["max_output"],
                               request["kernel_args"])
    import importlib.util

    spec = importlib.util.find_spec(argv[2])
    if spec is None or spec.origin is None:
        raise ImportError(f"{argv[2]} is not installed where the warm server runs")
    sys.argv = [spec.origin, *argv[3:]]  # as `python -m ipykernel_launcher` has it
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize(sys.argv[1:])
    import ipywidgets

    ipywidgets._handle_ipython()  # what importing it in a kernel does: register its comm target with the kernel
    app.start()


def _mount_notebook_files(libc, request: dict) -> None:
    """The notebook's writable places and its channel folder; the server's folder and other channels unseen.

    The server's read-only binds that live under a writable place (a course cloned under /tmp, its venv) would
    disappear under the notebook's tmpfs: they are set aside first and bound again on top of it, read-only, as
    ``sandbox.bwrap_command`` binds them after the tmpfs."""
    uid, channel, channels = request["uid"], request["channel"], request["channels"]
    places = ("/tmp", "/var/tmp", "/dev/shm", sandbox.HOME)
    os.umask(0o022)  # the folders made here must be enterable by the notebook's uid (the grader's umask is 077)
    sandbox.mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE)
    sandbox.mount(libc, "tmpfs", STAGE, "tmpfs", _MS_NOSUID | _MS_NODEV,
                  f"mode=0755,size={request['tmp_mb']}m,nr_inodes={sandbox.TMP_INODES}")
    os.mkdir(f"{STAGE}/tmp", 0o1777)
    os.chmod(f"{STAGE}/tmp", 0o1777)
    os.mkdir(f"{STAGE}/channel", 0o755)
    sandbox.mount(libc, channel, f"{STAGE}/channel", None, _MS_BIND)
    sandbox.seed_home(Path(f"{STAGE}/home"), uid, _FONTS)
    if libc.umount2(SERVER_DIR.encode(), _MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), "could not hide the warm server's folder")
    below = [m for m in _mount_points() if any(m.startswith(p + "/") for p in places)
             and m != channels and not m.startswith(channels + "/")]
    for i, path in enumerate(below):  # set aside, in mount order (a folder before what is bound inside it)
        os.mkdir(f"{STAGE}/kept-{i}", 0o755)
        sandbox.mount(libc, path, f"{STAGE}/kept-{i}", None, _MS_BIND)
    for place in ("/tmp", "/var/tmp", "/dev/shm"):
        sandbox.mount(libc, f"{STAGE}/tmp", place, None, _MS_BIND)
    sandbox.mount(libc, f"{STAGE}/home", sandbox.HOME, None, _MS_BIND)
    for i, path in enumerate(below):
        os.makedirs(path, mode=0o755, exist_ok=True)
        sandbox.mount(libc, f"{STAGE}/kept-{i}", path, None, _MS_BIND)
        sandbox.mount(libc, None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
        libc.umount2(f"{STAGE}/kept-{i}".encode(), _MNT_DETACH)
        os.rmdir(f"{STAGE}/kept-{i}")
    if os.path.isdir(channels):  # not under the places above: hide every channel folder
        sandbox.mount(libc, "tmpfs", channels, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
    os.makedirs(channel, mode=0o755, exist_ok=True)
    sandbox.mount(libc, f"{STAGE}/channel", channel, None, _MS_BIND)


def _mount_points() -> list:
    """This mount namespace's mount points, in mount order."""
    def unescape(field):  # mountinfo writes a space as \040, and so on
        return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)

    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        return [unescape(line.split()[4]) for line in fh]


def _libc():
    libc = sandbox.libc()
    libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
    return libc


def _loopback_up() -> None:
    """Bring up ``lo`` in the new network namespace, as bubblewrap does (only loopback; no route out)."""
    import fcntl

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), siocgifflags, ifreq))[1]
        fcntl.ioctl(s.fileno(), siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))

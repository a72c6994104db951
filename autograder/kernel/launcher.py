"""Kernel launcher for grading untrusted notebooks: ``python -m autograder.kernel.launcher -f CONNECTION_FILE``.

It runs as a program of its own from the kernel library, beside the kernel, where it can import nothing but
``autograder.kernel`` (its building blocks are in ``sandbox.py``; the warm server in ``warm_kernels.py``).

The grading course's kernelspec (``autograder-sandbox``, written by ``install_kernelspec``) starts every kernel
through this module. How much it can isolate depends on who runs the grader (``isolation_level``):

``uid`` (run as root: CI, a grading server, a container). ``SafeExecute`` gives each notebook a uid that no
other live process uses, a private folder holding the kernel's connection file and its IPC sockets, and passes
``--uid``. The launcher then

1. creates the notebook's control group (``autograder/kernel/cgroups.py``: memory including tmpfs pages and
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
(``autograder/kernel/warm_kernels.py``) for the kernel instead of steps 2-4. The server runs in this module's bubblewrap file
system (``bwrap_command`` without a notebook's writable places) and builds the same namespaces, tmpfs, uid and limits
for each notebook in a forked process that already imported ipykernel, numpy and matplotlib; the launcher still
creates the control group and moves the notebook into it. When the server cannot be reached, the steps above run.

``userns`` (not root, but bubblewrap can use unprivileged user namespaces): the same namespaces, file system and
tmpfs (mounted in a user namespace of the launcher's own), bubblewrap's root and ``/dev`` read-only, and inside, in
the kernel's own user namespace, the same limits (``--inside``; the process count is then the namespace's own),
but no separate uid; the IPC namespace is one the launcher made with limits (``sandbox.private_ipc``), and the
kernel runs on one CPU that it cannot change (``autograder/kernel/one_cpu.py``). The launcher stays the kernel's
parent and watches its memory and processes (``autograder/kernel/watchdog.py``; the kernel tells it of every
refused process or thread over a pipe), and makes it a control group where systemd delegated a subtree to the
user. ``none`` (no bubblewrap): the same limits, one CPU, the watch and the control group where there is one, in a
user namespace and an IPC namespace of its own where the machine allows them; the kernel can read and write what
the user running the grader can. The report says which bounds held.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from autograder.kernel import one_cpu, syscall_filter, watchdog
from autograder.kernel.sandbox import (HOME, KERNEL_CPUS, KERNEL_LIBRARY, MAX_PROCS, TMP_INODES, TMP_MB,
                                       _private_tmpfs, bwrap_command, cgroup_name, clean_env, font_caches, ipc_limits,
                                       kernel_argv, kernel_python, libc, own_user_namespace, private_cgroup_name,
                                       private_ipc, seed_home, set_limits)


_PR_SET_PDEATHSIG = 1


def _launch_isolated(args, kernel_args, grader: int) -> None:
    """Root: control group, limited tmpfs, then bubblewrap running ``--drop-to`` inside. ``grader``: the pid of the
    grading process that asked for this kernel (0: unknown); a kernel is started cold only while it runs (a grader
    killed before its kernel started would leave a kernel no one uses, which bubblewrap's ``--die-with-parent``
    cannot catch once the parent is gone)."""
    from autograder.kernel import cgroups, uids

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
        cgroups.create(cgroup_name(uid), memory_bytes=args.memory_mb << 20, pids=MAX_PROCS, cpus=KERNEL_CPUS)
        cgroups.join(cgroup_name(uid), os.getpid())
    except OSError:
        pass  # no writable cgroup file system: the grader reports it; per-process limits still apply
    _private_tmpfs(scratch, size_mb=args.tmp_mb, inodes=TMP_INODES)
    os.makedirs(f"{scratch}/tmp", mode=0o1777)
    os.chmod(f"{scratch}/tmp", 0o1777)
    seed_home(Path(scratch) / "home", uid, font_caches())
    cmd = bwrap_command(library=args.library, scratch=scratch, channel=channel, isolation="uid")
    python = kernel_python()
    cmd += ["--", python, "-m", "autograder.kernel.launcher", "--inside", "--drop-to", str(uid), "--memory-mb",
            str(args.memory_mb), "--max-output", str(args.max_output), "-f", conn, *kernel_args]
    env = clean_env(HOME, KERNEL_LIBRARY)
    os.execve(cmd[0], cmd, env)


def _launch_warm(args, kernel_args, server: str) -> None:
    """Root: the kernel from the warm kernel server (``autograder/kernel/warm_kernels.py``); exits with the kernel's
    status. Returns only when the server cannot be reached (the kernel then starts cold)."""
    from autograder.kernel import warm_kernels

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


def _start_inside(args, kernel_args) -> None:
    """Inside bubblewrap: the limits, then (root in the new namespaces) the notebook's uid, then ipykernel. The
    process count is the namespace's own: the notebook's uid (root) or its user namespace (not root)."""
    set_limits(args.memory_mb, max_procs=MAX_PROCS)
    refusals = None if args.refusals_fd is None else (args.refusals_fd, watchdog.PROCESSES)
    uid = args.drop_to
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if os.getuid() != uid or os.geteuid() != uid or os.getgid() != uid:
            raise SystemExit("could not drop privileges")
    syscall_filter.install()  # not root: bubblewrap started under it already (``_launch_unprivileged``)
    _exec_kernel(kernel_argv(sys.executable, args.connection_file, args.max_output, kernel_args, refusals=refusals),
                 dict(os.environ))


def _launch_unprivileged(args, kernel_args) -> int:
    """Not root: the kernel below a watch over its memory and processes (``autograder/kernel/watchdog.py``), in a
    control group of its own where the user has a delegated one (``autograder/kernel/cgroups.py``).
    ``userns``: a limited tmpfs in a user namespace of the launcher's own, then bubblewrap (with a user namespace
    of the kernel's own) running ``--inside``. ``none``: the kernel itself, in a user namespace of its own where
    the machine allows one (so that its process count is its own), with the same limits."""
    from autograder.kernel import cgroups

    conn = os.path.abspath(args.connection_file)
    channel = os.path.dirname(conn)
    private = os.path.dirname(channel)
    refusals, told = os.pipe()  # the kernel tells the watch of every process or thread refused it
    cpu, claimed = one_cpu.claim()  # the kernel's one CPU, held by this process while the kernel runs
    os.set_inheritable(told, True)
    try:  # where systemd delegated a cgroup v2 subtree to the user
        cgroups.create(private_cgroup_name(private), memory_bytes=args.memory_mb << 20, pids=MAX_PROCS,
                       cpus=KERNEL_CPUS)
        cgroups.join(private_cgroup_name(private), os.getpid())
    except OSError:
        pass  # none: the watch and the limits bound the kernel; the report says which
    if args.isolation == "userns":
        scratch = os.path.join(private, "scratch")
        _private_tmpfs(scratch, size_mb=args.tmp_mb, inodes=TMP_INODES)
        private_ipc(libc(), ipc_limits(args.memory_mb << 20))  # the kernel's, with bubblewrap's user namespace
        os.makedirs(f"{scratch}/tmp", mode=0o1777)
        os.chmod(f"{scratch}/tmp", 0o1777)
        seed_home(Path(scratch) / "home", None, font_caches())
        cmd = bwrap_command(library=args.library, scratch=scratch, channel=channel, isolation="userns")
        cmd += ["--", kernel_python(), "-m", "autograder.kernel.launcher", "--inside", "--memory-mb",
                str(args.memory_mb), "--max-output", str(args.max_output), "--refusals-fd", str(told),
                "-f", conn, *kernel_args]
        env = clean_env(HOME, KERNEL_LIBRARY)

        def start():
            # Bubblewrap's pid 1 has the kernel's uid here, so the kernel could reach into it (a ptrace, a write to
            # its /proc/1/mem): every bound is in place before bubblewrap starts, and inherited by all it starts.
            # The process count here is that of the launcher's user namespace: the launcher, this process (then
            # bubblewrap) and the kernel's namespace, pid 1 included, which inside is held to ``MAX_PROCS`` again.
            set_limits(args.memory_mb, max_procs=MAX_PROCS + 2)
            one_cpu.hold(cpu)
            _exec_kernel(cmd, env)
    else:
        def start():
            libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the kernel ends with the launcher
            try:
                own_user_namespace()
                private_ipc(libc(), ipc_limits(args.memory_mb << 20))
                procs = MAX_PROCS
            except OSError:  # no user namespaces here: the report says the process count and IPC were not bounded
                procs = None
            set_limits(args.memory_mb, max_procs=procs)
            one_cpu.hold(cpu)
            _exec_kernel(kernel_argv(sys.executable, conn, args.max_output, kernel_args,
                                     refusals=(told, watchdog.PROCESSES)),
                         clean_env(os.environ.get("HOME", "/tmp"), args.library or ""))
    try:
        return watchdog.run(start, memory_bytes=args.memory_mb << 20, max_procs=MAX_PROCS,
                            events=os.path.join(private, watchdog.EVENTS), refusals=refusals)
    finally:
        if claimed is not None:
            claimed.close()


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
    parser.add_argument("--tmp-mb", type=int, default=TMP_MB, help="size of the kernel's tmpfs")
    parser.add_argument("--library", default=None, help="folder of the modules kernels may import")
    parser.add_argument("--isolation", choices=("uid", "userns", "none"), default="none")
    parser.add_argument("--uid", type=int, default=None, help="this notebook's sandbox uid (isolation 'uid')")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)  # run inside bubblewrap
    parser.add_argument("--drop-to", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--refusals-fd", type=int, default=None, help=argparse.SUPPRESS)  # the watch's pipe
    # the warm kernel server (autograder/kernel/warm_kernels.py): started outside, then serving inside its bubblewrap
    parser.add_argument("--start-warm-server", default=None, help=argparse.SUPPRESS)  # the server's folder
    parser.add_argument("--channels", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--warm-server", default=None, help=argparse.SUPPRESS)  # its socket
    parser.add_argument("--lifeline", type=int, default=None, help=argparse.SUPPRESS)
    args, kernel_args = parser.parse_known_args(argv)
    if args.start_warm_server is not None or args.warm_server is not None:
        from autograder.kernel import warm_kernels

        if args.warm_server is not None:
            return warm_kernels.serve(args.warm_server, args.lifeline)
        return warm_kernels.start(args.start_warm_server, channels=args.channels, library=args.library,
                                  lifeline=args.lifeline)
    if args.connection_file is None:
        parser.error("the kernel's connection file (-f) is required")
    if args.inside:
        return _start_inside(args, kernel_args)
    if args.isolation == "uid":
        if args.uid is None or os.geteuid() != 0:
            raise SystemExit("isolation 'uid' needs root and a --uid from the grader")
        # jupyter_client names the process that started this launcher (the grading worker) in JPY_PARENT_PID
        return _launch_isolated(args, kernel_args, int(os.environ.get("JPY_PARENT_PID") or 0))
    sys.exit(_launch_unprivileged(args, kernel_args))

if __name__ == "__main__":
    main()

"""One CPU for a kernel that no control group bounds (grading as an ordinary user).

Root gives each kernel a control group with a CPU share of one CPU (``cgroups.py``); an ordinary user, as a rule,
has no control group to give. So the launcher ``claim``s a CPU for the kernel: the first of the CPUs it may run on
that no other kernel of the same user holds (each claim is an abstract Unix socket named after the user and the
CPU, bound for the launcher's life and released however the launcher ends); when every CPU is held, one of them by
the launcher's pid. Then, in the process that becomes the kernel (inside bubblewrap, once bubblewrap has set up,
which the filter's no-new-privileges must not constrain), ``hold`` pins it to that CPU (``sched_setaffinity``,
which every process and thread it starts inherits) and installs a seccomp filter under which neither it nor
anything it starts may change its CPUs again: ``sched_setaffinity`` fails with ``EPERM``, as does every system call
of another architecture (a 32-bit call on a 64-bit machine), which a kernel has no use for. However many processes a
notebook starts, together they run on one CPU, and grading the class beside them goes on.

The same filter refuses the kernel keyring's calls, on every kernel (root's too, ``refuse``). It is a classic BPF
program of under a dozen instructions, written here (``_filter``) for the two
architectures the course is graded on (x86-64 and arm64); on another, ``hold`` pins without the filter and
``can_hold`` says so, so that the report does not claim the bound.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import socket

# Linux's constants: <linux/audit.h>, <asm/unistd.h>, <linux/seccomp.h>, <linux/filter.h>, <linux/prctl.h>
# (AUDIT_ARCH, the calls refused: sched_setaffinity, add_key, request_key, keyctl; the x32 call bit or 0)
_ARCHES = {"x86_64": (0xC000003E, (203, 248, 249, 250), 0x40000000),
           "aarch64": (0xC00000B7, (122, 217, 218, 219), 0)}
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_NR_OFFSET, _ARCH_OFFSET = 0, 4  # of struct seccomp_data
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _PR_SET_NO_NEW_PRIVS = 22, 2, 38


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def can_hold() -> bool:
    """True where ``hold`` can keep a kernel from changing its CPUs (the filter is written for this architecture)."""
    return platform.machine() in _ARCHES


def claim(uid: int | None = None) -> tuple:
    """(the CPU for a kernel, the claim: keep it open for the kernel's life; None when every CPU was held)."""
    uid = os.getuid() if uid is None else uid
    cpus = sorted(os.sched_getaffinity(0))
    for cpu in cpus:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(f"\0mha-course-cpu-{uid}-{cpu}")  # abstract: no file, gone with the last process holding it
            return cpu, sock
        except OSError:
            sock.close()
    return cpus[os.getpid() % len(cpus)], None


def _filter(arch: int, refused: tuple, foreign_bit: int) -> list:
    """The seccomp program: another architecture's calls, the ``refused`` ones (and, on x86-64, every x32 call)
    fail with EPERM; everything else is allowed."""
    deny = (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM)
    program = [(_LD_W_ABS, 0, 0, _ARCH_OFFSET),
               (_JEQ_K, 0, 0, arch),  # jf: to deny, filled in below
               (_LD_W_ABS, 0, 0, _NR_OFFSET)]
    program += [(_JEQ_K, 0, 0, nr) for nr in refused]  # jt: to deny, filled in below
    if foreign_bit:
        program.append((_JGE_K, 0, 0, foreign_bit))  # jt: to deny
    program += [(_RET_K, 0, 0, _RET_ALLOW), deny]
    last = len(program) - 1
    for i, (code, jt, jf, k) in enumerate(program):
        if code == _JEQ_K and i == 1:
            program[i] = (code, 0, last - i - 1, k)
        elif code in (_JEQ_K, _JGE_K):
            program[i] = (code, last - i - 1, 0, k)
    return program


def hold(cpu: int) -> None:
    """Pin this process to ``cpu`` and, where ``can_hold``, forbid it and all it starts to change that (no new
    privileges, then the seccomp filter, ``refuse``). Raises OSError when the machine refuses."""
    os.sched_setaffinity(0, {cpu})
    refuse()


def refuse() -> None:
    """Where ``can_hold``: no new privileges, then the seccomp filter, for this process and all it starts:
    ``sched_setaffinity`` fails, and so do the kernel keyring's calls (``add_key``, ``request_key``, ``keyctl``):
    keyrings belong to a uid, not to a namespace, so a key a kernel made would outlive it under its uid (Docker's
    default profile refuses them for the same reason; nothing a lesson runs uses them). Raises OSError when the
    machine refuses."""
    if not can_hold():
        return
    program = _filter(*_ARCHES[platform.machine()])
    instructions = (_Instruction * len(program))(*[_Instruction(*step) for step in program])
    libc = ctypes.CDLL(None, use_errno=True)
    for args in ((_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
                 (_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER,
                  ctypes.cast(ctypes.pointer(_Program(len(program), instructions)), ctypes.c_void_p), 0, 0)):
        if libc.prctl(*[ctypes.c_ulong(a) if isinstance(a, int) else a for a in args]) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl: {os.strerror(err)}")

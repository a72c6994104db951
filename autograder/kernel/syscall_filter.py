"""A seccomp filter that refuses a kernel a few system calls, for it and everything it starts.

Installed once, it cannot be removed or widened, and every process and thread started below it inherits it. It
refuses (``EPERM``) only what a kernel has no use for and a notebook could turn against the machine or another
process:

* ``KEYRINGS``: ``add_key``, ``request_key``, ``keyctl``. The kernel's keyrings are not namespaced: keys a sandbox
  uid makes outlive its kernel (root), and an ordinary user's kernel would reach the grader's session keyring;
* ``OTHER_PROCESSES``: ``ptrace``, ``process_vm_readv``, ``process_vm_writev`` and ``pidfd_getfd``: a kernel reaches
  into no other process, not even bubblewrap's pid 1, which has the kernel's uid when an ordinary user grades;
* ``sched_setaffinity`` where the kernel is held to one CPU (``autograder/kernel/one_cpu.py``);
* every system call of another architecture (a 32-bit call on a 64-bit machine, x32 on x86-64), by which the
  numbers above could be reached under other numbers.

A classic BPF program, written here (``program``) for the two architectures the course is graded on (x86-64 and
arm64); elsewhere ``install`` does nothing and ``available`` says so, so that the report does not claim the bound.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

KEYRINGS = ("add_key", "request_key", "keyctl")
OTHER_PROCESSES = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd")
KERNEL = KEYRINGS + OTHER_PROCESSES  # what every graded kernel is refused

# Linux's constants: <linux/audit.h>, <asm/unistd.h>, <linux/seccomp.h>, <linux/filter.h>, <linux/prctl.h>
_ARCHES = {"x86_64": (0xC000003E, 0x40000000,  # (AUDIT_ARCH, the x32 call bit or 0, system call numbers)
                      {"sched_setaffinity": 203, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
                       "pidfd_getfd": 438, "add_key": 248, "request_key": 249, "keyctl": 250}),
           "aarch64": (0xC00000B7, 0,
                       {"sched_setaffinity": 122, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
                        "pidfd_getfd": 438, "add_key": 217, "request_key": 218, "keyctl": 219})}
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_NR_OFFSET, _ARCH_OFFSET = 0, 4  # of struct seccomp_data
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _PR_SET_NO_NEW_PRIVS = 22, 2, 38


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def available() -> bool:
    """True where ``install`` installs the filter (it is written for this machine's architecture)."""
    return platform.machine() in _ARCHES


def program(machine: str, refused) -> list:
    """The filter for ``machine`` as (code, jt, jf, k) instructions: another architecture's calls and ``refused``
    (names) fail with EPERM; everything else is allowed."""
    arch, foreign_bit, numbers = _ARCHES[machine]
    tests = [(_JEQ_K, numbers[name]) for name in sorted(set(refused))]
    if foreign_bit:
        tests.append((_JGE_K, foreign_bit))
    steps = [(_LD_W_ABS, 0, 0, _ARCH_OFFSET), (_JEQ_K, 0, len(tests) + 2, arch), (_LD_W_ABS, 0, 0, _NR_OFFSET)]
    for i, (code, k) in enumerate(tests):  # each jumps, when true, over the rest and the allow to the deny
        steps.append((code, len(tests) - i, 0, k))
    return steps + [(_RET_K, 0, 0, _RET_ALLOW), (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM)]


def install(refused=KERNEL) -> None:
    """Refuse ``refused`` (names) to this process and all it starts from now on (no new privileges first, which a
    filter needs without CAP_SYS_ADMIN). Does nothing where not ``available``; raises OSError when the machine
    refuses the filter."""
    if not available():
        return
    steps = program(platform.machine(), refused)
    instructions = (_Instruction * len(steps))(*[_Instruction(*step) for step in steps])
    libc = ctypes.CDLL(None, use_errno=True)
    for args in ((_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
                 (_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER,
                  ctypes.cast(ctypes.pointer(_Program(len(steps), instructions)), ctypes.c_void_p), 0, 0)):
        if libc.prctl(*[ctypes.c_ulong(a) if isinstance(a, int) else a for a in args]) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl: {os.strerror(err)}")

"""Kernel-enforced limits on the candidate worker, installed just before the submission is imported.

A seccomp filter (all threads, ``TSYNC``) refuses, for the rest of the worker's life:

* new processes: ``fork``/``vfork``, ``clone`` without ``CLONE_THREAD`` (threads stay allowed), ``execve``
  (``clone3`` answers ``ENOSYS`` so the C library falls back to ``clone``, whose flags the filter can read);
* touching other processes: ``ptrace``, ``process_vm_readv``/``writev``, and any signal (``kill``,
  ``tgkill``, ``tkill``, ``rt_sigqueueinfo``, ``pidfd_send_signal``) not aimed at the worker itself or its group;
* the network: ``socket`` for ``AF_INET``, ``AF_INET6`` and ``AF_PACKET``;
* leaving the timing thread budget: ``sched_setaffinity`` (the judge spawned the worker on ``threads`` CPUs,
  ``workers.cpu_budget``; the mask is behind a pointer the filter cannot read, so narrowing is refused too; on
  NPUs, where processes stay allowed, it stays allowed too and no budget is set);
* every other door into the kernel that the rules above cannot see through: any syscall of a foreign ABI
  (``seccomp_data.arch`` other than the native one: on x86-64 ``int $0x80`` reaches the i386 table, where
  ``fork``, ``execve`` and ``socketcall`` have other numbers), the x32 numbers (bit 30 set on x86-64), and
  ``io_uring_setup``/``io_uring_enter``/``io_uring_register`` (a ring performs opens, sockets and connects that
  no syscall filter sees);
* memory served by the worker itself: ``userfaultfd`` and its ioctls (a page filled by the submission when first
  touched would move its kernel out of the timed call into the worker's copy of the outputs).

Once the submission is imported, :func:`install_fault_filter` stacks a second filter refusing new handlers for
memory-fault signals (``SIGSEGV``, ``SIGBUS``, ``SIGILL``, ``SIGFPE``, ``SIGTRAP``), after
:func:`reset_fault_handlers` dropped any the import installed: the same trick with ``mprotect`` and a handler.

This is below Python and ctypes: C++ in a submission meets the same wall. Resource limits cap the size of
any file the worker writes (its log included) and disable core dumps. Where seccomp is unavailable (another
architecture, an old kernel) the worker says so in its log and the judge's own /proc checks still apply.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import platform
import resource
import signal
import struct
from collections.abc import Callable

FILE_SIZE_LIMIT = 1 << 30  # a runaway log or scratch file ends the worker (SIGXFSZ), not the disk

# struct seccomp_data: nr (u32), arch (u32), ip (u64), args[6] (u64); little-endian low words of args.
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24
_LD_W_ABS, _JEQ_K, _JSET_K, _RET_K, _AND_K = 0x20, 0x15, 0x45, 0x06, 0x54
_ARG1_HIGH = 28
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
EPERM, EACCES, ENOSYS = 1, 13, 38
X32_SYSCALL_BIT = 0x40000000
IO_URING = ("io_uring_setup", "io_uring_enter", "io_uring_register")
CLONE_THREAD = 0x00010000
AF_INET, AF_INET6, AF_PACKET = 2, 10, 17
UFFDIO_TYPE = 0xAA00  # the ioctl "type" byte of every UFFDIO_* request, in bits 8-15 of the command
FAULT_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGTRAP)

# name -> syscall number, per architecture (audit arch value first).
_ARCHES = {
    "x86_64": (0xC000003E, {"fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "execve": 59, "execveat": 322,
                            "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kill": 62,
                            "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
                            "pidfd_send_signal": 424, "socket": 41, "seccomp": 317, "io_uring_setup": 425,
                            "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": 323, "ioctl": 16,
                            "rt_sigaction": 13, "sched_setaffinity": 203}),
    "aarch64": (0xC00000B7, {"clone": 220, "clone3": 435, "execve": 221, "execveat": 281, "ptrace": 117,
                             "process_vm_readv": 270, "process_vm_writev": 271, "kill": 129, "tkill": 130,
                             "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
                             "pidfd_send_signal": 424, "socket": 198, "seccomp": 277, "io_uring_setup": 425,
                             "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": 282, "ioctl": 29,
                             "rt_sigaction": 134, "sched_setaffinity": 122}),
}


def _stmt(code: int, k: int) -> bytes:
    return struct.pack("HBBI", code, 0, 0, k & 0xFFFFFFFF)


def _jump(code: int, k: int, jt: int, jf: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def build_program(arch_value: int, nr: dict[str, int], pid: int, allow_processes: bool) -> list[bytes]:
    """The BPF program as a list of 8-byte instructions (pure, so tests can read it)."""
    deny = _stmt(_RET_K, _ERRNO | EPERM)
    allow = _stmt(_RET_K, _ALLOW)
    # a foreign ABI (i386 through int $0x80, arm32 compat) has its own numbers the rules below cannot read
    prog = [_stmt(_LD_W_ABS, _ARCH), _jump(_JEQ_K, arch_value, 1, 0), deny, _stmt(_LD_W_ABS, _NR)]
    if arch_value == _ARCHES["x86_64"][0]:  # x32: the x86-64 table again, numbers offset by bit 30
        prog += [_jump(_JSET_K, X32_SYSCALL_BIT, 0, 1), deny]
    blocks: list[list[bytes]] = []  # each: "nr == X ? body : skip body"; every body ends in a return

    def syscall_block(name: str, body: list[bytes]) -> None:
        if name in nr:
            blocks.append([_jump(_JEQ_K, nr[name], 0, len(body))] + body)

    if not allow_processes:
        for name in ("fork", "vfork", "execve", "execveat"):
            syscall_block(name, [deny])
        syscall_block("clone3", [_stmt(_RET_K, _ERRNO | ENOSYS)])
        syscall_block("clone", [_stmt(_LD_W_ABS, _ARG0), _jump(_JSET_K, CLONE_THREAD, 0, 1), allow, deny])
        syscall_block("sched_setaffinity", [deny])  # an NPU runtime places its threads itself
    for name in ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_send_signal", "tkill", *IO_URING,
                 "userfaultfd"):
        syscall_block(name, [deny])
    # a userfaultfd opened through /dev/userfaultfd still needs its ioctls (UFFDIO_API, _REGISTER, _COPY)
    syscall_block("ioctl", [_stmt(_LD_W_ABS, _ARG1), _stmt(_AND_K, 0xFF00), _jump(_JEQ_K, UFFDIO_TYPE, 0, 1), deny,
                            allow])
    own = pid & 0xFFFFFFFF
    group = (-pid) & 0xFFFFFFFF
    # kill(pid, sig): itself, its own group (0 or -pid; the worker leads its session); everything else refused
    syscall_block("kill", [_stmt(_LD_W_ABS, _ARG0), _jump(_JEQ_K, own, 3, 0), _jump(_JEQ_K, 0, 2, 0),
                           _jump(_JEQ_K, group, 1, 0), deny, allow])
    for name in ("tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):  # tgid first: only its own threads
        syscall_block(name, [_stmt(_LD_W_ABS, _ARG0), _jump(_JEQ_K, own, 1, 0), deny, allow])
    syscall_block("socket", [_stmt(_LD_W_ABS, _ARG0), _jump(_JEQ_K, AF_INET, 3, 0), _jump(_JEQ_K, AF_INET6, 2, 0),
                             _jump(_JEQ_K, AF_PACKET, 1, 0), allow, _stmt(_RET_K, _ERRNO | EACCES)])
    for block in blocks:
        prog += block
    prog.append(allow)
    return prog


def processes_allowed(device: str) -> bool:
    """Whether a contained worker on ``device`` may start processes: an NPU's runtime starts its own. Elsewhere the
    filter refuses them, so the judge takes a contained worker's children for its compiler helper's
    (``workers.evidence``)."""
    return device.startswith("npu")


def install_filter(allow_processes: bool = False) -> str:
    """Install the filter on every thread of this process; returns a word for the log ("on" or why not)."""
    arch = _ARCHES.get(platform.machine())
    if arch is None:
        return f"unavailable (no syscall table for {platform.machine()})"
    arch_value, nr = arch
    prog = build_program(arch_value, nr, os.getpid(), allow_processes)
    why = _prepared(prog, nr["seccomp"])()
    if why:
        return f"unavailable ({why})"
    return ("on (seccomp: no processes, no foreign signals or tracing, no network, no foreign ABI, io_uring or "
            "userfaultfd, no CPU affinity change)")


def build_fault_program(arch_value: int, nr: dict[str, int]) -> list[bytes]:
    """The post-import filter: ``rt_sigaction`` may read, never set, the handler of a memory-fault signal."""
    deny = _stmt(_RET_K, _ERRNO | EPERM)
    allow = _stmt(_RET_K, _ALLOW)
    prog = [_stmt(_LD_W_ABS, _ARCH), _jump(_JEQ_K, arch_value, 1, 0), deny, _stmt(_LD_W_ABS, _NR),
            _jump(_JEQ_K, nr["rt_sigaction"], 1, 0), allow, _stmt(_LD_W_ABS, _ARG0)]
    signals = [int(s) for s in FAULT_SIGNALS]
    for i, sig in enumerate(signals):  # a fault signal jumps to the act check; any other is allowed
        prog.append(_jump(_JEQ_K, sig, len(signals) - i, 0))
    # act (the second argument) NULL, both halves: a query; anything else sets a handler
    prog += [allow, _stmt(_LD_W_ABS, _ARG1), _jump(_JEQ_K, 0, 0, 3), _stmt(_LD_W_ABS, _ARG1_HIGH),
             _jump(_JEQ_K, 0, 0, 1), allow, deny]
    return prog


def _prepared(prog: list[bytes], seccomp_nr: int) -> Callable[[], str | None]:
    """Install a BPF program on every thread when called; the call returns None, or why not. Every ctypes object
    is made now: the guard's audit hook, installed before the submission's import, refuses new ones."""
    blob = b"".join(prog)
    buf = ctypes.create_string_buffer(blob, len(blob))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.addressof(buf))
    fprog_ref = ctypes.byref(fprog)
    libc = ctypes.CDLL(None, use_errno=True)
    prctl, syscall = libc.prctl, libc.syscall
    syscall.restype = ctypes.c_long
    args = (ctypes.c_long(seccomp_nr), ctypes.c_uint(1), ctypes.c_uint(1))

    def install() -> str | None:
        keep = (buf, fprog)  # alive as long as the closure
        if prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            return f"no_new_privs: errno {ctypes.get_errno()}"
        # SECCOMP_SET_MODE_FILTER (1) with SECCOMP_FILTER_FLAG_TSYNC (1): torch's pool threads exist already
        if syscall(*args, fprog_ref) != 0:
            return f"seccomp: errno {ctypes.get_errno()}"
        del keep
        return None

    return install


SA_RESETHAND = 0x80000000
_SIGACTION_SIZE, _SA_FLAGS_AT = 152, 136  # glibc's struct sigaction on x86-64 and AArch64: handler, mask, flags


def prepare_fault_seal(contained: bool) -> Callable[[], str]:
    """Made before the guard's audit hook (no ctypes object may be made after it), called once the submission
    is imported: every memory-fault signal back to the default action and Python's fault handler installed
    again (its tracebacks in the log), so whatever handler the import set for them is gone; then, ``contained``,
    a filter on every thread refusing new ones. Returns a word for the log.

    The filter would also refuse the fault handler's own restore of the default action before it re-raises the
    signal (a crash would then loop in the handler), so its handlers are marked ``SA_RESETHAND``: the kernel
    restores the default as it delivers the signal."""
    arch = _ARCHES.get(platform.machine())
    install = _prepared(build_fault_program(*arch), arch[1]["seccomp"]) if contained and arch else None
    libc = ctypes.CDLL(None, use_errno=True)
    sigaction = libc.sigaction
    action = ctypes.create_string_buffer(_SIGACTION_SIZE)
    flags = ctypes.c_int.from_buffer(action, _SA_FLAGS_AT)

    def seal() -> str:
        faulthandler.disable()
        for sig in FAULT_SIGNALS:
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        faulthandler.enable()
        for sig in FAULT_SIGNALS:
            if sigaction(int(sig), None, action) == 0 and flags.value is not None:
                flags.value |= SA_RESETHAND - (1 << 32)  # the flag is bit 31 of a C int
                sigaction(int(sig), action, None)
        if not contained:
            return "reset (not contained: new ones are not refused)"
        if install is None:
            return f"reset, not sealed (no syscall table for {platform.machine()})"
        why = install()
        return f"reset, not sealed ({why})" if why else \
            "reset and sealed (seccomp: no new handler for SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP)"

    return seal


def limit_resources() -> None:
    for limit, value in ((resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT), (resource.RLIMIT_CORE, 0)):
        try:
            _soft, hard = resource.getrlimit(limit)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (cap, hard))
        except (ValueError, OSError):
            pass

"""The judge samples a worker's instruction pointers with perf_event_open(2), from outside the worker.

Evidence the submission cannot switch off: the events belong to the judge (the worker holds no descriptor of
them, and ``prctl(PR_TASK_PERF_EVENTS_DISABLE)`` reaches only events a task owns itself), the kernel takes the
samples on a timer interrupt, and whatever dispatch path a submission uses (profiler off, ``redispatch``,
``at::cpu::*`` called directly), its CPU time shows up where the code runs. Attribution to mapped objects is
``perf_profile``'s job; this module opens, arms, drains and parses.

The event is the software CPU clock (works in VMs without a PMU), one per online CPU per thread that exists at
open time, ``inherit=1`` so threads created later (OpenMP pools, a thread of the submission) are sampled too. The
kernel refuses to mmap inherited per-task events that follow the task across CPUs (``cpu=-1``), hence one event per
CPU; every event on a CPU writes into that CPU's one ring buffer (``PERF_EVENT_IOC_SET_OUTPUT``), so the buffer
fills at most as fast as one CPU runs, whatever the number of threads. A daemon thread drains the buffers while
a call runs, so long timing batches lose nothing.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import platform
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cannbench.guard.perf_profile import CallProfile, attribute, read_maps

SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_SAMPLE_IP = 1 << 0
PERF_SAMPLE_TID = 1 << 1
PERF_FLAG_FD_CLOEXEC = 1 << 3
FLAG_DISABLED, FLAG_INHERIT, FLAG_EXCLUDE_KERNEL, FLAG_EXCLUDE_HV = 1 << 0, 1 << 1, 1 << 5, 1 << 6
IOC_ENABLE, IOC_DISABLE, IOC_RESET, IOC_SET_OUTPUT = 0x2400, 0x2401, 0x2403, 0x2405
RECORD_LOST, RECORD_SAMPLE = 2, 9
MISC_CPUMODE_MASK, MISC_KERNEL = 0x7, 1
# perf_event_attr as of PERF_ATTR_SIZE_VER5 (Linux 4.1): type, size, config, sample_period, sample_type,
# read_format, the flag bits, wakeup_events, bp_type, config1, config2, branch_sample_type, sample_regs_user,
# sample_stack_user, clockid, sample_regs_intr, aux_watermark, sample_max_stack, reserved
ATTR = struct.Struct("=IIQQQQQIIQQQQIiQIHH")
HEADER = struct.Struct("=IHH")
SAMPLE = struct.Struct("=QII")  # PERF_SAMPLE_IP | PERF_SAMPLE_TID: ip, pid, tid
LOST = struct.Struct("=QQ")  # id, lost
META_HEAD = 1024  # perf_event_mmap_page: data_head, data_tail, data_offset, data_size
META = struct.Struct("=QQQQ")

# 1 ms of CPU between samples. A sample costs one timer interrupt: about 1-2 us on bare metal, but 21 us in this
# project's VMs (measured with `perf record` and benchmarks/perf_profile.py alike: the hypervisor's timer),
# where 250 us costs a busy thread 9% and 1 ms costs 2%. A case's calls are judged together (CallProfile.merge),
# and 30 work samples, 30 ms of CPU, make a verdict; pass a shorter period where sampling is cheap.
DEFAULT_PERIOD_NS = 1_000_000
DEFAULT_PAGES = 32  # data pages per CPU: 128 KiB, 5000 samples, 5 s of one busy CPU between two drains
DRAIN_INTERVAL_S = 0.1


@dataclass(frozen=True)
class Unavailable:
    """Why the judge could not sample: the evidence is missing, never a verdict on the submission."""

    reason: str
    errno: int = 0


@dataclass
class RawSamples:
    """Samples as the ring buffers gave them, before attribution: (pid, ip, kernel mode) -> count.

    The pid is the process's (in the judge's pid namespace), so each sample is attributed with the maps of the
    process it came from: the worker under a sandbox launcher that forks it is sampled through the launcher."""

    ips: Counter[tuple[int, int, bool]] = field(default_factory=Counter)
    tids: set[int] = field(default_factory=set)
    lost: int = 0

    @property
    def total(self) -> int:
        return sum(self.ips.values())

    @property
    def pids(self) -> set[int]:
        return {pid for pid, _ip, _kernel in self.ips}


def seccomp_filtered(pid: int) -> bool:
    """Whether the process runs under a seccomp filter (``Seccomp: 2`` in /proc/<pid>/status): read by the judge,
    not told by the worker. False when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return any(line.split(":", 1)[1].strip() == "2" for line in fh if line.startswith("Seccomp:"))
    except OSError:
        return False


def sample_attr(period_ns: int = DEFAULT_PERIOD_NS, *, exclude_kernel: bool = False) -> bytes:
    """The packed perf_event_attr: CPU clock, IP|TID samples, started disabled, inherited by new threads."""
    flags = FLAG_DISABLED | FLAG_INHERIT | (FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV if exclude_kernel else 0)
    return ATTR.pack(PERF_TYPE_SOFTWARE, ATTR.size, PERF_COUNT_SW_CPU_CLOCK, period_ns,
                     PERF_SAMPLE_IP | PERF_SAMPLE_TID, 0, flags, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


_libc: ctypes.CDLL | None = None


def open_event(attr: bytes, pid: int, cpu: int, group_fd: int = -1) -> int | Unavailable:
    """One perf_event_open(2); the errno as an Unavailable instead of an exception."""
    global _libc
    number = SYS_PERF_EVENT_OPEN.get(platform.machine())
    if number is None:
        return Unavailable(f"perf_event_open: no syscall number for {platform.machine()}")
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(ctypes.c_long(number), buf, ctypes.c_int(pid), ctypes.c_int(cpu), ctypes.c_int(group_fd),
                       ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        code = ctypes.get_errno()
        return Unavailable(f"perf_event_open(pid={pid}, cpu={cpu}): {errno.errorcode.get(code, code)} "
                           f"{os.strerror(code)}{_paranoid_hint(code)}", code)
    return int(fd)


def _paranoid_hint(code: int) -> str:
    if code not in (errno.EACCES, errno.EPERM):
        return ""
    try:
        level = Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
    except OSError:
        return ""
    return f" (kernel.perf_event_paranoid = {level}; sampling another process needs CAP_PERFMON or a level <= 1)"


def online_cpus(text: str | None = None) -> list[int]:
    """``/sys/devices/system/cpu/online`` ("0-3,6") as a list."""
    if text is None:
        try:
            text = Path("/sys/devices/system/cpu/online").read_text()
        except OSError:
            return list(range(os.cpu_count() or 1))
    cpus: list[int] = []
    for part in text.strip().split(","):
        if part:
            low, _, high = part.partition("-")
            cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def parse_records(data: bytes, raw: RawSamples) -> int:
    """Fold whole records of ``data`` (a linear copy of ring-buffer bytes) into ``raw``; returns bytes used.

    A record cut off at the end is left for the next read. Types other than SAMPLE and LOST (throttling) are
    skipped by their size; a size under the header's ends the parse (a corrupt buffer never loops)."""
    pos, end = 0, len(data)
    while end - pos >= HEADER.size:
        kind, misc, size = HEADER.unpack_from(data, pos)
        if size < HEADER.size:
            return end
        if end - pos < size:
            break
        body = pos + HEADER.size
        if kind == RECORD_SAMPLE and size >= HEADER.size + SAMPLE.size:
            ip, pid, tid = SAMPLE.unpack_from(data, body)
            raw.ips[(pid, ip, misc & MISC_CPUMODE_MASK == MISC_KERNEL)] += 1
            raw.tids.add(tid)
        elif kind == RECORD_LOST and size >= HEADER.size + LOST.size:
            raw.lost += LOST.unpack_from(data, body)[1]
        pos += size
    return pos


class RingBuffer:
    """One CPU's mmapped buffer: the metadata page, then 2^n data pages the kernel writes at data_head."""

    def __init__(self, fd: int, pages: int) -> None:
        page = mmap.PAGESIZE
        self.map = mmap.mmap(fd, (1 + pages) * page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        _head, _tail, offset, size = META.unpack_from(self.map, META_HEAD)
        self.offset: int = offset if size else page  # pre-4.1 kernels leave them 0: the defaults
        self.size: int = size or pages * page

    def drain(self, raw: RawSamples) -> None:
        """Parse what the kernel wrote since the last drain, then move data_tail so it can write again.

        Python has no read barrier: on x86-64 (TSO) the records below data_head are complete when it is read; on
        AArch64 a drain while the events run could read a record not yet visible, which the parser skips or
        misattributes (one sample); the drain after the disable ioctl is ordered by the syscall."""
        head, tail = struct.unpack_from("=QQ", self.map, META_HEAD)
        if head == tail:
            return
        if head - tail > self.size:  # cannot happen while we write data_tail; a corrupt page is lost data
            raw.lost += 1
            tail = head
        start, length = tail % self.size, head - tail
        first = min(length, self.size - start)
        chunk = self.map[self.offset + start:self.offset + start + first]
        if first < length:  # the records wrap around the end of the buffer
            chunk += self.map[self.offset:self.offset + length - first]
        used = parse_records(chunk, raw)
        struct.pack_into("=Q", self.map, META_HEAD + 8, tail + used)

    def close(self) -> None:
        self.map.close()


@dataclass
class CallSampler:
    """The judge's sampler of one worker: open once right after the spawn, arm/collect around every call.

    ``own`` are the directories whose objects are the submission's own code (its private install);
    ``children_are_toolchain``: the worker may start no process, so its children are its compiler helper's."""

    pid: int
    own: tuple[str, ...] = ()
    period_ns: int = DEFAULT_PERIOD_NS
    children_are_toolchain: bool = False
    filtered: bool = False  # the worker was seen under a seccomp filter (seccomp_filtered)
    fds: list[int] = field(default_factory=list)
    buffers: list[RingBuffer] = field(default_factory=list)
    exclude_kernel: bool = False
    raw: RawSamples = field(default_factory=RawSamples)
    error: str = ""  # why the current window's samples cannot be trusted (an ioctl failed)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _armed: threading.Event = field(default_factory=threading.Event)
    _closed: threading.Event = field(default_factory=threading.Event)
    _drainer: threading.Thread | None = None

    @classmethod
    def open(cls, pid: int, own: tuple[str, ...] | list[str] = (), *, period_ns: int = DEFAULT_PERIOD_NS,
             pages: int = DEFAULT_PAGES, children_are_toolchain: bool = False) -> CallSampler | Unavailable:
        """Events on every thread ``pid`` has now (each inherited by the threads it makes later) on every CPU.

        Call it right after the spawn, or while the worker is frozen: a thread created between the listing of
        /proc/<pid>/task and the open of its creator's event would be missed. Kernel-mode samples are asked
        for and dropped (``exclude_kernel``) where the kernel refuses them to this user."""
        if pages <= 0 or pages & (pages - 1):
            raise ValueError("pages must be a power of two")
        try:
            tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        except (OSError, ValueError) as exc:
            return Unavailable(f"no such worker process {pid}: {exc}", getattr(exc, "errno", 0) or 0)
        sampler = cls(pid, tuple(str(p) for p in own), period_ns, children_are_toolchain=children_are_toolchain)
        for cpu in online_cpus():
            leader: int | None = None  # the event whose buffer this CPU's other events write into
            for tid in tids:
                fd = open_event(sample_attr(period_ns, exclude_kernel=sampler.exclude_kernel), tid, cpu)
                if isinstance(fd, Unavailable) and fd.errno in (errno.EACCES, errno.EPERM) \
                        and not sampler.exclude_kernel and not sampler.fds:
                    sampler.exclude_kernel = True  # paranoid level 2: user-mode samples only
                    fd = open_event(sample_attr(period_ns, exclude_kernel=True), tid, cpu)
                if isinstance(fd, Unavailable):
                    if fd.errno == errno.ESRCH and tid != pid:
                        continue  # that thread ended meanwhile
                    sampler.close()
                    return fd
                sampler.fds.append(fd)
                try:
                    if leader is None:
                        sampler.buffers.append(RingBuffer(fd, pages))
                        leader = fd
                    else:
                        fcntl.ioctl(fd, IOC_SET_OUTPUT, leader)
                except (OSError, ValueError) as exc:
                    sampler.close()
                    return Unavailable(f"perf ring buffer on cpu {cpu}: {exc}", getattr(exc, "errno", 0) or 0)
        return sampler

    def arm(self) -> None:
        """Reset and enable: called just before the request goes to the worker. Never raises."""
        with self._lock:
            self.error = ""
            for buffer in self.buffers:
                buffer.drain(RawSamples())  # anything left from before is not this call's
            self.raw = RawSamples()
            self._ioctl(IOC_RESET, IOC_ENABLE)
        self._armed.set()
        if self._drainer is None:
            self._drainer = threading.Thread(target=self._drain_loop, name="cann-perf-drain", daemon=True)
            self._drainer.start()

    def disarm(self) -> RawSamples:
        """Disable and read everything: the raw samples since ``arm``. Never raises."""
        self._armed.clear()
        with self._lock:
            self._ioctl(IOC_DISABLE)
            for buffer in self.buffers:
                buffer.drain(self.raw)
            raw, self.raw = self.raw, RawSamples()
        return raw

    def collect(self, calls: int = 1) -> CallProfile:
        """Disable, read and attribute; called once the worker is frozen, so /proc/<pid>/maps holds still
        (re-read every time: libraries can be loaded at any time). ``calls``: how many operator calls ran
        since ``arm`` (a timing batch's warm-up and timed calls). Never raises."""
        raw = self.disarm()
        maps = {pid: read_maps(pid) for pid in raw.pids | {self.pid}}
        # only where the judge sees the seccomp filter in force: where it could not be installed, a child may be
        # anything the submission forked. A filter cannot be removed, so once seen it is not read again.
        self.filtered = self.filtered or (self.children_are_toolchain and seccomp_filtered(self.pid))
        toolchain = self.children_are_toolchain and self.filtered
        profile = attribute(raw, maps, self.own, period_ns=self.period_ns, calls=calls,
                            toolchain_except=self.pid if toolchain else None)
        profile.error = self.error
        return profile

    def _ioctl(self, *requests: int) -> None:
        for fd in self.fds:
            for request in requests:
                try:
                    fcntl.ioctl(fd, request, 0)
                except OSError as exc:
                    self.error = self.error or f"perf ioctl {request:#x}: {exc}"

    def _drain_loop(self) -> None:
        while not self._closed.is_set():
            if not self._armed.wait(0.5):
                continue
            if self._closed.wait(DRAIN_INTERVAL_S):
                return
            with self._lock:
                if self._armed.is_set():
                    for buffer in self.buffers:
                        buffer.drain(self.raw)

    def close(self) -> None:
        self._closed.set()
        self._armed.clear()
        with self._lock:
            for buffer in self.buffers:
                buffer.close()
            for fd in self.fds:
                os.close(fd)
            self.buffers, self.fds = [], []
        if self._drainer is not None and self._drainer is not threading.current_thread():
            self._drainer.join(1.0)

    def __enter__(self) -> CallSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

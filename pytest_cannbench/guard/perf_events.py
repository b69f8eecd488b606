"""perf_event_open(2) as the judge's sampler uses it: the attributes, the syscall, the ring buffers and their records.

Judge side, stdlib and ``ctypes`` only; the sampler's policy (which events on which threads, when, and what the
samples mean) is ``perf_sample``'s.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import platform
import struct
from dataclasses import dataclass, field
from pathlib import Path

SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_SAMPLE_IP, PERF_SAMPLE_TID, PERF_SAMPLE_TIME = 1 << 0, 1 << 1, 1 << 2
PERF_SAMPLE_PERIOD, PERF_SAMPLE_STREAM_ID = 1 << 8, 1 << 9
SAMPLE_TYPE = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_PERIOD
PERF_FLAG_FD_CLOEXEC = 1 << 3
FLAG_DISABLED, FLAG_INHERIT, FLAG_EXCLUDE_KERNEL, FLAG_EXCLUDE_HV = 1 << 0, 1 << 1, 1 << 5, 1 << 6
FLAG_USE_CLOCKID, FLAG_INHERIT_THREAD = 1 << 25, 1 << 35
CLOCK_MONOTONIC = 1  # the clock of time.perf_counter / perf_counter_ns on Linux
IOC_ENABLE, IOC_DISABLE, IOC_RESET, IOC_SET_OUTPUT = 0x2400, 0x2401, 0x2403, 0x2405
IOC_PERIOD, IOC_ID = 0x40082404, 0x80082407  # _IOW('$', 4, __u64), _IOR('$', 7, __u64 *)
RECORD_LOST, RECORD_SAMPLE = 2, 9
MISC_CPUMODE_MASK, MISC_KERNEL = 0x7, 1
# perf_event_attr as of PERF_ATTR_SIZE_VER5 (Linux 4.1): type, size, config, sample_period, sample_type,
# read_format, the flag bits, wakeup_events, bp_type, config1, config2, branch_sample_type, sample_regs_user,
# sample_stack_user, clockid, sample_regs_intr, aux_watermark, sample_max_stack, reserved
ATTR = struct.Struct("=IIQQQQQIIQQQQIiQIHH")
HEADER = struct.Struct("=IHH")
SAMPLE = struct.Struct("=QIIQQQ")  # SAMPLE_TYPE in the kernel's order: ip, pid, tid, time, stream id, period
LOST = struct.Struct("=QQ")  # id, lost
META_HEAD = 1024  # perf_event_mmap_page: data_head, data_tail, data_offset, data_size
META = struct.Struct("=QQQQ")
COUNT = struct.Struct("=Q")


@dataclass(frozen=True)
class Unavailable:
    """Why the judge could not sample: the evidence is missing, never a verdict on the submission."""

    reason: str
    errno: int = 0


@dataclass
class SampleLog:
    """Samples as the ring buffers gave them: ``(time_ns, pid, tid, ip, kernel mode, stream id, period)`` each.
    The period is exact for an inherited copy (set at its thread's birth, never changed); for the judge's own
    events the kernel keeps reporting the first one (the period ioctl does not update it)."""

    records: list[tuple[int, int, int, int, bool, int, int]] = field(default_factory=list)
    lost: int = 0



def seccomp_filtered(pid: int) -> bool:
    """Whether the process runs under a seccomp filter (``Seccomp: 2`` in /proc/<pid>/status): read by the judge,
    not told by the worker. False when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return any(line.split(":", 1)[1].strip() == "2" for line in fh if line.startswith("Seccomp:"))
    except OSError:
        return False


def sample_attr(period_ns: int = 1_000_000, *, exclude_kernel: bool = False, inherit: bool = True,
                disabled: bool = True) -> bytes:
    """The packed perf_event_attr of a sampling event: CPU clock, SAMPLE_TYPE on CLOCK_MONOTONIC."""
    flags = ((FLAG_DISABLED if disabled else 0) | (FLAG_INHERIT if inherit else 0) | FLAG_USE_CLOCKID
             | (FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV if exclude_kernel else 0))
    return ATTR.pack(PERF_TYPE_SOFTWARE, ATTR.size, PERF_COUNT_SW_CPU_CLOCK, period_ns, SAMPLE_TYPE, 0, flags,
                     0, 0, 0, 0, 0, 0, 0, CLOCK_MONOTONIC, 0, 0, 0, 0)


def count_attr(*, exclude_kernel: bool = False, inherit_threads: bool = False) -> bytes:
    """A counting CPU-clock event, enabled; ``inherit_threads``: inherited by new threads, not by processes."""
    flags = ((FLAG_INHERIT | FLAG_INHERIT_THREAD if inherit_threads else 0)
             | (FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV if exclude_kernel else 0))
    return ATTR.pack(PERF_TYPE_SOFTWARE, ATTR.size, PERF_COUNT_SW_CPU_CLOCK, 0, 0, 0, flags,
                     0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


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


def parse_records(data: bytes, log: SampleLog) -> int:
    """Append the whole records of ``data`` (a linear copy of ring-buffer bytes) to ``log``; returns bytes used.

    A record cut off at the end is left for the next read. Types other than SAMPLE and LOST (throttling) are
    skipped by their size; a size under the header's ends the parse (a corrupt buffer never loops)."""
    pos, end = 0, len(data)
    append = log.records.append
    while end - pos >= HEADER.size:
        kind, misc, size = HEADER.unpack_from(data, pos)
        if size < HEADER.size:
            return end
        if end - pos < size:
            break
        body = pos + HEADER.size
        if kind == RECORD_SAMPLE and size >= HEADER.size + SAMPLE.size:
            ip, pid, tid, when, stream, period = SAMPLE.unpack_from(data, body)
            append((when, pid, tid, ip, misc & MISC_CPUMODE_MASK == MISC_KERNEL, stream, period))
        elif kind == RECORD_LOST and size >= HEADER.size + LOST.size:
            log.lost += LOST.unpack_from(data, body)[1]
        pos += size
    return pos


def stat_where(text: bytes) -> tuple[str, int] | None:
    """``(state, cpu)`` of a /proc/<pid>/task/<tid>/stat line (the name may hold spaces and parentheses)."""
    try:
        fields = text.rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[36])
    except (IndexError, ValueError, UnicodeDecodeError):
        return None


class RingBuffer:
    """One CPU's mmapped buffer: the metadata page, then 2^n data pages the kernel writes at data_head."""

    def __init__(self, fd: int, pages: int) -> None:
        page = mmap.PAGESIZE
        self.map = mmap.mmap(fd, (1 + pages) * page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        _head, _tail, offset, size = META.unpack_from(self.map, META_HEAD)
        self.offset: int = offset if size else page  # pre-4.1 kernels leave them 0: the defaults
        self.size: int = size or pages * page

    def drain(self, log: SampleLog) -> None:
        """Parse what the kernel wrote since the last drain, then move data_tail so it can write again.

        Python has no read barrier: on x86-64 (TSO) the records below data_head are complete when it is read; on
        AArch64 a drain while the events run could read a record not yet visible, which the parser skips or
        misattributes (one sample); the drain after the disable ioctl is ordered by the syscall."""
        head, tail = struct.unpack_from("=QQ", self.map, META_HEAD)
        if head == tail:
            return
        if head - tail > self.size:  # cannot happen while we write data_tail; a corrupt page is lost data
            log.lost += 1
            tail = head
        start, length = tail % self.size, head - tail
        first = min(length, self.size - start)
        chunk = self.map[self.offset + start:self.offset + start + first]
        if first < length:  # the records wrap around the end of the buffer
            chunk += self.map[self.offset:self.offset + length - first]
        used = parse_records(chunk, log)
        struct.pack_into("=Q", self.map, META_HEAD + 8, tail + used)

    def close(self) -> None:
        self.map.close()


def read_count(fd: int) -> int:
    try:
        return int(COUNT.unpack(os.read(fd, COUNT.size))[0])
    except (OSError, struct.error):
        return 0


def event_id(fd: int) -> int:
    buf = bytearray(8)
    fcntl.ioctl(fd, IOC_ID, buf)
    return int(COUNT.unpack(buf)[0])

"""The judge's meter of a worker's CPU time: every thread and child it ever had, exited ones included.

The CPU-time floor (``timing.stats.cpu_floor``) is the judge's evidence against a worker whose clock runs slow,
so it must see all the CPU the worker's work took. ``/proc/<pid>/task/*/schedstat`` sees only the threads alive
when it is read: a thread born and joined inside a batch takes its CPU time with it (a slowed clock that ran its
loops on such a thread had 936 of its 2,469 ms seen), and so does a call that fans out to short-lived threads.
Three meters keep the exited ones, opened by the judge right after the spawn, before the worker starts threads:

* ``perf_task_clock``: a counting ``perf_event_open`` event (``PERF_COUNT_SW_TASK_CLOCK``, ``inherit=1``,
  ``cpu=-1``) on each of the worker's threads. Every thread and process it starts later inherits the event, and
  when one exits the kernel adds its count to the parent event's: one ``read`` is the CPU time of the whole tree,
  in nanoseconds, kernel time included. The worker holds no descriptor of it (``PR_TASK_PERF_EVENTS_DISABLE``
  reaches only events a task owns). Needs ``perf_event_paranoid`` <= 2 or CAP_PERFMON, no PMU (a VM is fine).
* ``cgroup_v1`` / ``cgroup_v2``: a cgroup of the worker's own (v1 ``cpuacct``, v2 ``cpu.stat``), created beside
  the judge's and the worker moved in with all its threads; its usage counts whatever ran in it. Needs write
  access to the hierarchy (root, or a delegated v2 subtree).
* ``schedstat``: the fallback, the sum over the threads alive at each reading. Weaker, and said so on the case.

Reading one costs 0.3 us (perf) or 9 us (cgroup) against 20-40 us for the schedstat of a worker's threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import os
import platform
import struct
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cannbench.workers.contract import cpu_used, thread_cpu

PERF, CGROUP_V1, CGROUP_V2, SCHEDSTAT = "perf_task_clock", "cgroup_v1", "cgroup_v2", "schedstat"
KINDS = (PERF, CGROUP_V1, CGROUP_V2, SCHEDSTAT)
KEEPS_EXITED = frozenset({PERF, CGROUP_V1, CGROUP_V2})
WEAK_NOTE = ("CPU floor from /proc schedstat (no perf counter or cgroup could be opened here: {why}): threads "
             "that exit inside a batch take their CPU time with them, so a slowed clock whose work runs on such "
             "threads is not seen by the floor")
ENV_KINDS = "CANNBENCH_CPU_METER"  # comma-separated kinds to try, in order (the judge's environment; tests)

SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK = 1, 1
FLAG_INHERIT = 1 << 1
PERF_FLAG_FD_CLOEXEC = 1 << 3
# perf_event_attr up to PERF_ATTR_SIZE_VER5: type, size, config, sample_period, sample_type, read_format, flags,
# wakeup_events, bp_type, config1, config2, branch_sample_type, sample_regs_user, sample_stack_user, clockid,
# sample_regs_intr, aux_watermark, sample_max_stack, reserved
ATTR = struct.Struct("=IIQQQQQIIQQQQIiQIHH")
CGROUP_ROOT = Path("/sys/fs/cgroup")
_names = itertools.count()
_libc: ctypes.CDLL | None = None


@dataclass
class Reading:
    """One reading of a worker: the meter's total (seconds since it was opened; None for ``schedstat``) and
    each living thread's CPU seconds (for the busiest-thread bound)."""

    total: float | None
    threads: dict[int, float] = field(default_factory=dict)


def _perf_open(tid: int) -> int:
    """A counting task-clock event on ``tid``, inherited by what it starts; raises OSError."""
    global _libc
    number = SYS_PERF_EVENT_OPEN.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"no perf_event_open number for {platform.machine()}")
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    attr = ATTR.pack(PERF_TYPE_SOFTWARE, ATTR.size, PERF_COUNT_SW_TASK_CLOCK, 0, 0, 0, FLAG_INHERIT,
                     0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(ctypes.c_long(number), buf, ctypes.c_int(tid), ctypes.c_int(-1), ctypes.c_int(-1),
                       ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"perf_event_open(task clock, pid={tid}): {os.strerror(code)}")
    return int(fd)


def _own_cgroup(version: str, proc_cgroup: str) -> Path | None:
    """This process's directory in the v1 ``cpuacct`` hierarchy or the v2 one, or None."""
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if version == CGROUP_V1 and "cpuacct" in parts[1].split(","):
            base = next((CGROUP_ROOT / d for d in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")
                         if (CGROUP_ROOT / d / "cpuacct.usage").exists()), None)
            return None if base is None else base / parts[2].lstrip("/")
        if version == CGROUP_V2 and parts[0] == "0" and parts[1] == "":
            base = next((b for b in (CGROUP_ROOT, CGROUP_ROOT / "unified") if (b / "cgroup.procs").exists()
                         and (b / "cgroup.controllers").exists()), None)
            return None if base is None else base / parts[2].lstrip("/")
    return None


def _cgroup_usage(directory: Path, version: str) -> float:
    if version == CGROUP_V1:
        return int((directory / "cpuacct.usage").read_text()) / 1e9
    for line in (directory / "cpu.stat").read_text().splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) / 1e6
    raise OSError(errno.ENOENT, f"no usage_usec in {directory / 'cpu.stat'}")


@dataclass
class CpuMeter:
    """The meter of one worker process, opened right after its spawn (:meth:`open`); ``note`` says why it is
    the weaker ``schedstat`` when it is."""

    pid: int
    kind: str = SCHEDSTAT
    note: str = ""
    fds: list[int] = field(default_factory=list)
    cgroup: Path | None = None

    @classmethod
    def open(cls, pid: int, kinds: tuple[str, ...] | None = None) -> CpuMeter:
        """The first meter of ``kinds`` (default: ``$CANNBENCH_CPU_METER`` or all, strongest first) that opens."""
        if kinds is None:
            asked = tuple(k.strip() for k in os.environ.get(ENV_KINDS, "").split(",") if k.strip() in KINDS)
            kinds = asked or KINDS
        meter = cls(pid)
        refused: list[str] = []
        for kind in kinds:
            try:
                if kind == PERF:
                    meter._open_perf()
                elif kind in (CGROUP_V1, CGROUP_V2):
                    meter._open_cgroup(kind)
                elif kind == SCHEDSTAT:
                    break
                meter.kind = kind
                return meter
            except OSError as exc:
                meter.close()
                refused.append(f"{kind}: {exc.strerror or exc}")
        meter.kind = SCHEDSTAT
        meter.note = WEAK_NOTE.format(why="; ".join(refused) or "not asked for")
        return meter

    def _open_perf(self) -> None:
        """One event per thread the worker has now (normally only its first): what they start inherits it."""
        tids = sorted(int(t) for t in os.listdir(f"/proc/{self.pid}/task"))
        for tid in tids:
            try:
                self.fds.append(_perf_open(tid))
            except OSError as exc:
                if exc.errno != errno.ESRCH or tid == self.pid:  # a thread that already ended has nothing to count
                    raise

    def _open_cgroup(self, version: str) -> None:
        """A cgroup of the worker's own beside the judge's; ``cgroup.procs`` moves all its threads at once."""
        try:
            own = _own_cgroup(version, Path("/proc/self/cgroup").read_text())
        except OSError as exc:
            raise OSError(exc.errno, f"/proc/self/cgroup: {exc.strerror}") from None
        if own is None:
            raise OSError(errno.ENOENT, f"no {version} hierarchy mounted under {CGROUP_ROOT}")
        _remove_stale(own)
        directory = own / f"cannbench-meter-{os.getpid()}-{next(_names)}"
        try:
            directory.mkdir()
        except OSError as exc:
            raise OSError(exc.errno, f"cannot create {directory}: {exc.strerror}") from None
        self.cgroup = directory
        try:
            (directory / "cgroup.procs").write_text(str(self.pid))
            _cgroup_usage(directory, version)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot move the worker into {directory}: {exc.strerror}") from None

    @property
    def keeps_exited(self) -> bool:
        return self.kind in KEEPS_EXITED

    def total(self) -> float | None:
        """Seconds of CPU the worker's whole tree used since the meter opened; None for ``schedstat`` or when the
        meter cannot be read any more."""
        try:
            if self.kind == PERF:
                return sum(struct.unpack("=Q", os.read(fd, 8))[0] for fd in self.fds) / 1e9
            if self.kind in (CGROUP_V1, CGROUP_V2) and self.cgroup is not None:
                return _cgroup_usage(self.cgroup, self.kind)
        except (OSError, struct.error, ValueError):
            return None
        return None

    def read(self) -> Reading:
        return Reading(self.total(), thread_cpu(self.pid))

    def close(self) -> None:
        """Close the events; a cgroup is removed once the worker has left it (after its death)."""
        fds, self.fds = self.fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        directory, self.cgroup = self.cgroup, None
        if directory is not None:
            remove_cgroup(directory)


def probe_kind() -> str:
    """The meter a worker spawned now would most likely get (for the header), found without moving anything:
    a counter opened on this process and closed, else a writable cgroup directory."""
    asked = tuple(k.strip() for k in os.environ.get(ENV_KINDS, "").split(",") if k.strip() in KINDS) or KINDS
    for kind in asked:
        if kind == PERF:
            try:
                os.close(_perf_open(os.getpid()))
                return PERF
            except OSError:
                continue
        if kind in (CGROUP_V1, CGROUP_V2):
            try:
                own = _own_cgroup(kind, Path("/proc/self/cgroup").read_text())
            except OSError:
                continue
            if own is not None and os.access(own, os.W_OK):
                return kind
        if kind == SCHEDSTAT:
            break
    return SCHEDSTAT


def remove_cgroup(directory: Path) -> bool:
    """rmdir a worker's cgroup; a living worker still in it is moved back to the judge's cgroup first."""
    with contextlib.suppress(OSError):
        directory.rmdir()
        return True
    try:
        pids = (directory / "cgroup.procs").read_text().split()
        for pid in pids:
            (directory.parent / "cgroup.procs").write_text(pid)
        directory.rmdir()
        return True
    except OSError:
        return False


def _remove_stale(own: Path) -> None:
    """The empty cgroups a judge that died (SIGKILL) left behind: named after its pid, which is gone."""
    try:
        entries = list(own.glob("cannbench-meter-*"))
    except OSError:
        return
    for entry in entries:
        owner = entry.name.split("-")[2]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            with contextlib.suppress(OSError):
                entry.rmdir()


def used(before: Reading, after: Reading) -> tuple[float | None, float | None]:
    """``(all, busiest)`` CPU seconds between two readings: all from the meter where it keeps exited threads
    (else the living threads' sum, ``contract.cpu_used``), the busiest living thread from /proc."""
    all_s, busiest = cpu_used(before.threads, after.threads)
    if before.total is not None and after.total is not None:
        return max(0.0, after.total - before.total), busiest
    return all_s, busiest

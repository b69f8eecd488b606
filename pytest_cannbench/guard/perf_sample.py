"""The judge samples a worker's instruction pointers with perf_event_open(2), from outside the worker.

Evidence the submission cannot switch off: the events belong to the judge (the worker holds no descriptor of
them, and ``prctl(PR_TASK_PERF_EVENTS_DISABLE)`` reaches only events a task owns itself), the kernel takes the
samples on a timer interrupt, and whatever dispatch path a submission uses (profiler off, ``redispatch``,
``at::cpu::*`` called directly, a kernel found through pointers in memory), its CPU time shows up where the code
runs. Attribution to mapped objects is ``perf_profile``'s job; this module opens, arms, drains, parses and keeps
the books.

Three kinds of events, all the software CPU clock (works in VMs without a PMU):

- *Sampling events*, one per online CPU per thread the judge follows itself ("covered" threads), ``inherit=1`` so
  that threads and processes created later are sampled too (their inherited copies take the period the creator's
  event had at the creation, then keep it). The kernel refuses to mmap inherited per-task events that follow the
  task across CPUs (``cpu=-1``), hence one event per CPU; every event on a CPU writes into that CPU's one ring
  buffer (``PERF_EVENT_IOC_SET_OUTPUT`` to a never-enabled *owner* event), so a buffer fills at most as fast as one
  CPU runs. Samples carry ``IP | TID | TIME | STREAM_ID``, the time on ``CLOCK_MONOTONIC`` (the clock of the
  judge's ``time.perf_counter``), so that only the samples inside the judge's windows of the timed calls count.
- *Random intervals.* A sample every fixed millisecond is visible from user space (a gap in a tight clock loop)
  and predictable, so work can be placed between two ticks. ``PERF_EVENT_IOC_PERIOD`` restarts an event's timer
  with a new period, but only on the event it is issued on: inherited copies are out of its reach (measured:
  ``docs/security.md``). So the judge follows every thread with events of its own: all threads present at
  ``open``, every thread present when a window opens (events closed and opened again while the worker is
  frozen), and threads born inside a window as soon as a judge thread sees them in ``/proc`` (about a
  millisecond; their inherited copies' samples are then dropped by ``STREAM_ID``). While a call runs that thread
  draws a new random period for every running thread's current CPU at random moments.
- *Counting events*: one per thread present at ``open``, inherited by threads only (``inherit_thread``), which
  keeps the CPU time of threads that have exited; and one per covered thread, not inherited (its own CPU time;
  a context with a non-inherited event is also never cloned into a child's, so the kernel never swaps a covered
  thread's events with a child's at a context switch). The CPU of threads born in the window, against their
  samples, is what the samples could not see (a thread shorter than its first period is never sampled): it comes
  back as ``[unsampled]``, foreign, beyond a small allowance.

A daemon thread drains the buffers, draws the periods and looks for new threads while a call runs. The syscall,
the attributes and the ring buffers are ``perf_events``'.
"""

from __future__ import annotations

import bisect
import errno
import fcntl
import os
import random
import resource
import threading
import time
from dataclasses import dataclass

from pytest_cannbench.guard.perf_events import (
    COUNT,
    IOC_DISABLE,
    IOC_ENABLE,
    IOC_PERIOD,
    IOC_RESET,
    IOC_SET_OUTPUT,
    RingBuffer,
    SampleLog,
    Unavailable,
    count_attr,
    event_id,
    online_cpus,
    open_event,
    read_count,
    sample_attr,
    seccomp_filtered,
    stat_where,
)
from pytest_cannbench.guard.perf_profile import (
    UNKNOWN,
    UNSAMPLED,
    CallProfile,
    ObjectSamples,
    RawSamples,
    attribute,
    read_maps,
)

# The mean CPU time between samples. A sample costs one timer interrupt: about 1-2 us on bare metal, but 21 us in
# this project's VMs (measured with `perf record` and benchmarks/perf_profile.py alike: the hypervisor's timer),
# where 250 us costs a busy thread 9% and 1 ms costs 2%. A case's calls are judged together (CallProfile.merge),
# and 40 work samples, about 40 ms of CPU, make a verdict; pass a shorter period where sampling is cheap.
DEFAULT_PERIOD_NS = 1_000_000
# Each period drawn is uniform in [PERIOD_LOW, PERIOD_HIGH] x DEFAULT_PERIOD; a new one is drawn for every running
# thread after an exponential pause of RESET_MEAN x it (clipped to RESET_CLIP_S): about one per sample, so that no
# interval, counted from a sample or from the redraw itself, is known in advance. A redraw restarts the timer, so
# the intervals are shorter than the periods: these give about one sample per period of CPU, as a fixed period
# did (simulated and measured: docs/security.md), intervals from 0.1 to 2.5 periods, median 0.5.
PERIOD_LOW, PERIOD_HIGH, RESET_MEAN = 0.1, 2.5, 1.5
RESET_CLIP_S = (0.0002, 0.01)
DEFAULT_PAGES = 32  # data pages per CPU: 128 KiB, 3300 samples, 3 s of one busy CPU between two drains
DRAIN_INTERVAL_S = 0.1
# events the judge opens on one worker (a followed thread costs one per CPU and a counter), within a quarter of the
# judge's descriptors: past it, threads that come are sampled by inherited copies at the period of their birth, and
# the events are no longer opened again (that would close the copies); said in the case's notes. At 4096: 20
# threads on 200 CPUs, 1365 on 2.
MAX_EVENTS = min(4096, max(64, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4))
# CPU of threads born in the window that their samples do not account for, forgiven per exchange: an honest thread
# started inside a call runs up to one period before its first sample (and the judge sees it about a millisecond
# after its birth). Threads pools (OpenMP, at::parallel_for) start once and are then covered.
UNSAMPLED_ALLOWANCE_NS = int(PERIOD_HIGH * DEFAULT_PERIOD_NS)


@dataclass
class Covered:
    """A thread the judge follows with events of its own."""

    pid: int
    fds: list[int]  # sampling events, one per CPU (the sampler's ``cpus`` order)
    own_fd: int  # counting, not inherited: this thread's own CPU time
    stat_fd: int | None  # /proc/<pid>/task/<tid>/stat, kept open: where it runs, read with pread
    double: bool = False  # covered inside a window: its creator's inherited events follow it too


@dataclass
class Snapshot:
    """The books at a window's edge (the worker frozen): inherited CPU and each covered thread's own."""

    inherited_ns: int
    threads: dict[int, int]



class CallSampler:
    """The judge's sampler of one worker: open once right after the spawn, arm/collect around every exchange,
    ``open_window``/``close_window`` around each timed call of a streamed batch.

    ``own`` are the directories whose objects are the submission's own code (its private install);
    ``children_are_toolchain``: the worker may start no process, so its children are its compiler helper's;
    ``randomise``: draw the periods at random (off: the fixed period of the sampler before, for comparisons)."""

    def __init__(self, pid: int, own: tuple[str, ...] = (), *, period_ns: int = DEFAULT_PERIOD_NS,
                 children_are_toolchain: bool = False, randomise: bool = True) -> None:
        self.pid = pid
        self.own = own
        self.period_ns = period_ns
        self.children_are_toolchain = children_are_toolchain
        self.randomise = randomise
        self.filtered = False  # the worker was seen under a seccomp filter (seccomp_filtered)
        self.exclude_kernel = False
        self.cpus = online_cpus()
        self.cpu_index = {cpu: i for i, cpu in enumerate(self.cpus)}
        self.owners: list[int] = []  # per CPU: the never-enabled event whose buffer the others write into
        self.buffers: list[RingBuffer] = []
        self.covered: dict[int, Covered] = {}  # tid -> the judge's own events on it
        self.top_ids: set[int] = set()  # ids of every sampling event the judge opened (not inherited copies)
        self.since: dict[int, int] = {}  # tid -> when the judge's own events first followed it (ns)
        self.own_base: dict[int, int] = {}  # tid -> CPU counted by its own counters closed so far (ns)
        self.counters: list[int] = []  # inherited by threads: all the worker's threads' CPU, exited ones too
        self.accounting = ""  # why unsampled CPU is not counted, where it is not
        self.crowded = 0  # the most threads seen past MAX_EVENTS (not all followed with events of the judge's)
        self.log = SampleLog()
        self.last_log = SampleLog()  # the last exchange's, as read
        self.windows: list[list[int]] = []  # [start, end] ns of each timed call's window (end 0: open)
        self.armed_at = 0
        self.start: Snapshot | None = None  # the books when the first window opened (or at arm)
        self.error = ""  # why the current exchange's samples cannot be trusted (an ioctl failed)
        self.resets = 0  # periods drawn for running threads since arm
        self.recovered = 0  # times the events were opened again because threads came or went
        self.rng = random.Random(os.urandom(16))  # the worker cannot read the judge's memory
        self._lock = threading.Lock()
        self._armed = threading.Event()
        self._live = threading.Event()  # the worker may be running: from arm, and inside each window
        self._closed = threading.Event()
        self._drainer: threading.Thread | None = None

    # ------------------------------------------------------------ opening

    @classmethod
    def open(cls, pid: int, own: tuple[str, ...] | list[str] = (), *, period_ns: int = DEFAULT_PERIOD_NS,
             pages: int = DEFAULT_PAGES, children_are_toolchain: bool = False,
             randomise: bool = True) -> CallSampler | Unavailable:
        """Events on every thread ``pid`` has now (each inherited by the threads it makes later) on every CPU.

        Call it right after the spawn, or while the worker is frozen: a thread created between the listing of
        /proc/<pid>/task and the open of its creator's event would be missed until a window opens. Kernel-mode
        samples are asked for and dropped (``exclude_kernel``) where the kernel refuses them to this user."""
        if pages <= 0 or pages & (pages - 1):
            raise ValueError("pages must be a power of two")
        try:
            tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        except (OSError, ValueError) as exc:
            return Unavailable(f"no such worker process {pid}: {exc}", getattr(exc, "errno", 0) or 0)
        sampler = cls(pid, tuple(str(p) for p in own), period_ns=period_ns,
                      children_are_toolchain=children_are_toolchain, randomise=randomise)
        failed = sampler._open_owners(pages) or sampler._open_counters(tids)
        if failed is None:
            now = time.perf_counter_ns()
            for tid in tids:
                found = sampler._cover(pid, tid, enabled=False, now=now)
                if isinstance(found, Unavailable):
                    failed = found
                    break
        if failed is not None:
            sampler.close()
            return failed
        return sampler

    def _open_owners(self, pages: int) -> Unavailable | None:
        for cpu in self.cpus:
            fd = open_event(sample_attr(self.period_ns, exclude_kernel=self.exclude_kernel, inherit=False),
                            self.pid, cpu)
            if isinstance(fd, Unavailable) and fd.errno in (errno.EACCES, errno.EPERM) \
                    and not self.exclude_kernel and not self.owners:
                self.exclude_kernel = True  # paranoid level 2: user-mode samples only
                fd = open_event(sample_attr(self.period_ns, exclude_kernel=True, inherit=False), self.pid, cpu)
            if isinstance(fd, Unavailable):
                return fd
            self.owners.append(fd)
            try:
                self.buffers.append(RingBuffer(fd, pages))
            except (OSError, ValueError) as exc:
                return Unavailable(f"perf ring buffer on cpu {cpu}: {exc}", getattr(exc, "errno", 0) or 0)
        return None

    def _open_counters(self, tids: list[int]) -> Unavailable | None:
        for tid in tids:
            fd = open_event(count_attr(exclude_kernel=self.exclude_kernel, inherit_threads=True), tid, -1)
            if isinstance(fd, Unavailable):
                if fd.errno == errno.ESRCH and tid != self.pid:
                    continue
                if fd.errno in (errno.EINVAL, errno.E2BIG):  # inherit_thread is Linux 5.13
                    self._close_fds(self.counters)
                    self.accounting = (f"CPU of threads too short to sample is not counted (the kernel refused "
                                       f"an inherit_thread counter: {fd.reason})")
                    return None
                return fd
            self.counters.append(fd)
        return None

    def _period(self) -> int:
        if not self.randomise:
            return self.period_ns
        return int(self.rng.uniform(PERIOD_LOW, PERIOD_HIGH) * self.period_ns)

    def _cover(self, pid: int, tid: int, *, enabled: bool, now: int, double: bool = False) -> bool | Unavailable:
        """Follow ``tid`` (of process ``pid``) with events of the judge's own. False: it ended meanwhile."""
        own_fd = open_event(count_attr(exclude_kernel=self.exclude_kernel), tid, -1)  # first: no clone after it
        if isinstance(own_fd, Unavailable):
            return False if own_fd.errno == errno.ESRCH else own_fd
        fds: list[int] = []
        entry = Covered(pid, fds, own_fd, None, double)
        try:
            for i, cpu in enumerate(self.cpus):
                fd = open_event(sample_attr(self._period(), exclude_kernel=self.exclude_kernel,
                                            disabled=not enabled), tid, cpu)
                if isinstance(fd, Unavailable):
                    self._release(entry)
                    return False if fd.errno == errno.ESRCH else fd
                fds.append(fd)
                fcntl.ioctl(fd, IOC_SET_OUTPUT, self.owners[i])
                self.top_ids.add(event_id(fd))
        except OSError as exc:
            self._release(entry)
            return Unavailable(f"perf event of thread {tid}: {exc}", exc.errno or 0)
        try:
            entry.stat_fd = os.open(f"/proc/{pid}/task/{tid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            entry.stat_fd = None
        self.covered[tid] = entry
        self.since.setdefault(tid, now)
        if pid == self.pid:  # the books are of the worker's threads (the inherited counters skip processes)
            self.own_base.setdefault(tid, 0)
        return True

    def _release(self, entry: Covered) -> None:
        self._close_fds(entry.fds)
        self._close_fds([entry.own_fd] + ([entry.stat_fd] if entry.stat_fd is not None else []))

    @staticmethod
    def _close_fds(fds: list[int]) -> None:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        fds.clear()

    def _threads(self) -> list[tuple[int, int]]:
        """``(pid, tid)`` of every thread of the worker and of its descendant processes (the worker frozen)."""
        found: list[tuple[int, int]] = []
        todo, seen = [self.pid], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except (OSError, ValueError):
                continue
            for tid in tids:
                found.append((pid, tid))
                try:
                    with open(f"/proc/{pid}/task/{tid}/children") as fh:
                        todo.extend(int(c) for c in fh.read().split())
                except (OSError, ValueError):
                    pass
        return found

    def _recover(self, enabled: bool) -> None:
        """Close every sampling event (their inherited copies go with them) and follow each thread there is now
        with new ones: threads born since the last time get events the judge can reach, and no thread keeps an
        inherited copy beside them. Called while the worker is frozen."""
        threads = self._threads()
        if set(self.covered) == {tid for _pid, tid in threads} and not any(c.double for c in self.covered.values()):
            return
        if len(threads) * (len(self.cpus) + 1) > MAX_EVENTS:
            self.crowded = max(self.crowded, len(threads))
            return
        self._uncover_all()
        now = time.perf_counter_ns()
        for pid, tid in threads:
            found = self._cover(pid, tid, enabled=enabled, now=now)
            if isinstance(found, Unavailable):
                self.error = self.error or f"following thread {tid}: {found.reason}"
        self.recovered += 1

    def _uncover_all(self) -> None:
        for tid, entry in self.covered.items():
            if entry.pid == self.pid:
                self.own_base[tid] = self.own_base.get(tid, 0) + read_count(entry.own_fd)
            self._release(entry)
        self.covered = {}

    # ------------------------------------------------------------ exchanges and windows

    def arm(self) -> None:
        """Start of an exchange: called just before the request goes to the worker (frozen or idle). Never raises.
        Until a window opens, the whole exchange is the window (a correctness call)."""
        with self._lock:
            self.error = ""
            for buffer in self.buffers:
                buffer.drain(SampleLog())  # anything left from before is not this exchange's
            self.log, self.windows, self.resets = SampleLog(), [], 0
            self._recover(enabled=False)
            self._ioctl(IOC_RESET, IOC_ENABLE)
            self._redraw_all()
            self.armed_at = time.perf_counter_ns()
            self.start = self._snapshot()
        self._armed.set()
        self._live.set()
        if self._drainer is None:
            self._drainer = threading.Thread(target=self._drain_loop, name="cann-perf-drain", daemon=True)
            self._drainer.start()

    def open_window(self) -> None:
        """A timed call begins (the worker frozen, its ``go`` about to be sent): only the samples inside the
        windows count, and the books start at the first one. Never raises."""
        with self._lock:
            self._recover(enabled=True)
            self._redraw_all()
            if not self.windows:
                self.start = self._snapshot()
            self.windows.append([time.perf_counter_ns(), 0])
        self._live.set()

    def close_window(self) -> None:
        """The timed call's frame arrived and the worker is frozen again. Never raises."""
        now = time.perf_counter_ns()
        self._live.clear()  # frozen until the next window: no redraws, no look for threads, drains only
        with self._lock:
            if self.windows and not self.windows[-1][1]:
                self.windows[-1][1] = now

    def disarm(self) -> RawSamples:
        """Disable and read everything: the samples of the windows (or of the exchange) and the books. Never
        raises."""
        self._armed.clear()
        self._live.clear()
        with self._lock:
            self._ioctl(IOC_DISABLE)
            for buffer in self.buffers:
                buffer.drain(self.log)
            end = self._snapshot()
            raw = self._select(end, time.perf_counter_ns())
            self.last_log = self.log  # for measurements (benchmarks/perf_profile.py, the tests)
            self.log, self.windows, self.start = SampleLog(), [], None
        return raw

    def collect(self, calls: int = 1) -> CallProfile:
        """Disable, read and attribute; called once the worker is frozen, so /proc/<pid>/maps holds still
        (re-read every time: libraries can be loaded at any time). ``calls``: the operator calls of the
        exchange; where windows were opened, their number instead. Never raises."""
        raw = self.disarm()
        maps = {pid: read_maps(pid) for pid in raw.pids | {self.pid}}
        # only where the judge sees the seccomp filter in force: where it could not be installed, a child may be
        # anything the submission forked. A filter cannot be removed, so once seen it is not read again.
        self.filtered = self.filtered or (self.children_are_toolchain and seccomp_filtered(self.pid))
        toolchain = self.children_are_toolchain and self.filtered
        period = raw.period_ns or self.period_ns
        profile = attribute(raw, maps, self.own, period_ns=period, calls=raw.windows or calls,
                            toolchain_except=self.pid if toolchain else None)
        profile.cpu_ns, profile.unsampled_ns, profile.accounting = raw.cpu_ns, raw.unsampled_ns, raw.accounting
        beyond = raw.unsampled_ns - UNSAMPLED_ALLOWANCE_NS
        if beyond > 0:
            profile.objects[UNSAMPLED] = ObjectSamples(UNKNOWN, max(1, round(beyond / period)))
        profile.error = self.error
        return profile

    def _select(self, end: Snapshot, now: int) -> RawSamples:
        """The samples inside the windows, each once, and the books of the CPU they could not see."""
        windows = [(s, e or now) for s, e in self.windows] or [(self.armed_at, now)]
        starts = [s for s, _e in windows]
        raw = RawSamples(lost=self.log.lost, windows=len(self.windows), accounting=self.accounting)
        start = self.start
        before = start.threads if start is not None else {}
        old = 0
        credit = 0  # CPU the samples of threads born in the windows stand for, before the judge's events followed them
        for when, pid, tid, ip, kernel, stream, period in self.log.records:
            i = bisect.bisect_right(starts, when) - 1
            if i < 0 or when > windows[i][1]:
                raw.dropped += 1
                continue
            inherited = stream not in self.top_ids
            since = self.since.get(tid)
            if since is not None and when >= since and inherited:
                raw.dropped += 1  # an inherited copy's sample of a thread the judge's own events follow
                continue
            raw.ips[(pid, ip, kernel)] += 1
            raw.tids.add(tid)
            if pid == self.pid:
                if tid in before:
                    old += 1
                elif inherited:  # exact: an inherited copy keeps the period its thread was born with
                    credit += min(period, int(PERIOD_HIGH * self.period_ns))
        if start is None or not self.counters:
            return raw
        raw.cpu_ns = max(0, end.inherited_ns - start.inherited_ns)
        old_cpu = sum(max(0, end.threads.get(tid, cpu) - cpu) for tid, cpu in before.items())
        followed = sum(cpu for tid, cpu in end.threads.items() if tid not in before)  # counted from their cover
        if old >= 20 and self.randomise:
            raw.period_ns = min(int(PERIOD_HIGH * self.period_ns), max(int(PERIOD_LOW * self.period_ns),
                                                                        old_cpu // old))
        else:
            raw.period_ns = self.period_ns
        # What is left of the CPU of the threads born in the windows once the time the judge's own events followed
        # them (sampled at random) and the periods their inherited copies' samples stand for are taken off was
        # never seen: a thread ended before its first period, or its tail after the last sample (under one period
        # for an honest thread, and only until the judge sees the thread).
        raw.unsampled_ns = max(0, raw.cpu_ns - old_cpu - followed - credit)
        return raw

    def _snapshot(self) -> Snapshot:
        threads = dict(self.own_base)
        for tid, entry in self.covered.items():
            if entry.pid == self.pid:
                threads[tid] = threads.get(tid, 0) + read_count(entry.own_fd)
        return Snapshot(sum(read_count(fd) for fd in self.counters), threads)

    # ------------------------------------------------------------ the judge's thread

    def _ioctl(self, *requests: int) -> None:
        for entry in self.covered.values():
            for fd in entry.fds:
                for request in requests:
                    try:
                        fcntl.ioctl(fd, request, 0)
                    except OSError as exc:
                        self.error = self.error or f"perf ioctl {request:#x}: {exc}"

    def _set_period(self, fd: int) -> None:
        try:
            fcntl.ioctl(fd, IOC_PERIOD, COUNT.pack(self._period()))
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                self.error = self.error or f"perf period ioctl: {exc}"

    def _redraw_all(self) -> None:
        """A new period for every event (the worker frozen: no interrupt it could see)."""
        if self.randomise:
            for entry in self.covered.values():
                for fd in entry.fds:
                    self._set_period(fd)

    def _redraw_running(self) -> None:
        """A new period for each running thread's event on its current CPU: an ioctl on a running task's event
        interrupts that CPU, so the others are left alone (their periods were drawn when the window opened)."""
        for entry in self.covered.values():
            if entry.stat_fd is None:
                continue
            try:
                where = stat_where(os.pread(entry.stat_fd, 1024, 0))
            except OSError:
                entry.stat_fd = self._closed_stat(entry.stat_fd)  # the thread has exited
                continue
            if where is None or where[0] != "R":
                continue
            index = self.cpu_index.get(where[1])
            if index is not None and index < len(entry.fds):
                self._set_period(entry.fds[index])
                self.resets += 1

    @staticmethod
    def _closed_stat(fd: int) -> None:
        try:
            os.close(fd)
        except OSError:
            pass

    def _discover(self) -> None:
        """Threads born since the events were opened get the judge's own events at once (their inherited copies
        keep the period of their birth, out of reach of the period ioctl)."""
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return
        now = time.perf_counter_ns()
        for name in tids:
            try:
                tid = int(name)
            except ValueError:
                continue
            if tid in self.covered:
                continue
            if (len(self.covered) + 1) * (len(self.cpus) + 1) > MAX_EVENTS:
                self.crowded = max(self.crowded, len(tids))
                return
            found = self._cover(self.pid, tid, enabled=True, now=now, double=True)
            if isinstance(found, Unavailable):
                self.error = self.error or f"following thread {tid}: {found.reason}"

    def _drain_loop(self) -> None:
        last = time.monotonic()
        low, high = RESET_CLIP_S
        while not self._closed.is_set():
            if not self._armed.wait(0.5):
                continue
            live = self.randomise and self._live.is_set()
            if live:  # a plain sleep: Event.wait with a timeout costs about 25 us of CPU, the sleep about 2
                time.sleep(min(high, max(low, self.rng.expovariate(1e9 / (RESET_MEAN * self.period_ns)))))
            elif self.randomise:  # the worker frozen between two windows: only the drains, until it runs again
                self._live.wait(DRAIN_INTERVAL_S)
            else:  # fixed periods: only the drains
                self._closed.wait(DRAIN_INTERVAL_S)
            if self._closed.is_set():
                return
            with self._lock:
                if self._closed.is_set():
                    return
                if not self._armed.is_set():
                    continue
                if live and self._live.is_set():
                    self._redraw_running()
                    self._discover()
                if time.monotonic() - last >= DRAIN_INTERVAL_S:
                    last = time.monotonic()
                    for buffer in self.buffers:
                        buffer.drain(self.log)

    def close(self) -> None:
        self._closed.set()
        self._armed.clear()
        self._live.set()  # wakes the drain thread, which sees the sampler closed
        with self._lock:
            self._uncover_all()
            for buffer in self.buffers:
                buffer.close()
            self.buffers = []
            self._close_fds(self.owners)
            self._close_fds(self.counters)
        self._armed.set()  # a drain thread waiting to be armed returns now, not after its half-second wait
        if self._drainer is not None and self._drainer is not threading.current_thread():
            self._drainer.join(1.0)

    def __enter__(self) -> CallSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

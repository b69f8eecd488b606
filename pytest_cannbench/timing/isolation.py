"""Quiet windows: while one xdist worker times a case, the session's other workers hold off
their accuracy work, and the machine's load around each timed window is recorded.

**The fence.** One file per session under the lock directory (``$TMPDIR/cannbench-locks-<uid>/``), made by the
controller and handed to xdist workers in workerinput. A case's accuracy work (goldens, candidate calls,
comparisons) holds it *shared*; a timed window holds it *exclusive*, taken before the device lock (never the
other way round, and a shared hold is never kept while waiting on the device lock), so no two locks are ever
waited on in opposite orders. A second file, the gate, gives a waiting window priority: a shared taker passes
the gate (exclusive, held only while it acquires the fence), and a window holds the gate while it waits for the
fence, so new accuracy work queues behind it instead of starving it. Two sessions have two fences: each fences
only its own workers (the device lock already serialises timing across sessions).
``--cann-timing-isolation off`` makes :class:`Fence` a no-op.

**Load.** :func:`load_sample` reads the 1-minute load average, where the kernel has PSI the share of the last
10 s some task waited for a CPU (``/proc/pressure/cpu`` ``some avg10``) and its running total, and the CPU time
the hypervisor stole (``/proc/stat``). :func:`windows_under_load` is the rule that flags a case
``timed_under_load``: the stall and the steal *inside* its windows (the totals' differences between each window's
start and end), which only what competed with the timed call can cause. The averages at the edges are kept for
the reports but no longer decide: they cover the minute or the 10 s before, when this session's own accuracy work
ran (documented in docs/timing.md, "Isolation").
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pytest_cannbench.figures import window_figures
from pytest_cannbench.timing.devices import lock_dir

FENCE_WORKERINPUT_KEY = "cannbench_fence"

# timed_under_load: a window's start or end saw more runnable work than the session's cores could serve
LOAD_FACTOR = 1.5  # 1-minute load average above 1.5x the session's usable cores
PSI_SOME_AVG10 = 20.0  # or some task waited for a CPU during more than 20% of the last 10 s
PSI_PATH = "/proc/pressure/cpu"
STAT_PATH = "/proc/stat"
STEAL_PCT = 20.0  # the hypervisor ran something else on this VM's CPUs for more than 20% of the windows' CPU time


def new_fence_path() -> Path:
    """A fresh per-session fence file (the controller's; workers get its path)."""
    path = lock_dir() / f"session-{os.getpid()}-{os.urandom(6).hex()}.fence"
    path.touch()
    return path


def remove_fence(path: Path) -> None:
    for p in (path, gate_path(path)):
        with contextlib.suppress(OSError):
            p.unlink()


def gate_path(path: Path) -> Path:
    return path.with_suffix(".gate")


class Fence:
    """The session's quiet-window fence; ``Fence(None)`` does nothing (isolation off, or timing off)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._depth = 0  # nested shared holds of this process (one flock)
        self._exclusive = False
        self._held: _Held | None = None  # the outermost shared hold, while there is one

    @property
    def active(self) -> bool:
        return self.path is not None

    @contextlib.contextmanager
    def shared(self, spans: list[list[float]] | None = None) -> Iterator[Hold]:
        """Accuracy work: blocks while a timed window holds the fence; ``spans`` gets the monotonic spans held.
        Work done in steps calls the yielded hold's :meth:`Hold.let_windows_pass` between them."""
        # nested, or inside this process's own window (the window's work): never locked again, as one process
        # holding two open file descriptions of one flock would wait on itself
        if self.path is None or self._depth or self._exclusive:
            self._depth += 1
            try:
                yield Hold(self)
            finally:
                self._depth -= 1
            return
        with open(self.path, "a") as fh, open(gate_path(self.path), "a") as gate:
            held = _Held(fh, gate, spans)
            held.take()
            self._depth, self._held = 1, held
            try:
                yield Hold(self)
            finally:
                self._depth, self._held = 0, None
                held.release()

    def let_windows_pass(self) -> float:
        """Between two steps of accuracy work under a shared hold: when a timed window waits for the fence, end
        the hold (and its span), let the window run, and take the fence again behind it; the seconds that took.
        Without it a window waits for the whole of a long loop (a case's timed sets, their verdicts) while its
        core idles: the waiting is the same, the loss is not (benchmarks/results/performance-rounds.md, Round 9)."""
        held = self._held
        if held is None or self._exclusive or not held.window_waiting():
            return 0.0
        started = time.monotonic()
        held.release()
        held.take()
        return time.monotonic() - started

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """A timed window: waits until no accuracy work of the session runs, and keeps new work out."""
        if self.path is None:
            yield
            return
        if self._depth or self._exclusive:
            raise RuntimeError("a timed window inside accuracy work or another window: the fence would deadlock")
        with open(gate_path(self.path), "a") as gate, open(self.path, "a") as fh:
            fcntl.flock(gate, fcntl.LOCK_EX)
            try:
                fcntl.flock(fh, fcntl.LOCK_EX)
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)
            self._exclusive = True
            try:
                yield
            finally:
                self._exclusive = False
                fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass
class Hold:
    """What :meth:`Fence.shared` yields: lets a waiting window pass between steps of the work it covers (a nested
    or inert hold passes the outermost one's; none at all does nothing)."""

    fence: Fence

    def let_windows_pass(self) -> float:
        return self.fence.let_windows_pass()


@dataclass
class _Held:
    """One shared hold on the fence file, taken through the gate; every span it was held is added to ``spans``."""

    fh: IO[str]
    gate: IO[str]
    spans: list[list[float]] | None
    start: float | None = None  # while held

    def take(self) -> None:
        fcntl.flock(self.gate, fcntl.LOCK_EX)  # behind a window that waits at the gate
        try:
            fcntl.flock(self.fh, fcntl.LOCK_SH)
        finally:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
        self.start = time.monotonic()

    def release(self) -> None:
        if self.start is None:  # interrupted while taking it again
            return
        start, end, self.start = self.start, time.monotonic(), None
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        if self.spans is not None:
            self.spans.append([start, end])

    def window_waiting(self) -> bool:
        """Someone holds the gate: a window waiting for the fence (or, for microseconds, another worker's shared
        taker passing through it, for which letting go costs one more hold and nothing else)."""
        try:
            fcntl.flock(self.gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self.gate, fcntl.LOCK_UN)
        return False


# ---------------------------------------------------------------- machine load per timed window


def _psi_some(path: str) -> dict[str, str] | None:
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith("some "):
                    return dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)
    except (OSError, ValueError):
        return None
    return None


def cpu_pressure(path: str = PSI_PATH) -> float | None:
    """``some avg10`` of the kernel's CPU pressure (percent), None where PSI is absent or unreadable."""
    try:
        return float((_psi_some(path) or {})["avg10"])
    except (KeyError, ValueError):
        return None


def cpu_stall_us(path: str = PSI_PATH) -> float | None:
    """``some total``: microseconds some task waited for a CPU since boot, None where PSI is absent."""
    try:
        return float((_psi_some(path) or {})["total"])
    except (KeyError, ValueError):
        return None


def steal_s(path: str = STAT_PATH) -> float | None:
    """CPU seconds the hypervisor stole from this machine since boot, all CPUs summed (``/proc/stat``)."""
    try:
        with open(path) as fh:
            fields = fh.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK") if fields and fields[0] == "cpu" else None
    except (OSError, ValueError, IndexError):
        return None


def load_sample() -> dict[str, float | None]:
    try:
        load: float | None = os.getloadavg()[0]
    except OSError:
        load = None
    return {"loadavg1": load, "cpu_some_avg10": cpu_pressure(), "cpu_some_total_us": cpu_stall_us(),
            "steal_s": steal_s(), "cpus": os.cpu_count() or 1, "t": time.monotonic()}


def windows_under_load(windows: list[dict[str, Any]], cores: int) -> str | None:
    """Why a case's timed windows (``{"start": load_sample(), "end": load_sample()}`` each) ran under load, or
    None. The rule, over all its windows together (:func:`window_figures`): some task waited for a CPU during
    more than ``PSI_SOME_AVG10`` percent of their time, or the hypervisor stole more than ``STEAL_PCT`` percent
    of their CPU time. Where neither total can be read (no PSI and no ``/proc/stat``, or samples of an older
    version), the edges' averages decide (:func:`under_load`, with ``cores`` the session's usable cores)."""
    figures = window_figures(windows)
    stall, steal = figures["cpu_stall_pct"], figures["steal_pct"]
    if stall is None and steal is None:
        return under_load([s for w in windows for s in w.values() if isinstance(s, dict)], cores)
    if stall is not None and stall > PSI_SOME_AVG10:
        return f"some task waited for a CPU during {stall:.1f}% of the timed windows"
    if steal is not None and steal > STEAL_PCT:
        return f"the hypervisor stole {steal:.1f}% of the CPU time during the timed windows"
    return None


def under_load(samples: list[dict[str, float | None]], cores: int) -> str | None:
    """Why a window was timed under load, or None. The rule: at its start or its end, the 1-minute load average
    exceeded ``LOAD_FACTOR`` times the session's usable cores, or CPU pressure (``some avg10``) exceeded
    ``PSI_SOME_AVG10`` percent. Missing readings never flag."""
    cores = max(1, cores)
    for sample in samples:
        load, psi = sample.get("loadavg1"), sample.get("cpu_some_avg10")
        if load is not None and load > LOAD_FACTOR * cores:
            return f"load average {load:.2f} on {cores} core{'s' if cores > 1 else ''}"
        if psi is not None and psi > PSI_SOME_AVG10:
            return f"CPU pressure {psi:.1f}% (some avg10)"
    return None

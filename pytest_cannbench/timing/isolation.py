"""Quiet windows (issue 20 item 3): while one xdist worker times a case, the session's other workers hold off
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

**Load.** :func:`load_sample` reads the 1-minute load average and, where the kernel has PSI, the share of the
last 10 s some task waited for a CPU (``/proc/pressure/cpu`` ``some avg10``); :func:`under_load` is the rule
that flags a window ``timed_under_load`` (documented in docs/timing.md, "Isolation").
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from pytest_cannbench.timing.devices import lock_dir

FENCE_WORKERINPUT_KEY = "cannbench_fence"

# timed_under_load: a window's start or end saw more runnable work than the session's cores could serve
LOAD_FACTOR = 1.5  # 1-minute load average above 1.5x the session's usable cores
PSI_SOME_AVG10 = 20.0  # or some task waited for a CPU during more than 20% of the last 10 s
PSI_PATH = "/proc/pressure/cpu"


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

    @property
    def active(self) -> bool:
        return self.path is not None

    @contextlib.contextmanager
    def shared(self, spans: list[list[float]] | None = None) -> Iterator[None]:
        """Accuracy work: blocks while a timed window holds the fence; ``spans`` gets the monotonic span held."""
        # nested, or inside this process's own window (the window's work): never locked again, as one process
        # holding two open file descriptions of one flock would wait on itself
        if self.path is None or self._depth or self._exclusive:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        with open(self.path, "a") as fh:
            with open(gate_path(self.path), "a") as gate:
                fcntl.flock(gate, fcntl.LOCK_EX)
                try:
                    fcntl.flock(fh, fcntl.LOCK_SH)
                finally:
                    fcntl.flock(gate, fcntl.LOCK_UN)
            self._depth = 1
            start = time.monotonic()
            try:
                yield
            finally:
                end = time.monotonic()
                self._depth = 0
                fcntl.flock(fh, fcntl.LOCK_UN)
                if spans is not None:
                    spans.append([start, end])

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


# ---------------------------------------------------------------- machine load per timed window


def cpu_pressure(path: str = PSI_PATH) -> float | None:
    """``some avg10`` of the kernel's CPU pressure (percent), None where PSI is absent or unreadable."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith("some "):
                    fields = dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)
                    return float(fields["avg10"])
    except (OSError, ValueError, KeyError):
        return None
    return None


def load_sample() -> dict[str, float | None]:
    try:
        load: float | None = os.getloadavg()[0]
    except OSError:
        load = None
    return {"loadavg1": load, "cpu_some_avg10": cpu_pressure()}


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

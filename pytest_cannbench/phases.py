"""Where a case's time and memory go: named phases measured where the work happens.

The judge, the golden worker and the judge's ``/proc`` view of the candidate worker each time their own part of a
case, so overhead is cut where it is measured, not where it is guessed (``benchmarks/phases.py``,
``docs/performance.md``). Nothing here is scored or compared between runs. A phase ``p`` lands in
``CaseOutcome.seconds`` as ``p`` (wall seconds, summed over the case's passes), ``p_cpu`` (CPU seconds of the
process doing it, all its threads) and ``p_peak_mib`` (that process's peak resident MiB during it, the largest
over the passes; the kernel's high-water mark, reset at the phase's start where the process is ours).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# phase -> what it covers (benchmarks/phases.py prints them in this order)
PHASES = {
    "start": "process starts: golden and candidate workers (imports, torch)",
    "memory_wait": "waiting for room in the session's memory pool (workers.memory_pool)",
    "inputs": "input generation in the golden worker",
    "inputs_judge": "the judge's copy of the inputs: mapped from the golden worker's file, or generated again",
    "golden": "the fp64 golden (golden worker)",
    "native": "the native-dtype reference (golden worker)",
    "reply": "golden results to the judge (the worker's write, the judge's map)",
    "transfer": "inputs into the candidate worker's shared region",
    "call": "the candidate call, seen from the judge (exchange, worker side included)",
    "contract": "the judge's checks after the call (/proc, inputs untouched, outputs decoded)",
    "compare": "the verdict: get_output hook, precision standard, index checks",
    "timing": "timed batches and anchors",
}
# parts of "timing" (already inside it: printed beneath it, never summed with the phases above)
TIMING_PARTS = {
    "timing_sets": "the timed input sets' references (golden worker: inputs, fp64 golden, native), room in the regions",
    "timing_wait": "waiting for the quiet-window fence and the device lock",
    "timing_window": "inside the lock: flushes, streamed writes, candidate and baseline calls",
    "timing_verify": "every timed output judged against its own set's reference",
}
SUFFIXES = ("", "_cpu", "_peak_mib")


def reset_peak(pid: int | str = "self") -> bool:
    """Reset a process's resident high-water mark (``VmHWM``), so the next :func:`peak_mib` is this phase's."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_mib(pid: int | str = "self", field_name: str = "VmHWM") -> float | None:
    """A process's ``VmHWM`` (peak resident) or ``VmRSS`` in MiB, None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass
class PhaseClock:
    """One case's phases, added to as the work happens; :attr:`seconds` is what the outcome records."""

    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, wall: float, cpu: float | None = None, peak: float | None = None) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + wall
        if cpu is not None:
            self.seconds[f"{name}_cpu"] = self.seconds.get(f"{name}_cpu", 0.0) + cpu
        if peak is not None:
            self.seconds[f"{name}_peak_mib"] = max(self.seconds.get(f"{name}_peak_mib", 0.0), peak)

    def merge(self, other: dict[str, float]) -> None:
        """Add another clock's (or a worker reply's) phases, keeping peaks as maxima."""
        for key, value in other.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if key.endswith("_peak_mib"):
                self.seconds[key] = max(self.seconds.get(key, 0.0), float(value))
            else:
                self.seconds[key] = self.seconds.get(key, 0.0) + float(value)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a block of this process's work: wall, this process's CPU, its peak resident memory."""
        reset = reset_peak()
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0, time.process_time() - c0, peak_mib() if reset else None)

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Time a part of an enclosing phase (wall and CPU only: resetting the peak would cut the enclosing
        phase's)."""
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0, time.process_time() - c0)


def measured(clock: PhaseClock | None) -> PhaseClock:
    """The given clock, or a throwaway one (callers outside a graded case, e.g. the quality gate)."""
    return clock if clock is not None else PhaseClock()

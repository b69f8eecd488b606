"""The judge's side of timing: plan a case's timed batch, check what comes back, summarise it.

Protocol (the same on every device, ``docs/timing.md``): ``--cann-warmup`` calls on
the correctness inputs, then ``--cann-repeat`` timed calls, each on its own input
set generated from a derived seed before timing starts, each after a cache flush
and between device synchronisations. Every timed output is judged against the
golden of its own input set (a mismatch is ``timed_output_wrong``: a kernel that is
only right when checked is wrong). The case time is the median of the per-call
times; the spread (inter-quartile range over the median) is recorded.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

# Slack of the CPU-time floor: reading the request and encoding the reply cost the worker a little CPU outside
# the phases it reports. Measured on the bundled example (-n 2, 95 batches) and the timing tests under load:
# at most 0.5 ms per batch; docs/timing.md.
CPU_SLACK_S = 0.003
CPU_SLACK_FRACTION = 0.05
UNACCOUNTED_S = 1e-4  # the phases of the timed loop tile it: only float rounding may separate their sum from it


@dataclass
class TimingSummary:
    median_us: float
    p25_us: float
    p75_us: float
    min_us: float
    max_us: float
    spread: float  # (p75 - p25) / median
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(seconds: list[float]) -> TimingSummary:
    us = sorted(s * 1e6 for s in seconds)
    median = statistics.median(us)
    if len(us) >= 4:
        q = statistics.quantiles(us, n=4, method="inclusive")
        p25, p75 = q[0], q[2]
    else:
        p25, p75 = us[0], us[-1]
    return TimingSummary(median_us=median, p25_us=p25, p75_us=p75, min_us=us[0], max_us=us[-1],
                         spread=(p75 - p25) / median if median > 0 else math.inf, samples=len(us))


def implausible(seconds: list[float], phases: dict[str, float], wall_s: float, timer: str,
                cpu_s: float | None = None, threads: int = 1,
                busiest_s: float | None = None) -> str | None:
    """Why the worker's account of a batch cannot be true, or None.

    The worker's clock runs in the submission's process, so a submission could slow it down or
    patch it. Observations the worker cannot touch bound its account: the judge's own clock around
    the exchange (the phases must fit inside it) and the CPU time the kernel charged to the worker's
    threads (read from /proc). No thread runs longer than the wall time it had, so the busiest
    thread's CPU time is a floor for the batch however short it is, and all threads' CPU shared over
    the worker's thread budget is another; a clock slowed down reports less than either. Scheduling
    delays on a loaded machine inflate wall time, never CPU time, so the floor holds there too. The
    slack covers only what the worker does outside its reported phases (reading the request,
    encoding the reply). The phases must also account for the worker's own total.
    """
    if not seconds or any(not math.isfinite(s) or s <= 0 for s in seconds):
        return f"non-positive or non-finite call times {seconds[:5]}"
    total, prepare = phases.get("total", 0.0), phases.get("prepare", 0.0)
    reported = prepare + total + phases.get("guard", 0.0)
    if reported > wall_s + 0.002:
        return f"the worker reports {reported * 1e3:.2f} ms for a batch the judge saw take {wall_s * 1e3:.2f} ms"
    bounds = [b for b in (None if cpu_s is None else cpu_s / max(1, threads), busiest_s) if b is not None]
    if bounds:
        used = max(bounds)
        if reported < used - (CPU_SLACK_S + CPU_SLACK_FRACTION * used):
            return (f"the worker accounts for {reported * 1e3:.2f} ms of a batch whose busiest thread alone "
                    f"ran {used * 1e3:.2f} ms on the CPU (its clock runs slow)")
    if timer in ("cpu_clock", "host_clock"):
        inner = sum(phases.get(k, 0.0) for k in ("warmup", "flush", "calls", "write"))
        if abs(sum(seconds) - phases.get("calls", 0.0)) > 1e-6 + 1e-6 * abs(sum(seconds)):
            return "the call times do not add up to the reported calls phase"
        # the worker's phases tile its timed loop (worker_timing.run_batch): beyond rounding, a gap means the
        # account was made up
        if abs(total - inner) > UNACCOUNTED_S + 1e-6 * total:
            return (f"{(total - inner) * 1e3:.2f} ms of the timed loop are not accounted for by warm-up, flushes "
                    "and calls")
    return None


@dataclass
class CaseTiming:
    """What the reports say about a case's speed (builtins only: it travels in report.cann)."""

    measured: bool
    reason: str = ""  # why not measured
    device: str = ""
    timer: str = ""
    t_cand_us: float | None = None
    cand: dict[str, Any] | None = None  # TimingSummary
    t_baseline_us: float | None = None
    baseline: dict[str, Any] | None = None
    baseline_source: str = ""
    t_hw_us: float | None = None
    t_hw_source: str = ""
    bytes: float | None = None
    flops: float | None = None
    input_sets: int = 0
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    windows: list[list[float]] = field(default_factory=list)  # time.monotonic() spans the device lock was held

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def not_measured(reason: str) -> dict[str, Any]:
    """A case that was not timed: "not measured", never a zero time."""
    return CaseTiming(measured=False, reason=reason).to_dict()

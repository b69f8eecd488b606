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
from typing import Any, Optional

# Slack of the plausibility check: reading inputs, encoding the reply and thread wake-ups cost a little CPU
# outside the phases the worker reports (measured: a few ms per batch).
CPU_SLACK_S = 0.010
CPU_SLACK_FRACTION = 0.15


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
                cpu_s: Optional[float] = None, threads: int = 1) -> Optional[str]:
    """Why the worker's account of a batch cannot be true, or None.

    The worker's clock runs in the submission's process, so a submission could slow it down or
    patch it. Two observations the worker cannot touch bound its account: the judge's own clock
    around the exchange (the phases must fit inside it) and the CPU time the kernel charged to the
    worker process (read from /proc): a clock slowed down reports far less time than the CPU the
    batch burnt. Scheduling delays on a loaded machine inflate the judge's wall time, never the
    worker's CPU time, so the lower bound uses the latter. The phases must also account for the
    worker's own total.
    """
    if not seconds or any(not math.isfinite(s) or s <= 0 for s in seconds):
        return f"non-positive or non-finite call times {seconds[:5]}"
    total, prepare = phases.get("total", 0.0), phases.get("prepare", 0.0)
    reported = prepare + total + phases.get("guard", 0.0)
    if reported > wall_s + 0.002:
        return f"the worker reports {reported * 1e3:.2f} ms for a batch the judge saw take {wall_s * 1e3:.2f} ms"
    if cpu_s is not None:
        floor = cpu_s / max(1, threads) - (CPU_SLACK_S + CPU_SLACK_FRACTION * cpu_s)
        if reported < floor:
            return (f"the worker accounts for {reported * 1e3:.2f} ms of a batch that used {cpu_s * 1e3:.0f} ms of CPU "
                    "(its clock runs slow)")
    if timer in ("cpu_clock", "host_clock"):
        inner = sum(phases.get(k, 0.0) for k in ("warmup", "flush", "calls", "write"))
        if abs(sum(seconds) - phases.get("calls", 0.0)) > 1e-6 + 1e-6 * abs(sum(seconds)):
            return "the call times do not add up to the reported calls phase"
        # only the loop's own statements lie between the phases: a gap beyond a preemption or two on a busy
        # machine (a few ms) means the account was made up
        if total - inner > 0.010 + 0.05 * total:
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
    t_cand_us: Optional[float] = None
    cand: Optional[dict[str, Any]] = None  # TimingSummary
    t_baseline_us: Optional[float] = None
    baseline: Optional[dict[str, Any]] = None
    baseline_source: str = ""
    t_hw_us: Optional[float] = None
    t_hw_source: str = ""
    bytes: Optional[float] = None
    flops: Optional[float] = None
    input_sets: int = 0
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    windows: list[list[float]] = field(default_factory=list)  # time.monotonic() spans the device lock was held

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def not_measured(reason: str) -> dict[str, Any]:
    """A case that was not timed: "not measured", never a zero time."""
    return CaseTiming(measured=False, reason=reason).to_dict()

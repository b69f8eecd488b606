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

import hashlib
import math
import random
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from pytest_cannbench.vocab.records import (
    CudaGraphRecord,
    IntervalRecord,
    RepeatRecord,
    TimingRecord,
    TimingSummaryRecord,
)
from pytest_cannbench.vocab.registry import host_clock

# Slack of the CPU-time floor: reading the request and encoding the reply cost the worker a little CPU outside
# the phases it reports. Measured on the bundled example (-n 2, 95 batches) and the timing tests under load:
# at most 0.5 ms per batch; docs/timing.md.
CPU_SLACK_S = 0.003
CPU_SLACK_FRACTION = 0.05
# Each streamed call's handshake (send "ready", the judge's SIGSTOP and SIGCONT, the wake-up, read "go") costs the
# worker's thread CPU time inside its "wait" phase, which the floor otherwise counts as free. Measured in the
# worker with thread_time() around the handshake (docs/timing.md, "The handshake itself is not free"). The judge
# counts the handshakes itself (one per timed call), so a worker cannot claim more of this allowance.
HANDSHAKE_CPU_S = 0.0006
# That cost is not a constant: on a quiet machine the worker wakes from each handshake onto a cold cache and an
# idle vCPU, and a fenced window on this VM measured 0.4 ms at the median and 2.5 ms at most (docs/timing.md). So
# the allowance is calibrated live on the baseline worker, trusted code that has never imported the submission and
# makes the same streamed handshakes, frozen and thawed the same way, in the same window: the candidate is allowed
# HANDSHAKE_MARGIN times the baseline's unaccounted CPU per handshake, never less than HANDSHAKE_CPU_S and never
# more than HANDSHAKE_CAP_S, so nothing the submission does to the machine buys it more than the cap.
HANDSHAKE_MARGIN = 2.0
HANDSHAKE_CAP_S = 0.0025
# The judge holds a streamed worker between the "ready" it receives and the "go" it sends; that interval lies
# inside the worker's own "wait" (sent ready ... received go), on the same monotonic clock, so a worker whose wait
# is shorter than the judge's hold has a clock running slow. Only the clock reads' rounding separates them.
HELD_SLACK_S = 0.0005
HELD_SLACK_FRACTION = 0.01
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

    def to_dict(self) -> TimingSummaryRecord:
        return cast(TimingSummaryRecord, asdict(self))  # the record's keys are the fields (tested)


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


def cpu_floor(phases: dict[str, float], cpu_s: float | None, threads: int, busiest_s: float | None,
              handshakes: int, handshake_s: float = HANDSHAKE_CPU_S) -> dict[str, float] | None:
    """The CPU-time floor of a batch, in ms: what the worker accounts for besides waiting (``accounted_ms``),
    the CPU its threads were charged (``used_ms``: all threads' CPU over the thread budget, or the busiest living
    thread, whichever is more; ``all_ms`` and ``busiest_ms`` are the two readings) and the slack allowed
    (``slack_ms``, with ``handshake_s`` per handshake). ``cpu_s`` comes from the judge's meter
    (``workers.cpu_meter``), which keeps the threads and children that exited inside the batch; the kernel runs
    the worker on ``threads`` CPUs at most (``workers.cpu_budget``), so all its CPU over that budget is a bound of
    the batch's time however many threads it fanned out to. None without a reading. While it waits for the judge
    to write a streamed call's set the worker is frozen: no CPU time, so the floor holds against what it says it
    did besides waiting (claiming a longer wait only lowers that)."""
    bounds = [b for b in (None if cpu_s is None else cpu_s / max(1, threads), busiest_s) if b is not None]
    if not bounds:
        return None
    used = max(bounds)
    reported = phases.get("prepare", 0.0) + phases.get("total", 0.0) + phases.get("guard", 0.0)
    busy = reported - max(0.0, phases.get("wait", 0.0))
    slack = CPU_SLACK_S + CPU_SLACK_FRACTION * used + handshake_s * handshakes
    floor = {"accounted_ms": busy * 1e3, "used_ms": used * 1e3, "slack_ms": slack * 1e3}
    for key, value in (("all_ms", cpu_s), ("busiest_ms", busiest_s)):
        if value is not None:
            floor[key] = value * 1e3
    return floor


def unaccounted_per_handshake(phases: dict[str, float], cpu_s: float | None, threads: int,
                              busiest_s: float | None, handshakes: int) -> float | None:
    """Seconds of CPU per handshake a worker's threads were charged beyond its own account of the batch (never
    below zero); None without a reading or a handshake. Of the trusted baseline worker, it is what a handshake
    costs on this machine in this window."""
    floor = cpu_floor(phases, cpu_s, threads, busiest_s, handshakes)
    if floor is None or handshakes <= 0:
        return None
    return max(0.0, floor["used_ms"] - floor["accounted_ms"]) / 1e3 / handshakes


def handshake_allowance(baseline_s: float | None) -> float:
    """The candidate's CPU allowance per handshake, from the baseline worker's unaccounted CPU per handshake in
    the same window (:func:`unaccounted_per_handshake`; None without one: the fixed allowance)."""
    if baseline_s is None or not math.isfinite(baseline_s):
        return HANDSHAKE_CPU_S
    return min(HANDSHAKE_CAP_S, max(HANDSHAKE_CPU_S, HANDSHAKE_MARGIN * baseline_s))


def implausible(seconds: list[float], phases: dict[str, float], wall_s: float, timer: str,
                cpu_s: float | None = None, threads: int = 1,
                busiest_s: float | None = None, handshakes: int = 0, held_s: float = 0.0,
                handshake_s: float = HANDSHAKE_CPU_S) -> str | None:
    """Why the worker's account of a batch cannot be true, or None.

    The worker's clock runs in the submission's process, so a submission could slow it down or
    patch it. Observations the worker cannot touch bound its account: the judge's own clock around
    the exchange (the phases must fit inside it) and the CPU time the kernel charged to the worker's
    threads (read from /proc). No thread runs longer than the wall time it had, so the busiest
    thread's CPU time is a floor for the batch however short it is, and all threads' CPU shared over
    the worker's thread budget is another; a clock slowed down reports less than either. Scheduling
    delays on a loaded machine inflate wall time, never CPU time, so the floor holds there too. The
    slack covers only what the worker does outside its reported phases (reading the request,
    encoding the reply) and, per streamed call, the handshake's own CPU (``handshakes``: counted by the
    judge; ``handshake_s`` each: :func:`handshake_allowance`). The phases must also account for the worker's
    own total, and a streamed worker's wait must cover the time the judge held it (``held_s``, the judge's
    clock): a clock slowed however selectively during the calls still has to run at full speed through the
    waits, where most of a streamed batch's time goes.
    """
    if not seconds or any(not math.isfinite(s) or s <= 0 for s in seconds):
        return f"non-positive or non-finite call times {seconds[:5]}"
    total, prepare = phases.get("total", 0.0), phases.get("prepare", 0.0)
    reported = prepare + total + phases.get("guard", 0.0)
    if reported > wall_s + 0.002:
        return f"the worker reports {reported * 1e3:.2f} ms for a batch the judge saw take {wall_s * 1e3:.2f} ms"
    wait = max(0.0, phases.get("wait", 0.0))
    if held_s > 0 and wait < held_s - (HELD_SLACK_S + HELD_SLACK_FRACTION * held_s):
        return (f"the worker reports {wait * 1e3:.2f} ms of waiting for the judge, who held it "
                f"{held_s * 1e3:.2f} ms by its own clock (its clock runs slow)")
    floor = cpu_floor(phases, cpu_s, threads, busiest_s, handshakes, handshake_s)
    if floor is not None and floor["accounted_ms"] < floor["used_ms"] - floor["slack_ms"]:
        parts = ", ".join(f"{k} {v * 1e3:.2f}" for k, v in sorted(phases.items()))
        bound = (f"whose busiest thread alone ran {floor['used_ms']:.2f} ms on the CPU"
                 if floor.get("busiest_ms", -1.0) >= floor["used_ms"] else
                 f"whose threads ran {floor['all_ms']:.2f} ms on the CPU (exited ones included where the meter "
                 f"keeps them), {floor['used_ms']:.2f} ms over its budget of {max(1, threads)} thread(s)")
        return (f"the worker accounts for {floor['accounted_ms']:.2f} ms of a batch {bound} (its clock runs slow; "
                f"allowed {floor['slack_ms']:.2f} ms for {handshakes} handshakes; its phases, ms: {parts})")
    if host_clock(timer):
        inner = sum(phases.get(k, 0.0) for k in ("warmup", "flush", "wait", "calls", "write"))
        if abs(sum(seconds) - phases.get("calls", 0.0)) > 1e-6 + 1e-6 * abs(sum(seconds)):
            return "the call times do not add up to the reported calls phase"
        # the worker's phases tile its timed loop (worker_timing.run_batch): beyond rounding, a gap means the
        # account was made up
        if abs(total - inner) > UNACCOUNTED_S + 1e-6 * total:
            return (f"{(total - inner) * 1e3:.2f} ms of the timed loop are not accounted for by warm-up, flushes, "
                    "waits and calls")
    return None


@dataclass
class CaseTiming:
    """What the reports say about a case's speed (builtins only: it travels in report.cann)."""

    measured: bool
    reason: str = ""  # why not measured
    device: str = ""
    timer: str = ""
    t_cand_us: float | None = None
    cand: TimingSummaryRecord | None = None
    t_baseline_us: float | None = None
    baseline: TimingSummaryRecord | None = None
    baseline_source: str = ""
    t_hw_us: float | None = None
    t_hw_source: str = ""
    bytes: float | None = None
    flops: float | None = None
    input_sets: int = 0
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    windows: list[list[float]] = field(default_factory=list)  # time.monotonic() spans the device lock was held
    # per window: {"start": {...}, "end": {...}} of timing.isolation.load_sample (load average, CPU pressure)
    load: list[dict[str, Any]] = field(default_factory=list)
    # CUDA, per window: {"start": reading, "end": reading} of timing.gpu_telemetry (clocks, temperature, power)
    gpu: list[dict[str, Any]] = field(default_factory=list)
    cuda_graph: CudaGraphRecord | None = None  # CUDA: --cann-cuda-graph and whether graphs timed the case
    accuracy_spans: list[list[float]] = field(default_factory=list)  # time.monotonic() spans of fenced accuracy work
    speedup: IntervalRecord | None = None  # T_base / T_cand, calls paired on the same input sets
    cand_interval: IntervalRecord | None = None  # T_cand's median (µs)
    repeat: RepeatRecord = field(default_factory=lambda: RepeatRecord())  # count used, target, achieved, why stopped
    # per candidate window, the judge's CPU check (cpu_floor): accounted_ms, used_ms, slack_ms, the handshakes,
    # the allowance per handshake (allowance_ms) and the baseline worker's unaccounted CPU per handshake it was
    # calibrated on (baseline_ms; None without a streamed baseline in the window)
    cpu_floor: list[dict[str, float | None]] = field(default_factory=list)
    # what measured the candidate's CPU for that check (workers.cpu_meter: perf_task_clock, cgroup_v1, cgroup_v2,
    # or the weaker schedstat, which misses threads that exit inside a batch)
    cpu_meter: str = ""

    def to_dict(self) -> TimingRecord:
        return cast(TimingRecord, asdict(self))  # the record's keys are the fields (tested)


def not_measured(reason: str) -> TimingRecord:
    """A case that was not timed: "not measured", never a zero time."""
    return CaseTiming(measured=False, reason=reason).to_dict()


# ---------------------------------------------------------------- paired speed-up

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclass
class Interval:
    """A point estimate and its bootstrap confidence interval; ``rel_half_width`` = half the width / estimate."""

    estimate: float
    low: float
    high: float
    rel_half_width: float
    samples: int
    confidence: float = CONFIDENCE

    def to_dict(self) -> IntervalRecord:
        return cast(IntervalRecord, asdict(self))  # the record's keys are the fields (tested)


def bootstrap_seed(secret: str, seed: int, key: str) -> int:
    """The bootstrap's seed: the session secret (or the evaluation seed) and the case, so a run reproduces its
    intervals exactly while nothing in them can be steered by a submission."""
    digest = hashlib.sha256(f"{secret}/{seed}/{key}/bootstrap".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _interval(estimate: float, stats: list[float], n: int) -> Interval:
    stats.sort()
    alpha = (1.0 - CONFIDENCE) / 2
    low, high = _percentile(stats, alpha), _percentile(stats, 1.0 - alpha)
    rel = (high - low) / 2 / estimate if estimate > 0 else math.inf
    return Interval(estimate, low, high, rel, n)


def paired_speedup(base_s: list[float], cand_s: list[float], seed: int,
                   resamples: int = BOOTSTRAP_RESAMPLES) -> Interval:
    """T_base / T_cand from calls paired on the same input set in the same window: the median of the per-pair
    ratios, with a percentile bootstrap over pairs. A drift between pairs moves both members of a pair, so it
    cancels in each ratio instead of widening the interval."""
    if len(base_s) != len(cand_s) or not base_s:
        raise ValueError("paired_speedup needs as many baseline as candidate times, at least one")
    ratios = [b / c for b, c in zip(base_s, cand_s) if b > 0 and c > 0]
    if not ratios:
        raise ValueError("paired_speedup needs positive times")
    return _interval(statistics.median(ratios), bootstrap_medians(ratios, seed, resamples), len(ratios))


def median_interval(seconds: list[float], seed: int, resamples: int = BOOTSTRAP_RESAMPLES) -> Interval:
    """The median call time (µs) with a percentile bootstrap interval: the precision of T_cand alone, for a
    case without a live baseline to pair with."""
    if not seconds:
        raise ValueError("median_interval needs at least one time")
    us = [s * 1e6 for s in seconds]
    return _interval(statistics.median(us), bootstrap_medians(us, seed, resamples), len(us))


def bootstrap_medians(values: list[float], seed: int, resamples: int) -> list[float]:
    """``[statistics.median(rng.choices(values, k=n)) for _ in range(resamples)]`` with ``rng =
    random.Random(seed)``, bit for bit, at array speed: numpy's MT19937 is given the generator's state and draws
    the same 53-bit doubles, each index is ``floor(u * n)`` as ``choices`` takes it, and an even count's median
    is the mean of its middle pair as ``statistics.median`` computes it (tests/unit/test_timing_stats.py). In
    pure Python it took 9 ms a call (2000 resamples of 40 times), several calls per timed case."""
    import numpy as np

    n = len(values)
    if n == 0 or resamples <= 0:
        raise ValueError("bootstrap_medians needs values and resamples")
    state = random.Random(seed).getstate()[1]
    generator = np.random.RandomState()
    generator.set_state(("MT19937", np.array(state[:624], dtype=np.uint32), int(state[624]), 0, 0.0))
    picks = np.floor(generator.random_sample(resamples * n) * float(n)).astype(np.intp)
    drawn = np.sort(np.asarray(values, dtype=np.float64)[picks].reshape(resamples, n), axis=1)
    half = n // 2
    medians = drawn[:, half] if n % 2 else (drawn[:, half - 1] + drawn[:, half]) / 2
    return [float(m) for m in medians]


def sets_needed(done: int, rel_half_width: float, target: float) -> int:
    """How many input sets in all should bring the relative half-width to ``target``: it shrinks as 1/sqrt(n)."""
    if rel_half_width <= target or not math.isfinite(rel_half_width):
        return done if rel_half_width <= target else 2 * done
    return math.ceil(done * (rel_half_width / target) ** 2)

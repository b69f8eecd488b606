"""The shapes of a case's records as plain JSON data: what crosses the xdist wire, ``results.jsonl`` and the
leaderboard's ``timing`` (``leaderboard.json``'s own entries are :mod:`pytest_cannbench.report.board`'s).

TypedDicts, so a record is an ordinary dict at run time (the wire and the files are unchanged) while mypy checks
every key a producer writes and a consumer reads. Each field's ``Annotated`` text is its description in the
published schema (``report/leaderboard.schema.json``, ``docs/leaderboard.md``). Non-finite numbers are floats here;
the files spell them ``"nan"``, ``"inf"`` and ``"-inf"`` (``report.leaderboard.dumps``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, NamedTuple, TypedDict, cast


class TimingSummaryRecord(TypedDict):
    """The distribution of one participant's per-call times (``timing.stats.TimingSummary``)."""

    median_us: Annotated[float, "median call time, µs"]
    p25_us: Annotated[float, "first quartile, µs"]
    p75_us: Annotated[float, "third quartile, µs"]
    min_us: Annotated[float, "fastest call, µs"]
    max_us: Annotated[float, "slowest call, µs"]
    spread: Annotated[float, "(p75 - p25) / median"]
    samples: Annotated[int, "timed calls"]


class IntervalRecord(TypedDict):
    """A point estimate and its percentile-bootstrap confidence interval (``timing.stats.Interval``)."""

    estimate: Annotated[float, "the estimate (median of the paired ratios, or the median time)"]
    low: Annotated[float, "lower end of the interval"]
    high: Annotated[float, "upper end of the interval"]
    rel_half_width: Annotated[float, "half the interval's width over the estimate"]
    samples: Annotated[int, "pairs or calls it was computed from"]
    confidence: Annotated[float, "the interval's confidence level"]


class RepeatRecord(TypedDict, total=False):
    """How many timed calls a case got and why it stopped (``--cann-repeat``)."""

    mode: Annotated[str, "auto or fixed"]
    count: Annotated[int, "input sets timed"]
    stopped: Annotated[str, "fixed, precision, hap_precision, max or budget"]
    target: Annotated[float | None, "auto: the speed-up's relative half-width aimed at"]
    achieved: Annotated[float, "the relative half-width reached"]
    precision_of: Annotated[str, "speedup, or t_cand without a live baseline"]
    hap_target: Annotated[float | None, "auto: the HAP interval's half-width aimed at"]
    hap_achieved: Annotated[float | None, "auto: the HAP interval's half-width reached"]
    budget_s: Annotated[float | None, "auto: the case's timing budget, s"]
    spent_s: Annotated[float, "the case's own timing work, s"]
    elapsed_s: Annotated[float, "wall time from the first timed set to the last, s"]


class CudaGraphRecord(TypedDict):
    mode: Annotated[str, "cann_cuda_graph: off, auto or on"]
    used: Annotated[bool, "CUDA graph replays timed the case"]


class TimingRecord(TypedDict, total=False):
    """What the reports say about a case's speed (``timing.stats.CaseTiming``); ``{}`` when timing was not
    considered, and only ``measured`` and the three times for a sealed hidden case."""

    measured: Annotated[bool, "the case was timed; false: see reason"]
    reason: Annotated[str, "why it was not measured"]
    device: Annotated[str, "the device it was timed on, e.g. cpu or cuda:0"]
    timer: Annotated[str, "the timer (vocab.registry.TIMERS)"]
    t_cand_us: Annotated[float | None, "T_cand: the candidate's median call time, µs"]
    cand: Annotated[TimingSummaryRecord | None, "the candidate's call times"]
    t_baseline_us: Annotated[float | None, "T_baseline: the baseline's median call time (or metadata), µs"]
    baseline: Annotated[TimingSummaryRecord | None, "the live baseline's call times"]
    baseline_source: Annotated[str, "live, or metadata:<hardware>"]
    t_hw_us: Annotated[float | None, "T_HW: the hardware limit, µs"]
    t_hw_source: Annotated[str, "where T_HW comes from: metadata or the roofline"]
    bytes: Annotated[float | None, "bytes the roofline counts"]
    flops: Annotated[float | None, "floating-point operations the roofline counts"]
    input_sets: Annotated[int, "fresh input sets timed"]
    flags: Annotated[list[str], "what the numbers need read with them (e.g. timed_under_load)"]
    notes: Annotated[list[str], "what happened while timing, in words"]
    windows: Annotated[list[list[float]], "monotonic spans the device lock was held (not in the leaderboard)"]
    load: Annotated[list[dict[str, Any]], "per window, the machine's load at its start and end"]
    gpu: Annotated[list[dict[str, Any]], "CUDA, per window: the card's clocks, temperature and power"]
    cuda_graph: Annotated[CudaGraphRecord | None, "CUDA: whether graphs timed the case"]
    accuracy_spans: Annotated[list[list[float]], "monotonic spans of fenced accuracy work (not in the leaderboard)"]
    speedup: Annotated[IntervalRecord | None, "T_baseline / T_cand from calls paired on the same input sets"]
    cand_interval: Annotated[IntervalRecord | None, "T_cand's median with its interval, µs"]
    repeat: Annotated[RepeatRecord, "how many timed calls and why it stopped"]
    cpu_floor: Annotated[list[dict[str, float | None]], "per window, the judge's CPU-time check of the worker"]
    cpu_meter: Annotated[str, "what measured the worker's CPU for that check"]
    t_compile_us: Annotated[float | None, "KernelBench: the torch.compile baseline's median, µs"]
    compile_baseline: Annotated[TimingSummaryRecord, "KernelBench: the torch.compile baseline's call times"]


class Times(NamedTuple):
    """The three times scoring reads, µs (None: not measured)."""

    cand: float | None
    baseline: float | None
    hw: float | None


_NON_FINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def _time(value: object) -> float | None:
    if isinstance(value, str):
        return _NON_FINITE.get(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value  # as written: an int stays an int (a board copies it as it is)


def times_of(record: Mapping[str, object] | None) -> Times:
    """T_cand, T_baseline and T_HW of a timing record or a leaderboard case entry (both carry them under the
    same keys); the files' ``"nan"``/``"inf"`` spellings read as floats, anything else that is not a number as
    None."""
    record = record or {}
    return Times(_time(record.get("t_cand_us")), _time(record.get("t_baseline_us")), _time(record.get("t_hw_us")))


TIME_KEYS = tuple(f"t_{name}_us" for name in ("cand", "baseline", "hw"))  # the keys times_of reads


def sealed_timing(timing: TimingRecord) -> TimingRecord:
    """What of a hidden case's timing may leave the judge: whether it was measured and the three times scoring
    needs (``{}`` stays ``{}``)."""
    if not timing:
        return TimingRecord()
    plain: Mapping[str, object] = timing
    sealed = {"measured": bool(timing.get("measured")), **{k: plain[k] for k in TIME_KEYS if k in plain}}
    return cast(TimingRecord, sealed)


class _CaseRecordKeys(TypedDict):
    key: Annotated[str, "the case key (vocab.casekey), e.g. level1/exp_3"]
    status: Annotated[str, "the case's status (outcome.Status)"]


class CaseRecord(_CaseRecordKeys, total=False):
    """A case outcome as plain JSON data (``outcome.CaseOutcome.to_dict``): ``report.cann`` on the xdist wire and
    the ``outcome`` of a ``results.jsonl`` line."""

    rel_path: Annotated[str, "the operator directory (or KernelBench problem file) under its bench root"]
    operator: Annotated[str, 'the operator\'s name from its proto ("" where unknown)']
    case_id: Annotated[int | None, "the case id; null for a case filed by position, a task error or a hidden case"]
    failure_type: Annotated[str | None, "why it did not pass (outcome.FailureType); null when it passed"]
    message: Annotated[str, "the verdict in words"]
    accuracy: Annotated[list[dict[str, Any]], "one verdict per output (judge.precision.OutputVerdict)"]
    seconds: Annotated[dict[str, float], "where the case's time went, phase by phase (phases.PhaseClock)"]
    golden_cached: Annotated[bool, "the golden outputs came from the golden cache"]
    warnings: Annotated[list[str], "warnings raised while the case ran"]
    timing: Annotated[TimingRecord, "the timing record ({} when timing was not considered)"]
    flags: Annotated[list[str], "the run's weaker modes (e.g. sandbox_off) and the guard's findings"]
    candidate: Annotated[str, 'the candidate of a multi-candidate run ("" otherwise)']
    split: Annotated[str, "public or hidden (outcome.Split)"]
    kernel_coverage: Annotated[
        dict[str, Any], "KernelBench: the share of forward's work in the submission's own kernels (guard.coverage)"
    ]


def timing_of(record: Mapping[str, Any]) -> TimingRecord:
    """A case record's (or a leaderboard case entry's) timing record; ``{}`` where it has none."""
    found = record.get("timing")
    return cast(TimingRecord, found) if isinstance(found, dict) else TimingRecord()

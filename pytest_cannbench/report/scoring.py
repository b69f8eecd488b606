"""The CANN Bench score, exactly as the official formula (docs/leaderboard.md, "The formula"), in one place.

Eq.3, per case: HAP = (T_base - T_hw) / ((T_cand - T_hw) + (T_base - T_hw)); 0.5 at the baseline, 1.0 at the
hardware limit. Faster than T_hw is impossible for an honest kernel: the grader fails such a case
(``implausible_time``), and a time below T_hw that reaches scoring anyway (a merged board) scores at most 1;
``cap`` clips every HAP at 1 (it only matters for such times). None when a time is NaN, T_cand or
T_hw is not positive, or the denominator is not positive. A missing baseline (not positive) is replaced by
the proxy max(10 * T_hw, 10). Eq.3 itself is :func:`pytest_cannbench.figures.hap`, which the judge's timing
shares.

Eq.4, per operator over its N cases: compile = 100 w_c (N - compile/runtime failures) / N, function =
100 w_f passed / N, performance = 100 w_p sum(HAP of passed cases, None as 0) / N; everything 0 when the
submission did not build (or install, or import). An operator never scores above 100. A failed
case deducts from the compile part unless it is a pure precision failure. Eq.5: level score = sum of its
operators; total = sum of all operators.

Used by the terminal, every report file and ``cannbench merge``: no other code computes a score (the judge
reads a HAP's interval, never a score).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_cannbench.figures import hap
from pytest_cannbench.outcome import BUILD_FAILURES, NOT_GRADED, PRECISION, TAINTING_FAILURES, TOO_LARGE
from pytest_cannbench.report.board import LevelEntry
from pytest_cannbench.vocab.records import CaseRecord, times_of, timing_of

W_COMPILE, W_FUNCTION, W_PERF = 0.2, 0.3, 0.5
WEIGHTS = {"compile": W_COMPILE, "function": W_FUNCTION, "performance": W_PERF}

# Failed cases of these types do not deduct from the compile/runtime part (the official "precision" family).
# A kernel right when checked but wrong when timed (timed_output_wrong) is not a precision problem: it deducts.
PRECISION_FAILURES = frozenset({PRECISION, "precision"})


@dataclass
class CaseScore:
    """What scoring needs of one case (a subset of its outcome)."""

    status: str
    failure_type: str | None
    t_cand_us: float | None = None
    t_baseline_us: float | None = None
    t_hw_us: float | None = None

    @classmethod
    def of(cls, outcome: CaseRecord) -> CaseScore:
        cand, baseline, hw = times_of(timing_of(outcome))
        return cls(outcome["status"], outcome.get("failure_type"), cand, baseline, hw)


@dataclass
class OperatorScore:
    score: float
    compile_score: float
    function_score: float
    performance_score: float
    cases_total: int
    cases_passed: int
    compile_runtime_failures: int
    haps: list[float | None] = field(default_factory=list)  # per case, None when not passed or unmeasured
    hap_flags: list[list[str]] = field(default_factory=list)
    score_error: str | None = None  # why the whole operator is 0
    cases_not_graded: int = 0  # too_large: in cases_total, but neither for nor against the score

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def operator_score(cases: list[CaseScore], *, cap: bool = False) -> OperatorScore:
    """Eq.4 over the operator's cases (every collected case, whatever happened to it), except the cases that were
    never graded because they do not fit this machine (``too_large``): they neither count for nor against it. An
    operator with no other case scores 0 with ``score_error`` too_large. ``haps`` and ``hap_flags`` still hold one
    entry per case given."""
    everything, cases = cases, [c for c in cases if c.status not in NOT_GRADED]
    n = max(len(cases), 1)
    haps: list[float | None] = []
    flags: list[list[str]] = []
    for c in everything:
        if c.status == "passed":
            value, why = hap(c.t_baseline_us, c.t_cand_us, c.t_hw_us, cap=cap)
        else:
            value, why = None, []
        haps.append(value)
        flags.append(why)
    passed = sum(1 for c in cases if c.status == "passed")
    total, skipped = len(everything), len(everything) - len(cases)
    build = next((c.status for c in cases if c.status in BUILD_FAILURES), None)
    if build is not None or not cases:
        error = build or (TOO_LARGE if everything else "no cases")
        return OperatorScore(0.0, 0.0, 0.0, 0.0, total, passed, len(cases), haps, flags, score_error=error,
                             cases_not_graded=skipped)
    if all(c.status == "missing" for c in cases):
        return OperatorScore(0.0, 0.0, 0.0, 0.0, total, 0, len(cases), haps, flags, score_error="missing",
                             cases_not_graded=skipped)
    caught = next((ft for ft in TAINTING_FAILURES if any(c.failure_type == ft for c in cases)), None)
    if caught is not None:  # caught cheating on one case: the operator's other cases are not trusted either
        return OperatorScore(0.0, 0.0, 0.0, 0.0, total, passed, len(cases), haps, flags, score_error=caught,
                             cases_not_graded=skipped)
    runtime = sum(1 for c in cases if c.status != "passed" and c.failure_type not in PRECISION_FAILURES)
    compile_part = 100.0 * W_COMPILE * (n - runtime) / n
    function_part = 100.0 * W_FUNCTION * passed / n
    perf_part = min(100.0 * W_PERF, 100.0 * W_PERF * sum(h for h in haps if h is not None) / n)
    return OperatorScore(min(100.0, compile_part + function_part + perf_part), compile_part, function_part,
                         perf_part, total, passed, runtime, haps, flags, cases_not_graded=skipped)


def level_of(rel_path: str) -> str:
    """The level an operator counts towards: the first path segment (``level1``), or ``""`` for a flat suite."""
    first = rel_path.split("/")[0]
    return first if first.startswith("level") and first[5:].isdigit() else ""


def totals(operators: Iterable[tuple[str, float]]) -> tuple[float, dict[str, LevelEntry]]:
    """Eq.5: the total and per-level sums of (rel_path, operator score) pairs."""
    total = 0.0
    levels: dict[str, LevelEntry] = {}
    for rel_path, score in operators:
        total += score
        entry = levels.setdefault(level_of(rel_path) or "other", LevelEntry(score=0.0, operators=0))
        entry["score"] += score
        entry["operators"] += 1
    return total, dict(sorted(levels.items(), key=lambda kv: (len(kv[0]), kv[0])))


def geometric_mean_speedup(pairs: Iterable[tuple[float | None, float | None]]) -> float | None:
    """Diagnostics only: the geometric mean of T_base / T_cand over cases with both times."""
    logs = [math.log(b / c) for b, c in pairs
            if b and c and b > 0 and c > 0 and math.isfinite(b) and math.isfinite(c) and math.isfinite(b / c)
            and b / c > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None

"""KernelBench metrics from case outcomes: per-problem correctness and speed-up, fast_p, geometric mean.

A problem is *correct* when every one of its items (the correctness trials and the timed case) passed. Its
speed-up is T_baseline / T_cand of the timed case (eager reference ``Model`` on the same device, same
protocol). ``fast_p`` is the share of graded problems that are correct and have a speed-up above ``p``
(KernelBench's definition: the denominator counts every graded problem, correct or not); ``fast_0`` is the
correctness rate, also without timing. The geometric mean is over correct problems with a measured speed-up.
A problem's ``kernel_coverage`` is the lowest of its items' (``guard.coverage``: the share of the forward's work in
the submission's own kernels), with the source that measured it.
Problems skipped before grading (``too_large``, no candidate, resumed) are not in the denominator.

KernelBench outcomes are those whose ``rel_path`` is a ``.py`` file (see :mod:`pytest_cannbench.kernelbench.spec`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, cast

from pytest_cannbench.report.board import KernelBenchSection, ProblemEntry
from pytest_cannbench.vocab.records import CaseRecord, times_of, timing_of

FAST_P = (0.0, 1.0, 1.5, 2.0)
NOT_GRADED = frozenset({"skipped"})


@dataclass
class ProblemResult:
    rel_path: str
    name: str
    correct: bool
    status: str  # passed, failed, missing, error, skipped (not graded) ...
    items_passed: int
    items_total: int
    t_cand_us: float | None = None
    t_baseline_us: float | None = None
    t_compile_us: float | None = None
    speedup: float | None = None
    speedup_vs_compile: float | None = None
    failure: str = ""  # the first failing item's type and message
    kernel_coverage: float | None = None  # the lowest of its items' (guard.coverage); None: not measured
    coverage_source: str = ""  # what measured that item's: cpu_samples, op_time or device_time

    @property
    def graded(self) -> bool:
        return self.status not in NOT_GRADED

    def to_dict(self) -> ProblemEntry:
        return cast(ProblemEntry, asdict(self))  # the entry's keys are the fields (tested)


def is_kernelbench(outcome: Mapping[str, Any]) -> bool:
    return str(outcome.get("rel_path") or "").endswith(".py")


def _ratio(base: float | None, cand: float | None) -> float | None:
    if base and cand and base > 0 and cand > 0 and math.isfinite(base / cand):
        return base / cand
    return None


def problem_results(outcomes: Iterable[CaseRecord]) -> list[ProblemResult]:
    by_problem: dict[str, list[CaseRecord]] = defaultdict(list)
    for o in outcomes:
        if is_kernelbench(o):
            by_problem[o.get("rel_path", "")].append(o)
    results = []
    for rel_path in sorted(by_problem):
        cases = sorted(by_problem[rel_path], key=lambda o: o.get("case_id") or 0)
        statuses = [o["status"] for o in cases]
        passed = statuses.count("passed")
        correct = passed == len(cases)
        failing = [s for s in statuses if s not in ("passed", "skipped")]
        status = "passed" if correct else "missing" if "missing" in failing else failing[0] if failing else "skipped"
        timed = next((timing_of(o) for o in reversed(cases) if timing_of(o).get("measured")), timing_of({}))
        bad = next((o for o in cases if o["status"] != "passed"), None)
        times = times_of(timed)
        result = ProblemResult(rel_path=rel_path, name=cases[0].get("operator") or rel_path, correct=correct,
                               status=status, items_passed=passed, items_total=len(cases),
                               t_cand_us=times.cand, t_baseline_us=times.baseline,
                               t_compile_us=timed.get("t_compile_us"),
                               failure=f"{bad.get('failure_type')}: {(bad.get('message') or '')[:300]}" if bad else "")
        measured = [o["kernel_coverage"] for o in cases if isinstance(o.get("kernel_coverage"), dict)
                    and isinstance(o["kernel_coverage"].get("share"), (int, float))]
        if measured:
            lowest = min(measured, key=lambda c: c["share"])
            result.kernel_coverage, result.coverage_source = float(lowest["share"]), str(lowest.get("source") or "")
        if correct:
            result.speedup = _ratio(result.t_baseline_us, result.t_cand_us)
            result.speedup_vs_compile = _ratio(result.t_compile_us, result.t_cand_us)
        results.append(result)
    return results


def fast_p(results: list[ProblemResult], p: float, *, key: str = "speedup") -> float | None:
    graded = [r for r in results if r.graded]
    if not graded:
        return None
    if p == 0:
        hits = sum(1 for r in graded if r.correct)
    else:
        hits = sum(1 for r in graded if r.correct and (getattr(r, key) or 0) > p)
    return hits / len(graded)


def geomean(values: Iterable[float | None]) -> float | None:
    logs = [math.log(v) for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(logs) / len(logs)) if logs else None


def section(outcomes: Iterable[CaseRecord]) -> KernelBenchSection | None:
    """The leaderboard's ``kernelbench`` section, or None when no KernelBench problem was collected."""
    outcomes = list(outcomes)
    results = problem_results(outcomes)
    if not results:
        return None
    graded = [r for r in results if r.graded]
    out = KernelBenchSection(
        # several candidates: each problem's items are every candidate's together (see summary_lines)
        candidates=len({o.get("candidate") for o in outcomes if is_kernelbench(o) and o.get("candidate")}),
        problems_total=len(results),
        problems_graded=len(graded),
        problems_correct=sum(1 for r in graded if r.correct),
        correctness_rate=fast_p(results, 0.0),
        fast_p={f"{p:g}": fast_p(results, p) for p in FAST_P},
        speedup_geomean=geomean(r.speedup for r in graded if r.correct),
        problems=[r.to_dict() for r in results],
    )
    if any(r.t_compile_us for r in results):
        out["fast_p_vs_compile"] = {f"{p:g}": fast_p(results, p, key="speedup_vs_compile") for p in FAST_P}
        out["speedup_vs_compile_geomean"] = geomean(r.speedup_vs_compile for r in graded if r.correct)
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def summary_lines(kb: Mapping[str, Any] | None, limit: int | None = 30) -> list[str]:
    """The terminal's KernelBench block: per problem, then fast_p and the geometric mean."""
    if not kb:
        return []
    lines = ["kernelbench (correct = every trial and the timed case passed; speed-up = eager Model / candidate; "
             "coverage = the forward's share in its own kernels):",
             f"  {'problem':<44} {'correct':>8} {'T_cand':>10} {'T_base':>10} {'speed-up':>9} {'coverage':>9}"]
    for r in kb["problems"][:limit]:
        mark = "yes" if r["correct"] else r["status"]
        speed = f"x{r['speedup']:.2f}" if r.get("speedup") else "-"
        cand = f"{r['t_cand_us']:.1f}" if r.get("t_cand_us") else "-"
        base = f"{r['t_baseline_us']:.1f}" if r.get("t_baseline_us") else "-"
        cover = f"{r['kernel_coverage']:.0%}" if r.get("kernel_coverage") is not None else "-"
        lines.append(f"  {r['rel_path']:<44} {mark:>8} {cand:>10} {base:>10} {speed:>9} {cover:>9}")
    if limit is not None and len(kb["problems"]) > limit:
        lines.append(f"  ... {len(kb['problems']) - limit} more problems (-v lists all)")
    fast = ", ".join(f"fast_{p} {_pct(v)}" for p, v in kb["fast_p"].items())
    geo = f"x{kb['speedup_geomean']:.2f}" if kb.get("speedup_geomean") else "-"
    lines.append(f"kernelbench: {kb['problems_correct']}/{kb['problems_graded']} problems correct "
                 f"({kb['problems_total'] - kb['problems_graded']} not graded); {fast}; geomean speed-up {geo}")
    if kb.get("candidates", 0) > 1:  # a helper read "0/5 problems correct" of a run whose honest candidate had 5/5
        lines.append(f"kernelbench: the {kb['candidates']} candidates' items together (a problem counts as correct "
                     "only when every candidate's pass); each candidate's own figures are on the candidates: lines")
    if kb.get("fast_p_vs_compile"):
        fast = ", ".join(f"fast_{p} {_pct(v)}" for p, v in kb["fast_p_vs_compile"].items())
        lines.append(f"kernelbench vs torch.compile: {fast}")
    return lines

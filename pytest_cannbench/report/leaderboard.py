"""The leaderboard: every case's outcome, scored by :mod:`scoring`, as one JSON document: a :class:`board.Board`
(its JSON Schema ships as ``report/leaderboard.schema.json`` and is rendered in ``docs/leaderboard.md``).

Built on the controller from the outcomes the items reported (or, for ``cannbench merge``, from earlier
leaderboards and ``results.jsonl`` files), so scores never depend on which process ran a case. Written
atomically: a reader never sees half a file.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

from pytest_cannbench import __version__
from pytest_cannbench.atomic import write_atomic
from pytest_cannbench.figures import hap_interval, window_figures
from pytest_cannbench.outcome import BUILD_FAILURES, MISSING, TAINTING_FAILURES, TOO_LARGE
from pytest_cannbench.report import splits
from pytest_cannbench.report.board import (
    AnchorSource,
    Board,
    CandidateBoards,
    CaseEntry,
    DegenerateAnchors,
    GpuFigures,
    LoadFigures,
    OperatorEntry,
    ScoredCases,
    Weights,
)
from pytest_cannbench.report.kernelbench import section as kernelbench_section
from pytest_cannbench.report.passk import candidate_boards
from pytest_cannbench.report.scoring import (
    WEIGHTS,
    CaseScore,
    geometric_mean_speedup,
    level_of,
    operator_score,
    totals,
)
from pytest_cannbench.vocab.casekey import split_key
from pytest_cannbench.vocab.records import CaseRecord, TimingRecord, times_of, timing_of

SCHEMA = "pytest-cannbench/leaderboard/1"
DEGENERATE_FLAGS = frozenset({"baseline_below_t_hw", "degenerate_anchors"})  # the HAP of such a case says nothing
MESSAGE_CHARS = 4000


def _case_entry(outcome: CaseRecord, hap: float | None, hap_flags: list[str], cap: bool) -> CaseEntry:
    timing = timing_of(outcome)
    repeat = timing.get("repeat") or {}
    times = times_of(timing)
    entry = CaseEntry(
        case_id=outcome.get("case_id"),
        key=outcome["key"],
        status=outcome["status"],
        failure_type=outcome.get("failure_type"),
        message=(outcome.get("message") or "")[:MESSAGE_CHARS],
        accuracy=outcome.get("accuracy") or [],
        t_cand_us=times.cand,
        t_baseline_us=times.baseline,
        t_hw_us=times.hw,
        anchor_source=AnchorSource(baseline=timing.get("baseline_source") or None,
                                   t_hw=timing.get("t_hw_source") or None),
        hap=hap,
        # the paired speed-up's interval, HAP at its ends, the calls used and the precision reached
        speedup=timing.get("speedup"),
        hap_interval=_listed(None if hap is None else hap_interval(
            times.baseline, times.hw, timing.get("speedup"), cap=cap)),
        timed_calls=repeat.get("count"),
        precision=repeat.get("achieved"),
        flags=sorted(set(list(timing.get("flags") or []) + hap_flags + list(outcome.get("flags") or []))),
        load=_load(timing),  # the machine's load around the timed windows
        gpu=_gpu(timing),  # the card's clocks around the windows, CUDA graphs
        timing=cast(TimingRecord, {k: v for k, v in timing.items() if k not in ("windows", "accuracy_spans")}),
        warnings=outcome.get("warnings") or [],
        split=outcome.get("split") or "public",
    )
    if outcome.get("kernel_coverage"):
        entry["kernel_coverage"] = outcome["kernel_coverage"]
    return entry


def _load(timing: TimingRecord) -> LoadFigures | None:
    """The highest load average and CPU pressure seen at a timed window's start or end, the stall and steal inside
    the windows (what decides the flag), and the flag."""
    samples = [sample for window in timing.get("load") or [] for sample in window.values()]
    if not samples:
        return None

    def peak(name: str) -> float | None:
        values = [s[name] for s in samples if s.get(name) is not None]
        return max(values) if values else None

    figures = window_figures(timing.get("load") or [])
    return LoadFigures(loadavg1_max=peak("loadavg1"), cpu_some_avg10_max=peak("cpu_some_avg10"),
                       cpu_stall_pct=figures["cpu_stall_pct"], steal_pct=figures["steal_pct"],
                       timed_under_load="timed_under_load" in (timing.get("flags") or []))


def _gpu(timing: TimingRecord) -> GpuFigures | None:
    """CUDA: the lowest SM clock, highest temperature and power seen at a window's start or end, the flag, and
    whether CUDA graphs timed the case; None off CUDA."""
    readings = [r for window in timing.get("gpu") or [] for r in window.values()
                if isinstance(r, dict) and "unavailable" not in r]
    if not readings and not timing.get("cuda_graph"):
        return None

    def pick(name: str, best: Any) -> float | None:
        values = [r[name] for r in readings if r.get(name) is not None]
        return best(values) if values else None

    graph = timing.get("cuda_graph")
    return GpuFigures(sm_mhz_min=pick("sm_mhz", min), temp_c_max=pick("temp_c", max),
                      power_w_max=pick("power_w", max),
                      gpu_throttled="gpu_throttled" in (timing.get("flags") or []),
                      cuda_graph=graph["used"] if graph else False)


def _listed(pair: tuple[float, float] | None) -> list[float] | None:
    return None if pair is None else list(pair)


def score_cases(outcomes: Iterable[CaseRecord], *, cap: bool = False, gate: bool = True) -> ScoredCases:
    """Operators, levels and the total from case outcomes (``CaseOutcome.to_dict``'s records); with hidden
    cases, the split scores and the gate of :mod:`splits` (dropped hidden cases are never scored)."""
    by_op: dict[str, list[CaseRecord]] = defaultdict(list)
    drops: dict[str, int] = defaultdict(int)
    hidden = False
    for o in outcomes:
        rel = o.get("rel_path") or split_key(o["key"])[0]
        hidden = hidden or splits.split_of(o) == "hidden"
        if splits.dropped(o):
            drops[rel] += 1
        else:
            by_op[rel].append(o)
    operators: list[OperatorEntry] = []
    for rel_path in sorted(by_op):
        cases = sorted(by_op[rel_path], key=lambda o: (splits.split_of(o) != "public", o.get("case_id") is None,
                                                       o.get("case_id") or 0, o["key"]))
        score = operator_score([CaseScore.of(o) for o in cases], cap=cap)
        statuses = {o["status"] for o in cases}
        whole = (*BUILD_FAILURES, *TAINTING_FAILURES, MISSING, TOO_LARGE)  # errors that decide the operator
        status = (score.score_error if score.score_error in whole else
                  "passed" if statuses == {"passed"} else "partial" if "passed" in statuses else "failed")
        level = level_of(rel_path)
        operators.append(OperatorEntry(
            rel_path=rel_path,
            name=next((o.get("operator") or "" for o in cases if o.get("operator")), rel_path.split("/")[-1]),
            level=int(level[5:]) if level else None,
            status=str(status),
            score=score.score,
            compile_score=score.compile_score,
            function_score=score.function_score,
            performance_score=score.performance_score,
            cases_total=score.cases_total,
            cases_passed=score.cases_passed,
            cases_not_graded=score.cases_not_graded,
            compile_runtime_failures=score.compile_runtime_failures,
            score_error=score.score_error,
            speedup_geomean=geometric_mean_speedup(
                (times.baseline, times.cand) for o in cases if o["status"] == "passed"
                for times in [times_of(timing_of(o))]),
            cases=[_case_entry(o, h, f, cap) for o, h, f in zip(cases, score.haps, score.hap_flags)],
        ))
        if hidden:
            splits.annotate(operators[-1], cases, cap=cap, gate=gate, dropped_count=drops[rel_path])
    total, levels = totals((op["rel_path"], op["score"]) for op in operators)
    degenerate = sorted(c["key"] for op in operators for c in op["cases"]
                        if DEGENERATE_FLAGS & set(c["flags"]))
    board = ScoredCases(total_score=total, levels=levels, operators=operators,
                        degenerate_anchors=DegenerateAnchors(count=len(degenerate), cases=degenerate))
    if hidden:
        board["splits"] = splits.level_scores(levels, operators, gate=gate)
    return board


def build(outcomes: Iterable[CaseRecord], *, submission: dict[str, Any] | None, environment: dict[str, Any],
          config: dict[str, Any], cap: bool = False) -> Board:
    outcomes = list(outcomes)
    scored = score_cases(outcomes, cap=cap, gate=bool(config.get("hidden_gate", True)))
    kernelbench = kernelbench_section(outcomes)
    if kernelbench is not None:
        scored["kernelbench"] = kernelbench

    multi = candidate_boards(outcomes, lambda group: score_cases(group, cap=cap))  # one board per candidate
    boards = CandidateBoards()
    if multi is not None:  # the top-level scores then aggregate every candidate's cases
        boards["candidates"], boards["summary"] = multi
    counts: dict[str, int] = defaultdict(int)
    failure_types: dict[str, int] = defaultdict(int)
    for o in outcomes:
        counts[o["status"]] += 1
        failure = o.get("failure_type")
        if failure:
            failure_types[failure] += 1
    board: Board = {
        "schema": SCHEMA,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "plugin_version": __version__,
        **scored,
        **boards,
        "cases_total": len(outcomes),
        "counts": dict(sorted(counts.items())),
        "failure_types": dict(sorted(failure_types.items())),
        "submission": submission,
        "environment": environment,
        "config": config,
        "weights": Weights(compile=WEIGHTS["compile"], function=WEIGHTS["function"],
                           performance=WEIGHTS["performance"], hap_cap=cap),
    }
    return board


def write(path: Path, board: Mapping[str, Any]) -> None:
    """``board`` as strict JSON (:func:`dumps`), written atomically: a :class:`Board` this version built, or one read
    back from a file."""
    write_atomic(path, dumps(board, indent=1) + "\n")


def dumps(value: Any, indent: int | None = None) -> str:
    """Strict JSON: NaN and infinities (a max error can be inf) become the strings "nan", "inf", "-inf"."""
    return json.dumps(clean(value), indent=indent, allow_nan=False, default=str)


def clean(value: Any) -> Any:
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value

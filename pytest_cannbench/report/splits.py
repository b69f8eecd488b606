"""Scores of the public and hidden splits, their combination (the paper's aggregate) and the hidden gate.

Per operator: Eq.4 over its public cases, over its hidden cases, and over both (combined); the gap is the public
function rate minus the hidden one. The gate (``--cann-hidden-gate``, on by default) marks an operator that passes
every public case but fails a hidden one (the candidate's failure, not the harness's) ``not_ranked`` with the reason
"fails held-out cases", and its combined score is 0: a kernel fitted to the published shapes cannot rank. Levels
and the total sum each of the three. Only runs with hidden cases get these fields (docs/hidden-cases.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_cannbench import outcome as oc
from pytest_cannbench.report.board import (
    BoardSplits,
    CombinedPart,
    LevelEntry,
    OperatorEntry,
    OperatorSplits,
    SplitPart,
)
from pytest_cannbench.report.scoring import CaseScore, level_of, operator_score
from pytest_cannbench.vocab.records import CaseRecord

SPLITS = (oc.SPLIT_PUBLIC, oc.SPLIT_HIDDEN)


def split_of(outcome: Mapping[str, Any]) -> str:
    return str(outcome.get("split") or oc.SPLIT_PUBLIC)


def dropped(outcome: Mapping[str, Any]) -> bool:
    """A generated hidden case that was never graded: not scored anywhere."""
    return outcome.get("failure_type") == oc.HIDDEN_DROPPED


def _part(outcomes: list[CaseRecord], cap: bool) -> SplitPart | None:
    if not outcomes:
        return None
    score = operator_score([CaseScore.of(o) for o in outcomes], cap=cap)
    return SplitPart(score=score.score, cases_total=score.cases_total, cases_passed=score.cases_passed,
                     function_rate=score.cases_passed / score.cases_total if score.cases_total else None)


def _fails_held_out(public: list[CaseRecord], hidden: list[CaseRecord]) -> bool:
    candidate_failure = any(o["status"] not in (oc.PASSED, oc.SKIPPED, oc.MISSING)
                            and o.get("failure_type") not in oc.HARNESS_FAILURES for o in hidden)
    return bool(public) and all(o["status"] == oc.PASSED for o in public) and candidate_failure


def annotate(op: OperatorEntry, outcomes: list[CaseRecord], *, cap: bool, gate: bool, dropped_count: int) -> None:
    """Add ``splits`` (public, hidden, combined, gap, dropped) to one operator entry; gate its score."""
    public = [o for o in outcomes if split_of(o) == oc.SPLIT_PUBLIC]
    hidden = [o for o in outcomes if split_of(o) == oc.SPLIT_HIDDEN]
    public_part, hidden_part = _part(public, cap), _part(hidden, cap)
    combined = CombinedPart(score=op["score"], cases_total=op["cases_total"], cases_passed=op["cases_passed"])
    rates = [p["function_rate"] if p else None for p in (public_part, hidden_part)]
    gap = rates[0] - rates[1] if rates[0] is not None and rates[1] is not None else None
    not_ranked = gate and _fails_held_out(public, hidden)
    if not_ranked:
        combined["ungated_score"] = op["score"]
        combined["score"] = op["score"] = 0.0
        op["status"] = oc.NOT_RANKED
        op["not_ranked_reason"] = oc.GATE_REASON
    op["splits"] = OperatorSplits(public=public_part, hidden=hidden_part, combined=combined, function_rate_gap=gap,
                                  dropped=dropped_count, ranked=not not_ranked)


def level_scores(levels: dict[str, LevelEntry], operators: list[OperatorEntry], *, gate: bool) -> BoardSplits:
    """Public, hidden and combined sums per level (into ``levels``) and over the run (returned)."""
    sums = {"public": 0.0, "hidden": 0.0, "combined": 0.0}
    counts = {s: [0, 0] for s in SPLITS}  # passed, total
    per_level = {name: dict.fromkeys(sums, 0.0) for name in levels}
    for op in operators:
        splits = op.get("splits")
        level = per_level.get(level_of(op["rel_path"]) or "other")
        parts = (splits["public"], splits["hidden"]) if splits else (None, None)
        for name, part in zip(SPLITS, parts):
            if part:
                sums[name] += part["score"]
                counts[name][0] += part["cases_passed"]
                counts[name][1] += part["cases_total"]
                if level is not None:
                    level[name] += part["score"]
        sums["combined"] += op["score"]
        if level is not None:
            level["combined"] += op["score"]
    for level_name, entry in levels.items():
        mine = per_level[level_name]
        entry["public_score"], entry["hidden_score"] = mine["public"], mine["hidden"]
        entry["combined_score"] = mine["combined"]
    rates = [passed / cases if cases else None for passed, cases in (counts[s] for s in SPLITS)]
    return BoardSplits(
        public_score=sums["public"], hidden_score=sums["hidden"], combined_score=sums["combined"],
        function_rate_public=rates[0], function_rate_hidden=rates[1],
        function_rate_gap=rates[0] - rates[1] if rates[0] is not None and rates[1] is not None else None,
        not_ranked=[op["rel_path"] for op in operators if op.get("status") == oc.NOT_RANKED],
        hidden_cases=counts[oc.SPLIT_HIDDEN][1],
        dropped=sum(op["splits"]["dropped"] for op in operators if "splits" in op),
        gate=gate,
    )


def summary_lines(board: Mapping[str, Any]) -> list[str]:
    """The terminal's and the Markdown's few lines: the three totals, the gap and who is not ranked."""
    splits = board.get("splits")
    if not splits:
        return []
    gap = splits.get("function_rate_gap")
    lines = [f"public {splits['public_score']:.1f} · hidden {splits['hidden_score']:.1f} · combined "
             f"{splits['combined_score']:.1f} (hidden cases {splits['hidden_cases']}, dropped {splits['dropped']}; "
             f"function-rate gap public - hidden "
             + (f"{gap * 100:+.1f} points)" if gap is not None else "-)")]
    if splits.get("not_ranked"):
        lines.append(f"not ranked ({oc.GATE_REASON}): {', '.join(splits['not_ranked'])}")
    return lines


def junit_properties(board: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Suite-level junit properties: both scores (and the combined one) and the gap."""
    splits = board.get("splits")
    if not splits:
        return [("cann_total_score", round(float(board.get("total_score") or 0.0), 6))]
    gap = splits.get("function_rate_gap")
    return [("cann_total_score", round(float(board.get("total_score") or 0.0), 6)),
            ("cann_public_score", round(splits["public_score"], 6)),
            ("cann_hidden_score", round(splits["hidden_score"], 6)),
            ("cann_combined_score", round(splits["combined_score"], 6)),
            ("cann_function_rate_gap", "" if gap is None else round(gap, 6)),
            ("cann_not_ranked", ",".join(splits.get("not_ranked") or []))]

"""``cannbench compare A B``: what changed between two leaderboards, per operator and per case.

Modelled on pytest-benchmark's ``compare``: a reviewer wants the score and speed-up deltas, the status changes and
the new failures, and CI wants one exit code (``--fail-on-regression PCT``). Timing noise must not fail a gate, so
when both boards carry a confidence interval for a case's speed-up (``speedup_ci``: ``[low, high]``, optional in
the schema) a speed-up change counts as significant only when the two intervals do not overlap; without intervals
every change counts. A board that covers fewer cases than the other, or that records a ``-k``/``-m`` selection or a
shard, is partial, and the comparison says so before anything else: its total is not the whole run's.

Pure functions of the two boards (dicts as ``leaderboard.json`` holds them), and their terminal and Markdown text;
the HTML page is :mod:`page`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_cannbench.outcome import PASSED
from pytest_cannbench.report.markdown import cell
from pytest_cannbench.vocab.casekey import parse_key
from pytest_cannbench.vocab.records import times_of

ABSENT = "absent"


def number(value: Any) -> float | None:
    """A finite float or None (boards spell non-finite numbers as strings; booleans are not numbers)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        found = float(value)
    except (TypeError, ValueError):
        return None
    return found if math.isfinite(found) else None


def speedup(case: Mapping[str, Any]) -> float | None:
    """The speed-up of a passed, timed case, else None: the paired estimate (``speedup.estimate``) where
    the board has one, else T_baseline / T_cand."""
    if case.get("status") != PASSED:
        return None
    paired = case.get("speedup")
    if isinstance(paired, dict) and number(paired.get("estimate")) is not None:
        found = number(paired.get("estimate"))
        return found if found is not None and found > 0 else None
    times = times_of(case)
    base, cand = number(times.baseline), number(times.cand)
    return base / cand if base is not None and cand is not None and base > 0 and cand > 0 else None


def interval(case: Mapping[str, Any], name: str = "speedup_ci") -> tuple[float, float] | None:
    """A case's confidence interval ``[low, high]`` (or ``{"low", "high"}``), on the case or in its timing; for
    the speed-up also the paired interval our boards write (``speedup: {estimate, low, high, ...}``)."""
    raw = case.get(name)
    if raw is None and isinstance(case.get("timing"), dict):
        raw = case["timing"].get(name)
    if raw is None and name == "speedup_ci" and isinstance(case.get("speedup"), dict):
        raw = case["speedup"]
    if isinstance(raw, dict):
        raw = (raw.get("low"), raw.get("high"))
    if not isinstance(raw, (list, tuple)) or len(raw) != 2:
        return None
    low, high = number(raw[0]), number(raw[1])
    return (min(low, high), max(low, high)) if low is not None and high is not None else None


def partial_reasons(board: Mapping[str, Any]) -> list[str]:
    """Why a board may not be a whole run: a recorded selection (-k, -m, deselected cases) or a shard.

    It reads ``selection`` at the top
    or in ``config``, as a dict, and counts any non-empty keyword or mark expression, a positive deselected count
    or an explicit ``partial`` flag.
    """
    reasons = []
    selection = board.get("selection")
    found = board.get("config")
    config: dict[str, Any] = found if isinstance(found, dict) else {}
    if selection is None:
        selection = config.get("selection")
    if isinstance(selection, dict):
        for name in ("keyword", "k", "keywordexpr"):
            if selection.get(name):
                reasons.append(f"-k {selection[name]!r}")
        for name in ("markexpr", "m"):
            if selection.get(name):
                reasons.append(f"-m {selection[name]!r}")
        deselected = number(selection.get("deselected"))
        if deselected:
            reasons.append(f"{int(deselected)} cases deselected")
        if selection.get("partial") and not reasons:
            reasons.append("a partial selection")
    shard = config.get("shard")
    if shard:
        reasons.append(f"shard {'/'.join(str(s) for s in shard) if isinstance(shard, (list, tuple)) else shard}")
    return reasons


@dataclass(frozen=True)
class CaseDelta:
    """One case key in either board; ``status_*`` is ``ABSENT`` where a board lacks the case."""

    key: str
    status_a: str
    status_b: str
    failure_a: str | None
    failure_b: str | None
    speedup_a: float | None
    speedup_b: float | None
    message_b: str = ""
    significant: bool | None = None  # None: no intervals to tell noise from a change

    @property
    def new_failure(self) -> bool:
        """Passed in A (or not in A at all) and fails in B."""
        return self.status_b not in (PASSED, ABSENT) and self.status_a in (PASSED, ABSENT)

    @property
    def fixed(self) -> bool:
        return self.status_b == PASSED and self.status_a not in (PASSED, ABSENT)

    @property
    def status_changed(self) -> bool:
        return (self.status_a, self.failure_a) != (self.status_b, self.failure_b)

    @property
    def speedup_change(self) -> float | None:
        """B's speed-up relative to A's, in percent."""
        if self.speedup_a is None or self.speedup_b is None:
            return None
        return 100.0 * (self.speedup_b / self.speedup_a - 1.0)


@dataclass(frozen=True)
class OperatorDelta:
    rel_path: str
    status_a: str
    status_b: str
    score_a: float | None
    score_b: float | None
    speedup_a: float | None
    speedup_b: float | None
    cases: tuple[CaseDelta, ...] = ()

    @property
    def delta(self) -> float | None:
        return None if self.score_a is None or self.score_b is None else self.score_b - self.score_a

    @property
    def change_pct(self) -> float | None:
        """The score change relative to A's score; an operator absent from B scores 0 there."""
        if self.score_a is None or self.score_a <= 0:
            return None
        return 100.0 * ((self.score_b or 0.0) - self.score_a) / self.score_a

    @property
    def significant(self) -> bool:
        """A status change always counts; a pure timing change counts unless every interval says noise."""
        if self.status_a != self.status_b or any(c.status_changed for c in self.cases):
            return True
        moved = [c for c in self.cases if c.speedup_a != c.speedup_b]
        return not moved or any(c.significant is not False for c in moved)


@dataclass
class Comparison:
    a_name: str
    b_name: str
    total_a: float | None
    total_b: float | None
    cases_a: int
    cases_b: int
    operators: list[OperatorDelta] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    intervals: bool = False  # some case carried intervals in both boards

    @property
    def total_change_pct(self) -> float | None:
        if self.total_a is None or self.total_b is None or self.total_a <= 0:
            return None
        return 100.0 * (self.total_b - self.total_a) / self.total_a

    @property
    def cases(self) -> list[CaseDelta]:
        return [c for op in self.operators for c in op.cases]

    def new_failures(self) -> list[CaseDelta]:
        return [c for c in self.cases if c.new_failure]

    def fixed(self) -> list[CaseDelta]:
        return [c for c in self.cases if c.fixed]

    def regressions(self, pct: float) -> list[str]:
        """Every operator (and the total) whose score dropped by more than ``pct`` percent, significantly."""
        found = []
        for op in self.operators:
            change = op.change_pct
            if change is not None and change < -pct and op.significant:
                where = " (absent from B)" if op.status_b == ABSENT else ""
                found.append(f"{op.rel_path}: score {op.score_a:.2f} -> {op.score_b or 0.0:.2f} ({change:+.1f}%)"
                             f"{where}")
        total = self.total_change_pct
        if total is not None and total < -pct and (found or any(op.significant for op in self.operators
                                                                 if (op.delta or 0) < 0 or op.status_b == ABSENT)):
            found.append(f"total: score {self.total_a:.2f} -> {self.total_b:.2f} ({total:+.1f}%)")
        return found


def _cases(board: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(c.get("key")): c for op in board.get("operators") or [] if isinstance(op, dict)
            for c in op.get("cases") or [] if isinstance(c, dict) and c.get("key")}


def _case_delta(key: str, a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> tuple[CaseDelta, bool]:
    ia, ib = (interval(a) if a else None), (interval(b) if b else None)
    significant = None
    if ia is not None and ib is not None:
        significant = ia[1] < ib[0] or ib[1] < ia[0]
    delta = CaseDelta(key=key, status_a=str(a.get("status")) if a else ABSENT,
                      status_b=str(b.get("status")) if b else ABSENT,
                      failure_a=a.get("failure_type") if a else None, failure_b=b.get("failure_type") if b else None,
                      speedup_a=speedup(a) if a else None, speedup_b=speedup(b) if b else None,
                      message_b=str((b or {}).get("message") or ""), significant=significant)
    return delta, significant is not None


def compare(a: Mapping[str, Any], b: Mapping[str, Any], a_name: str = "A", b_name: str = "B") -> Comparison:
    """Both boards side by side: every operator and case in either, sorted by path and case id."""
    ops_a = {str(op.get("rel_path")): op for op in a.get("operators") or [] if isinstance(op, dict)}
    ops_b = {str(op.get("rel_path")): op for op in b.get("operators") or [] if isinstance(op, dict)}
    cases_a, cases_b = _cases(a), _cases(b)
    result = Comparison(a_name, b_name, number(a.get("total_score")), number(b.get("total_score")),
                        len(cases_a), len(cases_b))
    for name, board in ((a_name, a), (b_name, b)):
        reasons = partial_reasons(board)
        if reasons:
            result.warnings.append(f"{name} is a partial board ({', '.join(reasons)}): its total is not a whole run's")
    only_a, only_b = sorted(set(cases_a) - set(cases_b)), sorted(set(cases_b) - set(cases_a))
    for name, keys, other in ((a_name, only_a, b_name), (b_name, only_b, a_name)):
        if keys:
            shown = ", ".join(keys[:5]) + (f", ... ({len(keys)} in all)" if len(keys) > 5 else "")
            cases = f"{len(keys)} case{'s' if len(keys) != 1 else ''}"
            result.warnings.append(f"{cases} of {name} missing from {other}: {shown}")
    for rel_path in sorted(set(ops_a) | set(ops_b)):
        op_a, op_b = ops_a.get(rel_path), ops_b.get(rel_path)
        op_keys = {str(c.get("key")) for op in (op_a, op_b) if op for c in op.get("cases") or [] if isinstance(c, dict)}
        deltas = []
        for key in sorted(op_keys, key=_case_order):
            delta, with_ci = _case_delta(key, cases_a.get(key), cases_b.get(key))
            result.intervals |= with_ci
            deltas.append(delta)
        result.operators.append(OperatorDelta(
            rel_path=rel_path, status_a=str(op_a.get("status")) if op_a else ABSENT,
            status_b=str(op_b.get("status")) if op_b else ABSENT,
            score_a=number(op_a.get("score")) if op_a else None, score_b=number(op_b.get("score")) if op_b else None,
            speedup_a=number(op_a.get("speedup_geomean")) if op_a else None,
            speedup_b=number(op_b.get("speedup_geomean")) if op_b else None, cases=tuple(deltas)))
    return result


def _case_order(key: str) -> tuple[str, str, int, str]:
    """Cases by candidate, operator and id (a board's keys are case keys; anything else sorts by its text)."""
    found = parse_key(key)
    return found.order() if found is not None else ("", key, -1, key)


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"x{value:.2f}"


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f}%"


def _status(a: str, b: str) -> str:
    return a if a == b else f"{a} -> {b}"


def _one_line(text: str, width: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def case_note(c: CaseDelta) -> str:
    """What happened to one case, in words: status change, new failure, speed-up change and its significance."""
    parts = []
    if c.status_changed:
        fa = f" [{c.failure_a}]" if c.failure_a else ""
        fb = f" [{c.failure_b}]" if c.failure_b else ""
        parts.append(f"{c.status_a}{fa} -> {c.status_b}{fb}")
    if c.new_failure:
        parts.append("NEW FAILURE")
    elif c.fixed:
        parts.append("fixed")
    change = c.speedup_change
    if change is not None:
        noise = {True: ", significant", False: ", within the intervals", None: ""}[c.significant]
        parts.append(f"speed-up {_x(c.speedup_a)} -> {_x(c.speedup_b)} ({change:+.1f}%{noise})")
    return "; ".join(parts)


def changed_cases(comparison: Comparison, threshold: float = 0.0) -> list[CaseDelta]:
    """Cases whose status changed or whose speed-up moved by more than ``threshold`` percent."""
    return [c for c in comparison.cases
            if c.status_changed or (c.speedup_change is not None and abs(c.speedup_change) > threshold)]


def new_failures_by_type(comparison: Comparison) -> list[tuple[str, list[CaseDelta]]]:
    """New failures grouped by B's failure type (or status), the largest group first."""
    groups: dict[str, list[CaseDelta]] = {}
    for case in comparison.new_failures():
        groups.setdefault(case.failure_b or case.status_b, []).append(case)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def terminal_lines(comparison: Comparison, *, regression_pct: float | None = None, limit: int | None = 40) -> list[str]:
    """The comparison as terminal lines: warnings, the total, the operator table, changed cases, the gate."""
    c = comparison
    lines = [f"cannbench compare: A = {c.a_name} ({c.cases_a} cases), B = {c.b_name} ({c.cases_b} cases)"]
    lines += [f"WARNING: {w}" for w in c.warnings]
    lines.append(f"total score {_score(c.total_a)} -> {_score(c.total_b)} "
                 f"({'-' if c.total_a is None or c.total_b is None else f'{c.total_b - c.total_a:+.2f}'}"
                 f"{', ' + _pct(c.total_change_pct) if c.total_change_pct is not None else ''})")
    lines.append(f"  {'operator':<32} {'status':<22} {'score A':>8} {'score B':>8} {'delta':>8} {'change':>8} "
                 f"{'speed-up A':>10} {'B':>7}")
    for op in c.operators:
        delta = "-" if op.delta is None else f"{op.delta:+.2f}"
        lines.append(f"  {op.rel_path:<32} {_status(op.status_a, op.status_b):<22} {_score(op.score_a):>8} "
                     f"{_score(op.score_b):>8} {delta:>8} {_pct(op.change_pct):>8} {_x(op.speedup_a):>10} "
                     f"{_x(op.speedup_b):>7}")
    changed = changed_cases(c)
    if changed:
        lines.append(f"cases changed ({len(changed)}):")
        for case in changed[:limit]:
            lines.append(f"  {case.key}: {case_note(case)}")
        if limit is not None and len(changed) > limit:
            lines.append(f"  ... {len(changed) - limit} more")
    new = c.new_failures()
    lines.append(f"new failures: {len(new)}; fixed: {len(c.fixed())}"
                 + ("" if c.intervals else "; no confidence intervals in the boards: every speed-up change counts"))
    for failure, cases in new_failures_by_type(c):
        lines.append(f"  {failure} x{len(cases)}, e.g. {cases[0].key}: {_one_line(cases[0].message_b)}")
    if regression_pct is not None:
        found = c.regressions(regression_pct)
        lines.append(f"regressions over {regression_pct:g}%: {len(found) or 'none'}")
        lines += [f"  {line}" for line in found]
    return lines


def _md(value: Any) -> str:
    return cell(str(value).replace(" -> ", " → "), 300)


def markdown(comparison: Comparison, *, regression_pct: float | None = None) -> str:
    """The comparison as GitHub-flavoured Markdown (a pull request comment, a CI job summary)."""
    c = comparison
    out = [f"## cannbench compare: {_md(c.a_name)} → {_md(c.b_name)}", ""]
    out += [f"> **Warning:** {_md(w)}" for w in c.warnings]
    if c.warnings:
        out.append("")
    total = "-" if c.total_a is None or c.total_b is None else f"{c.total_b - c.total_a:+.2f}"
    out += [f"**Total score:** {_score(c.total_a)} → {_score(c.total_b)} ({total}"
            f"{', ' + _pct(c.total_change_pct) if c.total_change_pct is not None else ''}); "
            f"cases {c.cases_a} → {c.cases_b}; new failures {len(c.new_failures())}, fixed {len(c.fixed())}", "",
            "| Operator | Status | Score A | Score B | Δ | Change | Speed-up A | Speed-up B |",
            "|:---|:---|---:|---:|---:|---:|---:|---:|"]
    for op in c.operators:
        delta = "-" if op.delta is None else f"{op.delta:+.2f}"
        out.append(f"| {_md(op.rel_path)} | {_md(_status(op.status_a, op.status_b))} | {_score(op.score_a)} | "
                   f"{_score(op.score_b)} | {delta} | {_pct(op.change_pct)} | {_x(op.speedup_a)} | "
                   f"{_x(op.speedup_b)} |")
    changed = changed_cases(c)
    if changed:
        out += ["", "### Cases changed", "", "| Case | What changed | Message (B) |", "|:---|:---|:---|"]
        out += [f"| {_md(case.key)} | {_md(case_note(case))} | "
                f"{_md(case.message_b) if case.status_b != PASSED else ''} |" for case in changed]
    if regression_pct is not None:
        found = c.regressions(regression_pct)
        out += ["", f"**Regressions over {regression_pct:g}%:** {len(found) or 'none'}"]
        out += [f"- {_md(line)}" for line in found]
    return "\n".join(out) + "\n"

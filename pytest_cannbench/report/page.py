"""The standalone HTML report (``reports/report.html``): one self-contained page per leaderboard, or two compared.

Written on every graded run beside ``leaderboard.json`` and by ``cannbench report BOARD --html``, so there is always
something to open that needs neither pytest-html nor a network: the CSS is inline, the charts are inline SVG
(:mod:`charts`), there is no script and no external URL. The page is a jinja2 template (``templates/report.html.j2``)
with autoescaping on, so candidate messages, operator names and paths are text, never markup; only the SVG
strings, escaped where they are built, are marked safe. A pure function of the board(s): no clock, no files read.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from pytest_cannbench.atomic import write_atomic
from pytest_cannbench.outcome import (
    BUILD_FAILURES,
    GUARD_FAILURES,
    HARNESS_FAILURES,
    MISSING,
    PASSED,
    PRECISION,
    SKIPPED,
)
from pytest_cannbench.report.charts import Bar, Cell, Point, bar_chart, grid, speedup_chart
from pytest_cannbench.report.compare import (
    Comparison,
    case_note,
    changed_cases,
    interval,
    number,
    partial_reasons,
    speedup,
)

TEMPLATE = "report.html.j2"
PAGE_NAME = "report.html"  # beside leaderboard.json
FALLBACK_NAME = "cannbench-report.html"  # when pytest-html's --html already writes report.html there
MESSAGES_PER_TYPE = 50
MESSAGE_CHARS = 2000

# Case categories of the grid: (letter, colour, legend text).
CATEGORIES: dict[str, tuple[str, str, str]] = {
    "passed": ("P", "#2e8b57", "passed"),
    "precision": ("A", "#e67e22", "accuracy (precision mismatch)"),
    "runtime": ("R", "#c0392b", "compile / runtime failure (crash, timeout, wrong structure, build)"),
    "guard": ("G", "#8e44ad", "anti-cheat guard"),
    "harness": ("H", "#2c7fb8", "harness or task error (not the candidate's)"),
    "missing": ("M", "#9e9e9e", "not provided by the submission"),
    "skipped": ("S", "#c8c8c8", "skipped"),
}
OPERATOR_COLORS: dict[str, str] = {"passed": "#2e8b57", "partial": "#e0a100", "failed": "#c0392b", "missing": "#9e9e9e",
                   **{b: "#6d4c41" for b in BUILD_FAILURES}}
OTHER_COLOR = "#607d8b"


def category(case: Mapping[str, Any]) -> str:
    status, failure = case.get("status"), case.get("failure_type")
    if status == PASSED:
        return "passed"
    if status == MISSING:
        return "missing"
    if status == SKIPPED:
        return "skipped"
    if failure in GUARD_FAILURES:
        return "guard"
    if failure in HARNESS_FAILURES:
        return "harness"
    if failure == PRECISION:
        return "precision"
    return "runtime"


@dataclass(frozen=True)
class Kpi:
    label: str
    value: str
    note: str = ""
    tone: str = ""  # good, bad or empty


@dataclass(frozen=True)
class FailureGroup:
    failure_type: str
    harness: bool
    cases: list[tuple[str, str, str]]  # (key, status, message)
    more: int = 0


@dataclass
class BoardView:
    """What the template shows of one board."""

    title: str
    kpis: list[Kpi]
    level_chart: Markup
    operator_chart: Markup
    grid: Markup
    speedup_chart: Markup
    operators: list[dict[str, Any]]
    failures: list[FailureGroup]
    identity: list[tuple[str, str]]
    warnings: list[str] = field(default_factory=list)


def _fmt(value: Any, digits: int = 2, empty: str = "-") -> str:
    found = number(value)
    return empty if found is None else f"{found:.{digits}f}"


def _speedup(value: Any) -> str:
    found = number(value)
    return "-" if found is None else f"×{found:.2f}"


def _cases(board: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for op in board.get("operators") or [] if isinstance(op, dict)
            for c in op.get("cases") or [] if isinstance(c, dict)]


def _kpis(board: Mapping[str, Any]) -> list[Kpi]:
    operators = [op for op in board.get("operators") or [] if isinstance(op, dict)]
    cases = _cases(board)
    passed = sum(1 for c in cases if c.get("status") == PASSED)
    failed = sum(1 for c in cases if c.get("status") not in (PASSED, SKIPPED))
    statuses = Counter(str(op.get("status")) for op in operators)
    rate = f"{100.0 * passed / len(cases):.1f}%" if cases else "-"
    return [Kpi("Total score", _fmt(board.get("total_score")), f"of {100 * len(operators)} at HAP 1 everywhere"),
            Kpi("Function rate", rate, f"{passed} of {len(cases)} cases correct",
                "good" if cases and passed == len(cases) else "bad" if cases and not passed else ""),
            Kpi("Operators", str(len(operators)), ", ".join(f"{n} {s}" for s, n in statuses.most_common())),
            Kpi("Cases passed", str(passed), f"of {len(cases)}", "good" if passed else ""),
            Kpi("Cases failed", str(failed), "skipped not counted", "bad" if failed else "good")]


def _level_chart(board: Mapping[str, Any]) -> Markup:
    levels = _section(board, "levels")
    bars = [Bar(f"{name} ({entry.get('operators', '?')} ops)", number(entry.get("score")), "#4a7bb7",
                f"{name}: {_fmt(entry.get('score'))} over {entry.get('operators', '?')} operators")
            for name, entry in levels.items() if isinstance(entry, dict)]
    ceiling = max((100.0 * (number(e.get("operators")) or 0) for e in levels.values() if isinstance(e, dict)),
                  default=100.0)
    return Markup(bar_chart(bars, "Score per level", scale=max([ceiling, *(b.value or 0 for b in bars)])))


def _operator_chart(board: Mapping[str, Any]) -> Markup:
    bars = [Bar(str(op.get("rel_path")), number(op.get("score")),
                OPERATOR_COLORS.get(str(op.get("status")), OTHER_COLOR),
                f"{op.get('rel_path')}: {_fmt(op.get('score'))} ({op.get('status')}, "
                f"{op.get('cases_passed', '?')}/{op.get('cases_total', '?')} passed)")
            for op in board.get("operators") or [] if isinstance(op, dict)]
    return Markup(bar_chart(bars, "Score per operator (colour: status)", reference=100.0))


def _grid(board: Mapping[str, Any]) -> Markup:
    rows = []
    for op in board.get("operators") or []:
        if not isinstance(op, dict):
            continue
        cells = []
        for case in op.get("cases") or []:
            kind = category(case)
            letter, color, _ = CATEGORIES[kind]
            what = case.get("status") if not case.get("failure_type") else f"{case['status']} [{case['failure_type']}]"
            cells.append(Cell(str(case.get("case_id", "?")), kind, letter, color, f"{case.get('key')}: {what}"))
        rows.append((str(op.get("rel_path")), cells))
    return Markup(grid(rows))


def _speedup_chart(board: Mapping[str, Any]) -> Markup:
    points = []
    for case in _cases(board):
        found = speedup(case)
        if found is None:
            continue
        base, hw = number(case.get("t_baseline_us")), number(case.get("t_hw_us"))
        ceiling = base / hw if base and hw and hw > 0 else None
        points.append(Point(str(case.get("key")), found, ceiling, "#2e8b57" if found >= 1 else "#e67e22",
                            interval(case)))
    return Markup(speedup_chart(points))


def _failures(board: Mapping[str, Any]) -> list[FailureGroup]:
    groups: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for case in _cases(board):
        if case.get("status") in (PASSED, SKIPPED) or not case.get("failure_type"):
            continue
        groups[str(case["failure_type"])].append((str(case.get("key")), str(case.get("status")),
                                                  str(case.get("message") or "")[:MESSAGE_CHARS]))
    return [FailureGroup(ft, ft in HARNESS_FAILURES, cases[:MESSAGES_PER_TYPE], max(len(cases) - MESSAGES_PER_TYPE, 0))
            for ft, cases in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def _section(board: Mapping[str, Any], name: str) -> dict[str, Any]:
    found = board.get(name)
    return found if isinstance(found, dict) else {}


def _identity(board: Mapping[str, Any]) -> list[tuple[str, str]]:
    sub, env, config, weights = (_section(board, n) for n in ("submission", "environment", "config", "weights"))
    committed = config.get("secret_commitment")
    seed = (f"per-session secret (seed {config.get('seed')} mixed with it" + (f"; commitment sha256 {committed})"
                                                                             if committed else ")")
            if committed or config.get("secret") else f"fixed seed {config.get('seed', '?')}")  # older boards: secret
    device = str(env.get("device") or config.get("device") or "?")
    if env.get("hardware_key"):
        device += f" (metadata hardware {env['hardware_key']})"
    submission = str(sub.get("kind") or "unknown")
    if sub.get("wheel"):
        submission += f": {str(sub['wheel']).rsplit('/', 1)[-1]}"
    if sub.get("source"):
        submission += f" from {sub['source']}"
    rows = [("plugin version", str(board.get("plugin_version") or env.get("pytest_cannbench") or "?")),
            ("generated", str(board.get("generated_at") or "?")),
            ("run identity", str(config.get("run_identity") or "-")),
            ("submission", submission + (f" (build {sub.get('status')})" if sub.get("status") else "")),
            ("wheel sha256", str(sub.get("wheel_sha256") or "-")),
            ("seed mode", seed),
            ("guard", str(config.get("guard") or "-")),
            ("sandbox", str(config.get("sandbox") or "candidate worker (memfd inputs, JSON replies)")),
            ("device", device),
            ("machine", f"{env.get('cpu') or '?'}, {env.get('cpus') or '?'} CPUs; {env.get('platform') or '?'}"),
            ("software", ", ".join(f"{k} {env[k]}" for k in ("python", "pytest", "torch", "torch_npu") if env.get(k))
             or "-"),
            ("timing", f"warm-up {config.get('warmup', '?')}, repeat {config.get('repeat', '?')}, "
                       f"perf {'on' if config.get('perf', True) else 'off'}"),
            ("weights", f"compile {weights.get('compile', '?')}, function {weights.get('function', '?')}, "
                        f"performance {weights.get('performance', '?')}, "
                        f"HAP cap {'on' if weights.get('hap_cap') else 'off'}")]
    if board.get("merged_from"):
        rows.append(("merged from", ", ".join(f"{m.get('path')} ({m.get('cases')} cases)"
                                              for m in board["merged_from"] if isinstance(m, dict))))
    return rows


def _operators(board: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"rel_path": op.get("rel_path"), "status": op.get("status"),
             "color": OPERATOR_COLORS.get(str(op.get("status")), OTHER_COLOR),
             "passed": f"{op.get('cases_passed', '?')}/{op.get('cases_total', '?')}",
             "compile": _fmt(op.get("compile_score"), 1), "function": _fmt(op.get("function_score"), 1),
             "performance": _fmt(op.get("performance_score"), 1), "score": _fmt(op.get("score")),
             "speedup": _speedup(op.get("speedup_geomean")),
             "note": op.get("score_error") or ""}
            for op in board.get("operators") or [] if isinstance(op, dict)]


def view(board: Mapping[str, Any], title: str = "CANN-Bench report") -> BoardView:
    reasons = partial_reasons(board)
    return BoardView(title=title, kpis=_kpis(board), level_chart=_level_chart(board),
                     operator_chart=_operator_chart(board), grid=_grid(board), speedup_chart=_speedup_chart(board),
                     operators=_operators(board), failures=_failures(board), identity=_identity(board),
                     warnings=[f"partial board: {', '.join(reasons)}"] if reasons else [])


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("pytest_cannbench.report", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True)


def _legend() -> list[tuple[str, str, str]]:
    return list(CATEGORIES.values())


def render(board: Mapping[str, Any], title: str = "CANN-Bench report") -> str:
    """The page of one board."""
    return _environment().get_template(TEMPLATE).render(
        page_title=f"{title}: {_fmt(board.get('total_score'))}", views=[view(board, title)], comparison=None,
        legend=_legend(), operator_colors=OPERATOR_COLORS)


def render_comparison(a: Mapping[str, Any], b: Mapping[str, Any], comparison: Comparison,
                      regression_pct: float | None = None) -> str:
    """Both boards side by side under a table of what changed (``cannbench compare A B --html``)."""
    rows = [{"rel_path": op.rel_path, "status": op.status_a if op.status_a == op.status_b
             else f"{op.status_a} → {op.status_b}", "score_a": _fmt(op.score_a), "score_b": _fmt(op.score_b),
             "delta": "-" if op.delta is None else f"{op.delta:+.2f}",
             "change": "" if op.change_pct is None else f"{op.change_pct:+.1f}%",
             "tone": "bad" if (op.delta or 0) < 0 or op.status_b == "absent" else "good" if (op.delta or 0) > 0 else ""}
            for op in comparison.operators]
    total = ("-" if comparison.total_a is None or comparison.total_b is None
             else f"{comparison.total_b - comparison.total_a:+.2f}")
    context = {"a": comparison.a_name, "b": comparison.b_name, "warnings": comparison.warnings, "rows": rows,
               "total": f"{_fmt(comparison.total_a)} → {_fmt(comparison.total_b)} ({total})",
               "cases": [(c.key, case_note(c), c.message_b if c.status_b != PASSED else "")
                         for c in changed_cases(comparison)],
               "new_failures": len(comparison.new_failures()), "fixed": len(comparison.fixed()),
               "regressions": comparison.regressions(regression_pct) if regression_pct is not None else None,
               "regression_pct": regression_pct}
    return _environment().get_template(TEMPLATE).render(
        page_title=f"cannbench compare: {comparison.a_name} → {comparison.b_name}",
        views=[view(a, f"A: {comparison.a_name}"), view(b, f"B: {comparison.b_name}")], comparison=context,
        legend=_legend(), operator_colors=OPERATOR_COLORS)


def write(path: Path, board: Mapping[str, Any]) -> None:
    write_atomic(path, render(board))


def write_beside(board_path: Path, board: Mapping[str, Any], pytest_html: str | None = None) -> str:
    """``report.html`` next to the leaderboard at the end of a graded run: what the summary's "written:" lists.

    ``pytest_html`` is pytest-html's ``--html`` path: when it is the same file (``--html reports/report.html``),
    this page goes to ``cannbench-report.html`` instead of overwriting it. A page that cannot be written (a
    read-only directory) must not cost the run its other reports, so the reason is returned in place of the path.
    """
    path = board_path.with_name(PAGE_NAME)
    if pytest_html and Path(pytest_html).resolve() == path.resolve():
        path = board_path.with_name(FALLBACK_NAME)
    try:
        write(path, board)
    except OSError as exc:
        return f"{path} not written ({exc.strerror or exc})"
    return str(path)

"""pytest-html 4.x integration: per-case columns, a score summary and an inline SVG bar chart.

Registered by the plugin only when pytest-html is active (``config.pluginmanager.hasplugin("html")``); the hook
implementations are also ``optionalhook`` so that registering them without pytest-html cannot fail hook
validation (pytest's pluggy rejects unknown hooks). pytest-html 4.x takes cells and summary entries as raw HTML, so
every value shown here goes through :func:`html.escape`. The chart is plain SVG markup: the report stays readable
offline and in ``--self-contained-html`` files, with no script or external resource.

pytest-html drops the reports of items whose xdist worker crashed (it only emits a row on a teardown report,
a crashed worker never sends one), so the summary lists those cases from the leaderboard, which does count them.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_cannbench.figures import hap
from pytest_cannbench.vocab.records import times_of

BoardGetter = Callable[[], Mapping[str, Any] | None]

# (data-column-type, header text, sortable). The type doubles as the cell class "col-<type>", which pytest-html
# reads back with r"col-(\w+)" to sort, so it must be a \w+ word that does not clash with its own columns.
COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("cann_operator", "Operator", True),
    ("cann_case", "Case", False),
    ("cann_status", "Status", True),
    ("cann_hap", "HAP", True),
    ("cann_times", "T_cand / T_base (µs)", False),
)
COLUMN_INDEX = 2  # after pytest-html's Result and Test columns
MISSING = "-"
CRASHED = "crashed"
CRASH_MESSAGE_CHARS = 300

# Chart geometry (px).
BAR_HEIGHT = 18
BAR_GAP = 6
CHART_MARGIN = 8
VALUE_WIDTH = 64
CHAR_WIDTH = 7  # rough width of one label character at font-size 12
MAX_LABEL_CHARS = 40
BAR_COLOR = "#4a7bb7"
OVER_COLOR = "#2e8b57"  # bars above the reference line (HAP above 1 somewhere)
REFERENCE = 100.0  # the most an operator scores while every HAP is at most 1
# Scoped to the section; a <style> element, not a stylesheet link, so self-contained reports keep it.
STYLE = ("<style>.cannbench-levels{border-collapse:collapse;margin:0.5em 0}"
         ".cannbench-levels th,.cannbench-levels td{border:1px solid #ccc;padding:2px 10px;text-align:left}"
         ".cannbench-levels td:nth-child(n+2){text-align:right}.cannbench-chart{display:block;margin:0.5em 0}</style>")


def _text(value: Any) -> str:
    """Escaped and on one line: pytest-html reads sortable cell contents back with a single-line regex."""
    return html.escape(" ".join(str(value).split()))


def _number(value: Any) -> float | None:
    """A finite float, or None: boards loaded from JSON carry "nan"/"inf" strings (leaderboard.clean)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _fmt(value: Any, digits: int = 2) -> str:
    number = _number(value)
    return MISSING if number is None else f"{number:.{digits}f}"


@dataclass(frozen=True)
class RowValues:
    """The five cells of one results-table row, as plain (unescaped) text."""

    operator: str = MISSING
    case: str = MISSING
    status: str = MISSING
    hap: str = MISSING
    times: str = MISSING
    hap_title: str = ""
    case_title: str = ""

    def cells(self) -> list[str]:
        values = (self.operator, self.case, self.status, self.hap, self.times)
        titles = ("", self.case_title, "", self.hap_title, "")
        return [f'<td class="col-{name}"{f" title={_attr(title)}" if title else ""}>{_text(value)}</td>'
                for (name, _, _), value, title in zip(COLUMNS, values, titles)]


def _attr(value: str) -> str:
    return f'"{html.escape(value, quote=True)}"'


def row_values(report: Any, *, cap: bool = False) -> RowValues:
    """What a report shows in the CANN columns; tolerant of every report pytest-html may hand over.

    Setup/teardown reports, plain tests and collection reports have no ``cann`` attribute; an xdist crash report
    (``when == "???"``) has none either, as the worker died before making it.
    """
    cann = getattr(report, "cann", None)
    if not isinstance(cann, dict):
        return RowValues(status=CRASHED) if getattr(report, "when", None) == "???" else RowValues()
    status = str(cann.get("status") or MISSING)
    if cann.get("failure_type"):
        status = f"{status} ({cann['failure_type']})"
    case_id = cann.get("case_id")
    raw_timing = cann.get("timing")
    timing: dict[str, Any] = raw_timing if isinstance(raw_timing, dict) else {}
    t_cand, t_base, t_hw = (_number(t) for t in times_of(timing))
    hap_text, hap_title = MISSING, ""
    if cann.get("status") == "passed" and timing.get("measured", True):
        value, flags = hap(t_base, t_cand, t_hw, cap=cap)
        hap_text = _fmt(value, 3)
        hap_title = ", ".join(flags)
    times = MISSING if t_cand is None and t_base is None else f"{_fmt(t_cand)} / {_fmt(t_base)}"
    return RowValues(operator=str(cann.get("operator") or cann.get("rel_path") or MISSING),
                     case=str(case_id if case_id is not None else cann.get("key") or MISSING), status=status,
                     hap=hap_text, times=times, hap_title=hap_title, case_title=str(cann.get("key") or ""))


def svg_bar_chart(items: list[tuple[str, float]], width: int = 640, max_value: float | None = None) -> str:
    """A horizontal bar per (label, value), in the given order, as standalone SVG markup.

    The scale runs to ``max_value``, by default the larger of 100 (an operator's ceiling while HAP stays at most 1)
    and the largest value, so scores above 100 fit and get a dashed reference line at 100. Non-finite or negative
    values draw no bar. Labels are escaped and shortened (the full text is in a tooltip).
    """
    values = [_number(v) for _, v in items]
    finite = [v for v in values if v is not None and v > 0]
    scale = max_value if max_value is not None and max_value > 0 else max([REFERENCE, *finite])
    labels = [str(label) for label, _ in items]
    short = [label if len(label) <= MAX_LABEL_CHARS else label[:MAX_LABEL_CHARS - 1] + "…" for label in labels]
    label_width = min(max((len(s) for s in short), default=8) * CHAR_WIDTH + CHART_MARGIN, width // 2)
    bar_x = CHART_MARGIN + label_width
    bar_span = max(width - bar_x - VALUE_WIDTH - CHART_MARGIN, 10)
    rows = max(len(items), 1)
    height = 2 * CHART_MARGIN + rows * (BAR_HEIGHT + BAR_GAP) - BAR_GAP
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="cannbench-chart" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="Operator scores" '
             'font-family="sans-serif" font-size="12">',
             "<title>Operator scores</title>"]
    if not items:
        parts.append(f'<text x="{CHART_MARGIN}" y="{CHART_MARGIN + BAR_HEIGHT - 5}">no operators scored</text>')
    for i, (label, text, value) in enumerate(zip(labels, short, values)):
        y = CHART_MARGIN + i * (BAR_HEIGHT + BAR_GAP)
        length = 0.0 if value is None or value <= 0 else min(value, scale) / scale * bar_span
        color = OVER_COLOR if value is not None and value > REFERENCE else BAR_COLOR
        baseline = y + BAR_HEIGHT - 5
        parts.append(f'<g class="cannbench-bar"><title>{html.escape(label)}: {_fmt(value)}</title>'
                     f'<text x="{bar_x - 6}" y="{baseline}" text-anchor="end">{html.escape(text)}</text>'
                     f'<rect x="{bar_x}" y="{y}" width="{length:.1f}" height="{BAR_HEIGHT}" fill="{color}"/>'
                     f'<text x="{bar_x + length + 4:.1f}" y="{baseline}">{_fmt(value)}</text></g>')
    if scale > REFERENCE:
        x = bar_x + REFERENCE / scale * bar_span
        parts.append(f'<line class="cannbench-reference" x1="{x:.1f}" y1="{CHART_MARGIN // 2}" x2="{x:.1f}" '
                     f'y2="{height - CHART_MARGIN // 2}" stroke="#888" stroke-dasharray="4 3"/>')
    parts.append("</svg>")
    return "".join(parts)


def crashed_cases(board: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Cases lost with their xdist worker: pytest-html has no row for them, the leaderboard does."""
    return [case for op in board.get("operators") or [] for case in op.get("cases") or []
            if case.get("status") == "crashed" and case.get("failure_type") == "worker_crashed"]


def _table(header: Iterable[str], rows: Iterable[Iterable[Any]], css_class: str) -> str:
    head = "".join(f"<th>{_text(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_text(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def summary_html(board: Mapping[str, Any]) -> str:
    """The summary section: total score, per-level table, operator chart and the cases lost to crashed workers."""
    operators = board.get("operators") or []
    levels = board.get("levels") or {}
    cases = board.get("cases_total", sum(len(op.get("cases") or []) for op in operators))
    parts = ['<section class="cannbench-summary" id="cannbench-summary">', STYLE, "<h3>CANN-Bench score</h3>",
             f'<p class="cannbench-total">Total score: <strong>{_fmt(board.get("total_score"))}</strong> '
             f"({len(operators)} operators, {_text(cases)} cases)</p>"]
    if levels:
        parts.append(_table(("Level", "Operators", "Score"),
                            ((name, entry.get("operators", MISSING), _fmt(entry.get("score")))
                             for name, entry in levels.items() if isinstance(entry, dict)),
                            "cannbench-levels"))
    parts.append(svg_bar_chart([(str(op.get("rel_path") or op.get("name") or "?"), op.get("score"))
                                for op in operators]))
    crashed = crashed_cases(board)
    if crashed:
        parts.append(f"<h4>Cases lost to crashed xdist workers ({len(crashed)}, not in the results table)</h4>")
        parts.append('<ul class="cannbench-crashed">' + "".join(
            f"<li><code>{_text(case.get('key', '?'))}</code>: "
            f"{_text(str(case.get('message') or '')[:CRASH_MESSAGE_CHARS])}</li>" for case in crashed) + "</ul>")
    parts.append("</section>")
    return "".join(parts)


class HtmlHooks:
    """pytest-html hook implementations; ``board_getter`` returns the leaderboard dict, or None when there is none.

    The board is fetched in the summary hook, which pytest-html calls from its ``trylast`` sessionfinish, so the
    getter sees every case the controller has collected by then. ``cap`` is the leaderboard's HAP cap, so the
    HAP column agrees with the scores.
    """

    def __init__(self, board_getter: BoardGetter, *, cap: bool = False) -> None:
        self.board_getter = board_getter
        self.cap = cap

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        for offset, (name, title, sortable) in enumerate(COLUMNS):
            attrs = f' class="sortable" data-column-type="{name}"' if sortable else ""
            cells.insert(COLUMN_INDEX + offset, f"<th{attrs}>{_text(title)}</th>")

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: Any, cells: list[str]) -> None:
        if not cells:  # another plugin hid the row
            return
        for offset, cell in enumerate(row_values(report, cap=self.cap).cells()):
            cells.insert(COLUMN_INDEX + offset, cell)

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str]) -> None:
        try:
            board = self.board_getter()
        except Exception as exc:  # a broken summary must not cost the whole HTML report
            prefix.insert(0, f'<p class="cannbench-summary-error">CANN-Bench summary unavailable: '
                             f"{_text(repr(exc))}</p>")
            return
        if board:
            prefix.insert(0, summary_html(board))

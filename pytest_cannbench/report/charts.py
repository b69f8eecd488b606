"""Inline SVG charts for the standalone report (:mod:`page`): bars, the operator x case grid, speed-ups on a log axis.

Inline in HTML5, so without an ``xmlns``: the page holds no URL at all.

Plain SVG strings, no script and no external resource, so the page renders offline, in a mail attachment or a CI
artifact viewer. Every label goes through :func:`html.escape` here; the page marks the result safe. Each drawn
element carries a class (``cb-bar``, ``cb-cell``, ``cb-point``) that the browser tests look for after rendering.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

FONT = 'font-family="system-ui, sans-serif" font-size="12"'
ROW, GAP, MARGIN = 18, 6, 8
CHAR_W = 7  # rough width of one label character at 12 px
MAX_LABEL = 40
AXIS = "#888"
TEXT = "#222"


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _short(label: str) -> str:
    return label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1] + "…"


def _label_width(labels: Sequence[str], width: int) -> int:
    return min(max((len(_short(s)) for s in labels), default=8) * CHAR_W + MARGIN, width // 2)


def _svg(width: float, height: float, title: str, body: list[str]) -> str:
    return (f'<svg class="cb-chart" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{esc(title)}" {FONT}>'
            f"<title>{esc(title)}</title>{''.join(body)}</svg>")


@dataclass(frozen=True)
class Bar:
    label: str
    value: float | None
    color: str
    title: str = ""  # tooltip; the label and value when empty


def bar_chart(bars: Sequence[Bar], title: str, *, width: int = 720, reference: float | None = None,
              scale: float | None = None) -> str:
    """One horizontal bar per entry, in order; a dashed line at ``reference`` when the scale passes it."""
    finite = [b.value for b in bars if b.value is not None and b.value > 0]
    top = scale if scale and scale > 0 else max([reference or 0.0, *finite, 1.0])
    label_w = _label_width([b.label for b in bars], width)
    x0 = MARGIN + label_w
    span = max(width - x0 - 70, 10)
    height = 2 * MARGIN + max(len(bars), 1) * (ROW + GAP) - GAP
    body = []
    if not bars:
        body.append(f'<text x="{MARGIN}" y="{MARGIN + ROW - 5}" fill="{TEXT}">nothing to show</text>')
    for i, b in enumerate(bars):
        y = MARGIN + i * (ROW + GAP)
        length = 0.0 if b.value is None or b.value <= 0 else min(b.value, top) / top * span
        value = "-" if b.value is None else f"{b.value:.2f}"
        tip = b.title or f"{b.label}: {value}"
        body.append(f'<g class="cb-bar"><title>{esc(tip)}</title>'
                    f'<text x="{x0 - 6}" y="{y + ROW - 5}" text-anchor="end" fill="{TEXT}">'
                    f"{esc(_short(b.label))}</text>"
                    f'<rect x="{x0}" y="{y}" width="{length:.1f}" height="{ROW}" fill="{b.color}" rx="2"/>'
                    f'<text x="{x0 + length + 4:.1f}" y="{y + ROW - 5}" fill="{TEXT}">{value}</text></g>')
    if reference is not None and top > reference:
        x = x0 + reference / top * span
        body.append(f'<line class="cb-reference" x1="{x:.1f}" y1="2" x2="{x:.1f}" y2="{height - 2}" stroke="{AXIS}" '
                    'stroke-dasharray="4 3"/>')
    return _svg(width, height, title, body)


@dataclass(frozen=True)
class Cell:
    case: str  # the column label (case id)
    kind: str  # a key of the page's CATEGORIES (passed, precision, runtime, guard, missing, harness, skipped)
    letter: str
    color: str
    title: str


CELL = 22


def grid(rows: Sequence[tuple[str, Sequence[Cell]]], title: str = "Operators x cases") -> str:
    """One row per operator, one square per case (colour and letter by category), case ids in the tooltips."""
    columns = max((len(cells) for _, cells in rows), default=0)
    label_w = _label_width([name for name, _ in rows], 900)
    width = MARGIN * 2 + label_w + max(columns, 1) * (CELL + 2)
    height = MARGIN * 2 + max(len(rows), 1) * (CELL + 2)
    body = []
    if not rows:
        body.append(f'<text x="{MARGIN}" y="{MARGIN + ROW - 5}" fill="{TEXT}">no cases</text>')
    for r, (name, cells) in enumerate(rows):
        y = MARGIN + r * (CELL + 2)
        body.append(f'<text x="{MARGIN + label_w - 6}" y="{y + CELL - 7}" text-anchor="end" fill="{TEXT}">'
                    f"{esc(_short(name))}</text>")
        for c, cell in enumerate(cells):
            x = MARGIN + label_w + c * (CELL + 2)
            body.append(f'<g class="cb-cell cb-{esc(cell.kind)}"><title>{esc(cell.title)}</title>'
                        f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="{cell.color}" rx="3"/>'
                        f'<text x="{x + CELL / 2:.0f}" y="{y + CELL - 7}" text-anchor="middle" fill="#fff" '
                        f'font-weight="bold">{esc(cell.letter)}</text></g>')
    return _svg(width, height, title, body)


@dataclass(frozen=True)
class Point:
    label: str  # the case key
    speedup: float  # T_baseline / T_cand
    ceiling: float | None  # T_baseline / T_HW: the speed-up of a kernel at the hardware limit
    color: str
    interval: tuple[float, float] | None = None  # the paired speed-up's 95% interval


def _ticks(low: float, high: float) -> list[float]:
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    ticks = []
    mantissas = (1, 2, 5) if last - first <= 3 else (1,)  # wide ranges: decades only, or the labels collide
    for exponent in range(first, last + 1):
        for mantissa in mantissas:
            value = mantissa * 10.0 ** exponent
            if low <= value <= high:
                ticks.append(value)
    return ticks


def _tick_text(value: float) -> str:
    return f"{value:g}×"


def speedup_chart(points: Sequence[Point], title: str = "Speed-up over the baseline (log scale)",
                  width: int = 720) -> str:
    """Speed-up per timed case on a log axis: a dot for the candidate, a bar to its T_HW ceiling, a line at 1×.

    A dot right of its ceiling is faster than the measured hardware limit: ``implausible_time`` on the board.
    """
    values = [v for p in points for v in (p.speedup, p.ceiling, *(p.interval or ())) if v is not None and v > 0]
    if not points or not values:
        return _svg(width, 2 * MARGIN + ROW, title,
                    [f'<text x="{MARGIN}" y="{MARGIN + ROW - 5}" fill="{TEXT}">no timed cases</text>'])
    low, high = min([*values, 1.0]) / 1.5, max([*values, 1.0]) * 1.5
    label_w = _label_width([p.label for p in points], width)
    x0 = MARGIN + label_w
    span = max(width - x0 - 60, 10)

    def x(value: float) -> float:
        return x0 + (math.log10(value) - math.log10(low)) / (math.log10(high) - math.log10(low)) * span

    axis_y = MARGIN + len(points) * (ROW + GAP)
    height = axis_y + 24
    body = []
    for tick in _ticks(low, high):
        body.append(f'<line x1="{x(tick):.1f}" y1="{MARGIN}" x2="{x(tick):.1f}" y2="{axis_y}" stroke="#e4e4e4"/>'
                    f'<text x="{x(tick):.1f}" y="{axis_y + 14}" text-anchor="middle" fill="{TEXT}">'
                    f"{_tick_text(tick)}</text>")
    body.append(f'<line class="cb-baseline" x1="{x(1.0):.1f}" y1="{MARGIN - 4}" x2="{x(1.0):.1f}" y2="{axis_y}" '
                f'stroke="{AXIS}" stroke-dasharray="4 3"/>')
    for i, p in enumerate(points):
        cy = MARGIN + i * (ROW + GAP) + ROW / 2
        ceiling = f"; T_HW ceiling ×{p.ceiling:.2f}" if p.ceiling else ""
        ci = f" [95% CI ×{p.interval[0]:.3g}, ×{p.interval[1]:.3g}]" if p.interval else ""
        body.append(f'<g class="cb-point"><title>{esc(p.label)}: ×{p.speedup:.3g}{esc(ci)}{esc(ceiling)}</title>'
                    f'<text x="{x0 - 6}" y="{cy + 4:.1f}" text-anchor="end" fill="{TEXT}">'
                    f"{esc(_short(p.label))}</text>")
        if p.ceiling and p.ceiling > 0:
            left, right = sorted((x(p.speedup), x(p.ceiling)))
            body.append(f'<rect class="cb-gap" x="{left:.1f}" y="{cy - 2:.1f}" width="{right - left:.1f}" height="4" '
                        'fill="#d0d7e2"/>'
                        f'<line class="cb-ceiling" x1="{x(p.ceiling):.1f}" y1="{cy - 7:.1f}" x2="{x(p.ceiling):.1f}" '
                        f'y2="{cy + 7:.1f}" stroke="#333" stroke-width="2"/>')
        if p.interval and min(p.interval) > 0:
            left, right = (x(v) for v in sorted(p.interval))
            body.append(f'<path class="cb-interval" d="M{left:.1f} {cy - 4:.1f}v8M{left:.1f} {cy:.1f}H{right:.1f}'
                        f'M{right:.1f} {cy - 4:.1f}v8" stroke="{p.color}" stroke-width="2" fill="none"/>')
        body.append(f'<circle cx="{x(p.speedup):.1f}" cy="{cy:.1f}" r="6" fill="{p.color}"/></g>')
    return _svg(width, height, title, body)

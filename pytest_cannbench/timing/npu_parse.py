"""Ascend NPU timing, the pure half: secret delimiter shapes and the ``kernel_details.csv`` parser.

Each timed step is ``clean(); call(); device_sync(); prof.step()`` (:mod:`.npu_run`), where ``clean`` is the
harness's L2-flushing reduction. Unlike the official harness, which finds its own kernels by name (a
submission can call its kernel ``CannBenchCacheClean`` and hide its time), harness kernels are recognised by an
input shape the submission cannot know: every session draws a secret shape for the cache-clean buffer
(see :func:`pick_secret_shape`). A row whose ``Input Shapes`` matches a secret is a delimiter; the rows
after it, up to the next delimiter, are one step, and a step's time is the sum of all its kernels'
durations (not a sum of per-name medians, which distorts kernels that run in only some steps).

The parser fails closed: anything it cannot attribute with certainty raises :class:`ProfileParseError`.
Only the csv module and the standard library are imported here, so the parser loads (and is tested) on
machines without an NPU.
"""

from __future__ import annotations

import csv
import io
import math
import os
import random
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path


class ProfileParseError(RuntimeError):
    """The profiler output cannot be attributed to steps with certainty; the case is not timed."""


# --------------------------------------------------------------------------------------------
# secret shapes


def pick_secret_shape(*, min_bytes: int = 192 << 20, itemsize: int = 2, lead: tuple[int, ...] = (96, 1024),
                      rng: random.Random | None = None) -> tuple[int, ...]:
    """A cache-clean buffer shape ``lead + (d,)`` of at least ``min_bytes``, ``d`` drawn per session.

    The last dim comes from the OS entropy source by default (a submission cannot replay a seed) and
    is never a power of two, so it does not collide with shapes real operators commonly use.
    """
    rng = rng or random.SystemRandom()
    row = math.prod(lead) * itemsize
    low = max(2, -(-min_bytes // row))
    while True:
        last = rng.randrange(low, 2 * low)
        if last & (last - 1):
            return (*lead, last)


def shape_key(shape: Iterable[int]) -> str:
    """``(96, 1024, 1537)`` -> ``"96,1024,1537"``: how kernel_details.csv writes one input's shape."""
    return ",".join(str(int(d)) for d in shape)


_SHAPE_NOISE = re.compile(r"[\s\"'\[\]()]")
_SECRET_FORM = re.compile(r"[0-9]+(,[0-9]+)*(;[0-9]*(,[0-9]+)*)*")


def normalize_shapes(text: str | None) -> str:
    """Canonical ``Input Shapes`` text: no whitespace, quotes or brackets; inputs stay ``;``-separated.

    CANN/torch_npu releases write ``96,1024,1024;3``, ``"96,1024,1024;3"`` (quotes kept inside the
    field) or bracketed lists; all compare equal after this.
    """
    if text is None:
        return ""
    return _SHAPE_NOISE.sub("", text)


def normalize_secrets(secret_shapes: Iterable[str]) -> frozenset[str]:
    secrets = set()
    for raw in secret_shapes:
        if not isinstance(raw, str):
            raise ValueError(f"secret shapes are strings like '96,1024,1537', got {raw!r}")
        norm = normalize_shapes(raw)
        # an empty or non-numeric secret would match every kernel without inputs (N/A, "")
        if not _SECRET_FORM.fullmatch(norm):
            raise ValueError(f"secret shape {raw!r} is not a list of dims like '96,1024,1537'")
        secrets.add(norm)
    if not secrets:
        raise ValueError("no secret shape given: harness kernels could not be told apart")
    return frozenset(secrets)


def matches_secret(input_shapes: str | None, secrets: frozenset[str]) -> bool:
    """Whether a row's ``Input Shapes`` marks a harness kernel: the whole field or its first input matches.

    Matching the first input alone lets the harness leave the reduction's extra inputs (axes, ...) to
    however the installed CANN renders them; ``secrets`` must come from :func:`normalize_secrets`.
    """
    norm = normalize_shapes(input_shapes)
    if not norm:
        return False
    return norm in secrets or norm.split(";", 1)[0] in secrets


# --------------------------------------------------------------------------------------------
# columns

_FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    # in priority order: the first alias present wins
    "duration": ("duration", "task duration"),
    "start": ("start time", "task start time"),
    "name": ("name", "kernel name", "op name"),
    "shapes": ("input shapes", "input shape"),
    "type": ("type", "op type", "task type"),
    "step": ("step id",),
    "device": ("device id",),
    "stream": ("stream id",),
}
_TIMED_FIELDS = ("duration", "start")
_REQUIRED_FIELDS = ("duration", "name", "shapes")
_UNIT_TO_US = {"us": Decimal(1), "ns": Decimal("0.001"), "ms": Decimal(1000), "s": Decimal(1000000)}
_HEADER_UNIT = re.compile(r"^(.*?)\s*\(\s*([^)]*?)\s*\)$")
_MISSING = {"", "n/a", "na", "none", "null", "nan", "-"}


def split_header(header: str) -> tuple[str, str | None]:
    """``"\\ufeffStart Time(μs) "`` -> ``("start time", "us")``: case, BOM, ``_``, spacing and micro sign folded."""
    text = header.replace("\ufeff", "").strip().lower()
    text = text.replace("\u00b5", "u").replace("\u03bc", "u").replace("_", " ")
    text = " ".join(text.split())
    match = _HEADER_UNIT.match(text)
    if match:
        return match.group(1), match.group(2).replace(" ", "")
    return text, None


@dataclass(frozen=True)
class _Columns:
    index: dict[str, int]
    scale: dict[str, Decimal]  # timed fields: factor to microseconds
    notes: tuple[str, ...]


def _map_columns(header: list[str]) -> _Columns:
    found: dict[str, tuple[int, int, str | None]] = {}  # field -> (alias rank, column, unit)
    for col, raw in enumerate(header):
        base, unit = split_header(raw)
        for fld, aliases in _FIELD_ALIASES.items():
            if base not in aliases:
                continue
            if fld not in _TIMED_FIELDS and unit is not None:
                continue
            if fld in _TIMED_FIELDS and unit is not None and unit not in _UNIT_TO_US:
                continue  # e.g. cycles: not a time
            rank = aliases.index(base)
            if fld not in found or rank < found[fld][0]:
                found[fld] = (rank, col, unit)
    missing = [fld for fld in _REQUIRED_FIELDS if fld not in found]
    if missing:
        raise ProfileParseError(f"kernel_details.csv lacks column(s) {', '.join(missing)}; header is {header!r}")
    notes = []
    scale = {}
    for fld in _TIMED_FIELDS:
        if fld in found:
            unit = found[fld][2]
            if unit is None:
                notes.append(f"column {header[found[fld][1]]!r} has no unit; read as microseconds")
            scale[fld] = _UNIT_TO_US[unit or "us"]
    return _Columns({fld: col for fld, (_, col, _) in found.items()}, scale, tuple(notes))


def _is_missing(text: str) -> bool:
    return text.strip().lower() in _MISSING


def _decimal(text: str) -> Decimal | None:
    """Exact value of a numeric cell (start times are epoch microseconds: float64 would drop digits)."""
    if _is_missing(text):
        return None
    try:
        value = Decimal(text.strip())  # strip() also drops the tab torch_npu appends to timestamps
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


# --------------------------------------------------------------------------------------------
# parsing


@dataclass(frozen=True)
class Kernel:
    """One counted device task of a step."""

    name: str
    duration_us: float
    start_us: Decimal | None
    type: str = ""
    stream: str = ""


@dataclass(frozen=True)
class _Row:
    line: int
    name: str
    duration_us: float | None
    raw_duration: str
    start_us: Decimal | None
    delimiter: bool
    shapes: str
    type: str
    stream: str
    step: str
    device: str


@dataclass
class ProfiledSteps:
    """Per-step device time of the candidate, harness kernels removed."""

    step_us: list[float]  # sum of all counted kernel durations of each step
    kernels_per_step: list[int]
    dropped_nonpositive: int  # candidate rows with duration <= 0, not counted
    notes: list[str] = field(default_factory=list)
    kernels: list[list[Kernel]] = field(default_factory=list)  # counted kernels of each step, in start order
    no_device_kernel: list[bool] = field(default_factory=list)  # step had no counted kernel (time 0)
    span_us: list[float | None] = field(default_factory=list)  # first start to last end; None without starts
    reordered: bool = False  # rows were not in start-time order in the file and were sorted
    source: str | None = None

    @property
    def signatures(self) -> list[tuple[str, ...]]:
        """Each step's kernel names as a sorted multiset: equal signatures mean the same kernels ran."""
        return [tuple(sorted(k.name for k in step)) for step in self.kernels]

    def signature_mismatches(self) -> list[int]:
        """Steps whose kernels differ from the most common signature (the first one on a tie)."""
        sigs = self.signatures
        if not sigs:
            return []
        common = Counter(sigs).most_common(1)[0][0]
        return [i for i, sig in enumerate(sigs) if sig != common]

    @property
    def median_us(self) -> float:
        return float(statistics.median(self.step_us))

    @property
    def empty_steps(self) -> list[int]:
        return [i for i, empty in enumerate(self.no_device_kernel) if empty]


def official_median_per_name_us(steps: ProfiledSteps) -> float:
    """The official harness's figure, for comparison: per name, the median of its per-step sums, summed.

    A name that ran in only some steps contributes the median over those steps, so a kernel that ran once
    (first-call setup, a lazily built table) is charged in full, and per-name medians from different
    steps need not add up to any step that happened. Rounded to 0.01 us like the official report.
    """
    per_name: dict[str, list[float]] = defaultdict(list)
    for step in steps.kernels:
        sums: dict[str, float] = defaultdict(float)
        for kernel in step:
            sums[kernel.name] += kernel.duration_us
        for name, total in sums.items():
            per_name[name].append(total)
    return round(sum(statistics.median(v) for v in per_name.values()), 2)


def _read_rows(text: str, secrets: frozenset[str]) -> tuple[list[_Row], _Columns]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    for row in reader:
        if any(cell.strip() for cell in row):
            header = row
            break
    if header is None:
        raise ProfileParseError("kernel_details.csv is empty (no header)")
    width = len(header)
    while width and not header[width - 1].strip():
        width -= 1  # a trailing comma on the header line
    cols = _map_columns(header[:width])

    def cell(row: list[str], fld: str) -> str:
        col = cols.index.get(fld)
        return row[col].strip() if col is not None else ""

    rows: list[_Row] = []
    for row in reader:
        if not any(cell_.strip() for cell_ in row):
            continue  # blank lines, trailing newlines
        line = reader.line_num
        if len(row) < width:
            raise ProfileParseError(f"line {line}: {len(row)} fields for {width} columns (file truncated?)")
        if any(extra.strip() for extra in row[width:]):
            raise ProfileParseError(f"line {line}: more fields than columns (an unquoted comma?): {row!r}")
        raw_duration = cell(row, "duration")
        duration = _decimal(raw_duration)
        start = None
        if "start" in cols.index:
            start = _decimal(cell(row, "start"))
            if start is None:
                raise ProfileParseError(f"line {line}: unreadable start time {cell(row, 'start')!r}")
            start *= cols.scale["start"]
        rows.append(_Row(
            line=line, name=cell(row, "name"), raw_duration=raw_duration,
            duration_us=None if duration is None else float(duration * cols.scale["duration"]),
            start_us=start, delimiter=matches_secret(cell(row, "shapes"), secrets), shapes=cell(row, "shapes"),
            type=cell(row, "type"),
            stream=cell(row, "stream"), step=cell(row, "step"), device=cell(row, "device")))
    return rows, cols


def parse_kernel_details_text(text: str, secret_shapes: Iterable[str], n_steps: int, *,
                              source: str | None = None) -> ProfiledSteps:
    """Split kernel_details.csv text into ``n_steps`` steps at the secret-shape delimiters and sum each."""
    if n_steps < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps}")
    secrets = normalize_secrets(secret_shapes)
    rows, cols = _read_rows(text.lstrip("\ufeff"), secrets)
    notes = list(cols.notes)
    where = f" in {source}" if source else ""

    devices = sorted({r.device for r in rows if not _is_missing(r.device)})
    if len(devices) > 1:
        raise ProfileParseError(f"kernels from several devices {devices}{where}: one run per device expected")

    reordered = False
    if "start" in cols.index:
        if any(_known_start(b) < _known_start(a) for a, b in zip(rows, rows[1:])):
            reordered = True
            rows.sort(key=_known_start)  # stable: equal starts keep file order
            notes.append("rows were not in start-time order; sorted by start time")
    else:
        notes.append("no start-time column: rows taken in file order, no spans")

    bounds = [i for i, r in enumerate(rows) if r.delimiter]
    if not bounds:
        hint = ""
        if rows and all(_is_missing(r.shapes) for r in rows):
            hint = "; Input Shapes is empty throughout: the profiler level recorded no tensor info (use Level1+)"
        raise ProfileParseError(f"no harness delimiter (secret input shape) among {len(rows)} rows{where}{hint}")
    if bounds[0] != 0:
        lead = ", ".join(repr(r.name) for r in rows[:min(bounds[0], 3)])
        raise ProfileParseError(f"{bounds[0]} kernel row(s) before the first harness delimiter{where} ({lead}): "
                                "not attributable to a step")
    if len(bounds) == n_steps + 1:
        if bounds[-1] != len(rows) - 1:
            raise ProfileParseError(f"{n_steps + 1} delimiters for {n_steps} steps{where} and kernels after the last "
                                    "one: cannot tell which delimiter is extra")
        rows.pop()
        bounds.pop()
        notes.append("a trailing harness delimiter after the last step was ignored")
    elif len(bounds) != n_steps:
        raise ProfileParseError(f"found {len(bounds)} harness delimiters{where}, expected {n_steps} "
                                "(one per step, or one more trailing)")

    result = ProfiledSteps(step_us=[], kernels_per_step=[], dropped_nonpositive=0, notes=notes,
                           reordered=reordered, source=source)
    step_ids: list[set[str]] = []
    for index, begin in enumerate(bounds):
        end = bounds[index + 1] if index + 1 < len(bounds) else len(rows)
        counted: list[Kernel] = []
        for row in rows[begin + 1:end]:
            if row.duration_us is None or not math.isfinite(row.duration_us):
                raise ProfileParseError(f"line {row.line}: kernel {row.name!r} has no usable duration "
                                        f"({row.raw_duration!r}){where}")
            if row.duration_us <= 0:
                result.dropped_nonpositive += 1
                continue
            counted.append(Kernel(row.name, row.duration_us, row.start_us, row.type, row.stream))
        result.kernels.append(counted)
        result.step_us.append(math.fsum(k.duration_us for k in counted))
        result.kernels_per_step.append(len(counted))
        result.no_device_kernel.append(not counted)
        result.span_us.append(_span(counted))
        step_ids.append({r.step for r in rows[begin:end] if not _is_missing(r.step)})

    if result.dropped_nonpositive:
        notes.append(f"{result.dropped_nonpositive} kernel row(s) with non-positive duration dropped")
    if result.empty_steps:
        notes.append(f"no_device_kernel in step(s) {result.empty_steps}")
    if "step" in cols.index:
        notes.extend(_step_id_notes(step_ids))
    return result


def _span(kernels: list[Kernel]) -> float | None:
    if not kernels or any(k.start_us is None for k in kernels):
        return None
    first = min(_known_start(k) for k in kernels)
    last = max(_known_start(k) + Decimal(repr(k.duration_us)) for k in kernels)
    return float(last - first)


def _known_start(item: _Row | Kernel) -> Decimal:
    """The start time where one is guaranteed: ``_read_rows`` rejects a row without one when the column exists."""
    assert item.start_us is not None
    return item.start_us


def _step_id_notes(step_ids: list[set[str]]) -> list[str]:
    """Cross-check against the profiler's own Step Id (informational: the delimiters are authoritative)."""
    notes = [f"step {i} spans profiler Step Ids {sorted(ids)}" for i, ids in enumerate(step_ids) if len(ids) > 1]
    singles = [next(iter(ids)) for ids in step_ids if len(ids) == 1]
    if len(singles) != len(set(singles)):
        notes.append("several delimited steps share one profiler Step Id")
    return notes


def parse_kernel_details(path: str | os.PathLike[str], secret_shapes: Iterable[str], n_steps: int) -> ProfiledSteps:
    """:func:`parse_kernel_details_text` on a file (UTF-8, with or without BOM)."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            text = handle.read()
    except UnicodeDecodeError as exc:
        raise ProfileParseError(f"{path} is not UTF-8: {exc}") from exc
    except OSError as exc:
        raise ProfileParseError(f"cannot read {path}: {exc}") from exc
    return parse_kernel_details_text(text, secret_shapes, n_steps, source=str(path))

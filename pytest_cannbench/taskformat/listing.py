"""``cannbench list TREE`` and ``cannbench info OP``: a task tree and one operator as text, without grading.

What the official harness's ``list``/``info`` show a task author: which operators a tree holds, their levels,
case counts and dtypes, and for one operator its proto (inputs, outputs, attributes) and the case table. Read
with the same parser collection uses (:func:`spec.load_operator`), so a broken operator is reported here as the
run would report it, and nothing runs a golden or imports torch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_cannbench.taskformat.dirs import find_bench_root, iter_operator_dirs
from pytest_cannbench.taskformat.errors import TaskFormatError
from pytest_cannbench.taskformat.spec import OperatorTask, TensorDecl, load_operator

NOTE_CHARS = 48


@dataclass(frozen=True)
class OperatorEntry:
    """One operator directory of a tree, summarised; ``problem`` is why it cannot be graded at all."""

    rel_path: str
    name: str
    level: int | None
    category: str
    cases: int
    broken_cases: int
    dtypes: tuple[str, ...]
    problem: str = ""


def load(op_dir: Path) -> OperatorTask:
    """An operator directory parsed as collection parses it (raises :class:`TaskFormatError`)."""
    op_dir = op_dir.resolve()
    return load_operator(op_dir, find_bench_root(op_dir))


def scan(root: Path) -> list[OperatorEntry]:
    """Every operator below ``root`` (a tree, a level or one operator), sorted as collection sorts them."""
    entries = []
    for op_dir in iter_operator_dirs(root):
        try:
            task = load(op_dir)
        except TaskFormatError as exc:
            bench_root = find_bench_root(op_dir)
            rel_path = op_dir.relative_to(bench_root).as_posix() if op_dir != bench_root else op_dir.name
            entries.append(OperatorEntry(rel_path, op_dir.name, None, "", 0, 0, (), " ".join(str(exc).split())))
            continue
        dtypes: list[str] = []
        for case in task.cases:
            dtypes += [d for d in case.dtype_names if d not in dtypes]
        entries.append(OperatorEntry(task.rel_path, task.spec.name, task.level, task.spec.category, len(task.cases),
                                     sum(1 for c in task.cases if c.error), tuple(dtypes)))
    return entries


def list_lines(entries: list[OperatorEntry]) -> list[str]:
    """The tree as a table, then per-level and total counts."""
    lines = [f"{'operator':<36} {'level':>5} {'cases':>5}  {'category':<16} dtypes"]
    for e in entries:
        if e.problem:
            lines.append(f"{e.rel_path:<36} {'-':>5} {'-':>5}  BROKEN: {e.problem[:200]}")
            continue
        broken = f" ({e.broken_cases} broken)" if e.broken_cases else ""
        lines.append(f"{e.rel_path:<36} {e.level if e.level is not None else '-':>5} {e.cases:>5}  "
                     f"{e.category[:16]:<16} {', '.join(e.dtypes) or '-'}{broken}")
    levels: Counter[str] = Counter()
    cases: Counter[str] = Counter()
    for e in entries:
        name = f"level{e.level}" if e.level is not None else "no level"
        levels[name] += 1
        cases[name] += e.cases
    summary = ", ".join(f"{name} {n} ops / {cases[name]} cases" for name, n in sorted(levels.items()))
    unusable = sum(1 for e in entries if e.problem)
    lines.append(f"{len(entries)} operators, {sum(e.cases for e in entries)} cases"
                 + (f", {unusable} operators broken" if unusable else "") + (f"; {summary}" if summary else ""))
    return lines


def _shape(value: Any) -> str:
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
        return "x".join(str(v) for v in value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_shape(v) for v in value) + "]" if value else "[]"
    return str(value)


def _shapes(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_shape(v) for v in value)
    return str(value)


def _tensor(decl: TensorDecl) -> str:
    flags = [f for f, on in (("optional", decl.optional), ("list", decl.is_list), ("not compared", not decl.compare))
             if on]
    return f"  {decl.name:<20} {', '.join(decl.dtypes) or 'any':<36} {' '.join(flags)}".rstrip()


def _short(value: Any, width: int) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def info_lines(task: OperatorTask) -> list[str]:
    """One operator: its proto (schema, inputs, outputs, attributes, thresholds, perf model) and its cases."""
    spec = task.spec
    lines = [f"{task.rel_path}: {spec.name} (level {task.level if task.level is not None else '-'}, "
             f"{spec.category or 'no category'}, difficulty {spec.difficulty or '-'})",
             f"directory: {task.op_dir}",
             f"schema: {spec.schema or '-'}",
             f"function: {spec.function_name}",
             "inputs:", *(_tensor(d) for d in spec.inputs),
             "outputs:", *(_tensor(d) for d in spec.outputs)]
    if spec.attrs:
        lines.append("attributes:")
        lines += [f"  {a.name:<20} {a.type:<12} " + (f"default {a.default!r}" if a.has_default else "required")
                  for a in spec.attrs]
    else:
        lines.append("attributes: none")
    if spec.precision_thresholds:
        lines.append("precision thresholds: " + ", ".join(f"{k} {v:g}" for k, v in spec.precision_thresholds.items()))
    lines.append(f"perf_model: {'declared' if spec.perf_model is not None else 'none (T_HW from the bytes moved)'}")
    lines.append(f"cases ({len(task.cases)}):")
    lines.append(f"  {'id':>4}  {'input shapes':<32} {'dtypes':<24} {'attrs':<28} {'range':<14} note")
    for case in task.cases:
        raw = case.raw
        attrs = ", ".join(f"{k}={v}" for k, v in case.attrs.items()) or "-"
        case_id = case.case_id if case.case_id is not None else f"#{case.index}"
        lines.append(f"  {case_id!s:>4}  {_short(_shapes(raw.get('input_shape')), 32):<32} "
                     f"{_short(', '.join(case.dtype_names) or '-', 24):<24} {_short(attrs, 28):<28} "
                     f"{_short(raw.get('value_range', '-'), 14):<14} {_short(raw.get('note') or '', NOTE_CHARS)}")
        if case.error:
            lines.append(f"        ERROR: {case.error}")
        lines += [f"        warning: {w}" for w in case.warnings]
    lines += [f"warning: {w}" for w in task.warnings]
    return lines

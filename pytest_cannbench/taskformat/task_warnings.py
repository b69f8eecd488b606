"""An operator directory's warnings as one message: collection warns once per operator, however many cases share a
problem (bench_lab's cv_agent_fa_bench warned 480 times, once per case, before)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_cannbench.taskformat.spec import OperatorTask


def operator_warning(task: OperatorTask, extra: list[str] | None = None) -> str | None:
    """Every warning of an operator directory as one message (collection warns once per operator): proto.yaml's,
    then each distinct case warning with the cases it concerns (``case_id 1-11``), then ``extra`` lines."""
    lines = [*task.warnings]
    grouped: dict[str, list[int]] = {}
    for case in task.cases:
        for case_id, message in case.notes:
            grouped.setdefault(message, [])
            if case_id is not None:
                grouped[message].append(case_id)
    cases_yaml = task.op_dir / "cases.yaml"
    for message, ids in grouped.items():
        where = f"case_id {_id_ranges(ids)}" + (f" ({len(ids)} cases)" if len(ids) > 1 else "") if ids else ""
        lines.append(f"{cases_yaml}: {where + ': ' if where else ''}{message}")
    lines += extra or []
    if not lines:
        return None
    if len(lines) == 1:
        return lines[0]
    return f"{task.op_dir}: {len(lines)} task warnings:\n" + "\n".join(f"  - {line}" for line in lines)


def _id_ranges(ids: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``1-3, 5``."""
    ids = sorted(set(ids))
    parts: list[str] = []
    start = prev = ids[0]
    for i in [*ids[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(parts)

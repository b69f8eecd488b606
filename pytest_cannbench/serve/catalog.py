"""The task tree a server grades, read once at start-up (YAML only, no torch), and a request's selection of it.

A request's ``operators`` (names or paths, each must exist) and ``select`` (a ``-k`` expression) are evaluated
here, in the front, so a bad selection is a 422 before anything is queued and every judge grades exactly the cases
the front chose. ``select`` is the grading core's selection (``core.select``: pytest's ``-k`` grammar,
case-insensitive substrings) over the names the core gives a case: the operator's name, its path (``level1/gelu``),
its item name (``gelu[01]``), its dtypes, category and level; ``01`` selects case 1 of a tree with two-digit ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_cannbench.core.select import SelectError, compile_selection
from pytest_cannbench.serve.intake import BadRequest
from pytest_cannbench.taskformat.dirs import find_bench_root, iter_operator_dirs
from pytest_cannbench.taskformat.errors import TaskFormatError
from pytest_cannbench.taskformat.spec import load_operator


@dataclass(frozen=True)
class CaseInfo:
    key: str  # the official case key, level1/gelu_1
    rel_path: str  # level1/gelu
    operator: str  # the operator's directory name, gelu
    case_id: int | None
    words: tuple[str, ...]

    def plain(self) -> dict[str, object]:
        """What an outcome placeholder needs (``answer.placeholder``)."""
        return {"key": self.key, "rel_path": self.rel_path, "operator": self.operator, "case_id": self.case_id}


class Catalog:
    def __init__(self, tasks: Path, cases: list[CaseInfo], broken: dict[str, str]) -> None:
        self.tasks, self.cases, self.broken = tasks, cases, broken
        self.operators = sorted({c.rel_path for c in cases} | set(broken))

    @classmethod
    def read(cls, tasks: Path) -> Catalog:
        """Every case of a CANN-format tree (an operator whose files do not parse is listed in ``broken``)."""
        cases: list[CaseInfo] = []
        broken: dict[str, str] = {}
        for op_dir in iter_operator_dirs(tasks):
            root = find_bench_root(op_dir)
            try:
                task = load_operator(op_dir, root)
            except TaskFormatError as exc:
                broken[op_dir.relative_to(root).as_posix() if op_dir != root else op_dir.name] = str(exc)
                continue
            ids = [c.case_id for c in task.cases if c.case_id is not None]
            width = max(2, len(str(max(ids)))) if ids else 2
            for case in task.cases:
                if case.case_id is None:
                    continue
                name = f"{op_dir.name}[{case.case_id:0{width}d}]"
                words = (
                    task.spec.name,
                    task.rel_path,
                    name,
                    *case.dtype_names,
                    *([task.spec.category] if task.spec.category else []),
                    *([f"level{task.level}"] if task.level is not None else []),
                )
                cases.append(
                    CaseInfo(
                        task.case_key(case.case_id),
                        task.rel_path,
                        op_dir.name,
                        case.case_id,
                        tuple(w for w in words if w),
                    )
                )
        return cls(tasks, cases, broken)

    def select(self, expression: str | None, operators: list[str] | None) -> list[CaseInfo]:
        """The cases a request names; :class:`BadRequest` naming the field when a name is unknown, the expression
        does not parse or nothing is selected."""
        chosen = self.cases
        if operators is not None:
            known = {c.rel_path for c in self.cases} | {c.operator for c in self.cases}
            for i, name in enumerate(operators):
                if name in self.broken:
                    raise BadRequest(
                        f"operators[{i}]", f"{name!r} cannot be graded on this server: {self.broken[name]}"
                    )
                if name not in known:
                    raise BadRequest(
                        f"operators[{i}]", f"unknown operator {name!r}; this server grades {_listing(self.operators)}"
                    )
            wanted = set(operators)
            chosen = [c for c in chosen if c.rel_path in wanted or c.operator in wanted]
        if expression:
            try:
                match = compile_selection(expression)
            except SelectError as exc:
                raise BadRequest("select", f"not a -k expression: {exc}") from None
            chosen = [c for c in chosen if match(c.words)]
        if not chosen:
            raise BadRequest(
                "select" if expression else "operators",
                f"selects no case of this server's tree ({len(self.cases)} cases of {_listing(self.operators)})",
            )
        return chosen


def _listing(names: list[str], most: int = 12) -> str:
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more if names else "no operator"

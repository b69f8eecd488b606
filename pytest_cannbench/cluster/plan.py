"""A task tree cut into shards for a cluster run: every operator in exactly one shard, the shards balanced by case
count.

``--cann-shard K/N`` hashes an operator's path, so its shards are even in operators only on average and never in
cases (one 200-case operator beside ten 2-case ones). Here the whole tree is read first (the parser collection
uses, no torch), so the split can weigh each operator by its cases: the heaviest first, each to the shard with the
fewest cases so far (longest-processing-time first, within 4/3 of the best split). A shard's session is told which
operators are not its own by ``--ignore``, so it collects the same tree as a local run, from the same
``--cann-tasks`` root, and its board is keyed exactly as a local board.

Each operator also carries the case keys its board will hold, read from its ``cases.yaml``: the assembly checks
every shard's board against them and names what is missing, never a silently smaller board.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pytest_cannbench.report.merge import InputError
from pytest_cannbench.taskformat.dirs import find_bench_root, iter_operator_dirs, looks_like_operator_dir
from pytest_cannbench.taskformat.errors import TaskFormatError
from pytest_cannbench.taskformat.spec import load_operator

# KernelBench problem files (kernelbench/collect.py's default naming): their cases come from --cann-kb-trials and
# their collection needs pytest, so a cluster run does not plan them (see refuse_problems).
_PROBLEM_NAME = re.compile(r"^\d+_\w+\.py$")
_MODEL_CLASS = re.compile(r"^class\s+Model\s*\(", re.MULTILINE)


@dataclass(frozen=True)
class Unit:
    """One operator directory: what a shard grades and the board names."""

    rel_path: str  # its path under the bench root (level1/gelu): its name on the board
    path: str  # the directory, absolute and resolved: what every node must see at this path
    keys: tuple[str, ...]  # the case keys its board holds (one `_task` key for an operator that cannot be loaded)
    problem: str = ""  # why it cannot be loaded (its shard reports it as an invalid task)

    @property
    def cases(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class Shard:
    """The operators one pytest session grades; ``index`` counts from 1."""

    index: int
    total: int
    units: tuple[Unit, ...]

    @property
    def label(self) -> str:
        return f"{self.index}/{self.total}"

    @property
    def cases(self) -> int:
        return sum(u.cases for u in self.units)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for u in self.units for k in u.keys)

    def describe(self) -> str:
        names = ", ".join(u.rel_path for u in self.units[:4]) + (
            f" +{len(self.units) - 4}" if len(self.units) > 4 else ""
        )
        return f"{len(self.units)} operators, {self.cases} cases ({names})"


def units_of(tree: Path) -> list[Unit]:
    """Every operator directory below ``tree`` (a bench root, a level, or one operator), as collection sorts them."""
    root = tree.resolve()
    if not root.is_dir():
        raise InputError(f"{tree}: no such directory (--tasks names a task tree, a level or an operator directory)")
    units = []
    for op_dir in iter_operator_dirs(root):
        bench_root = find_bench_root(op_dir)
        rel_path = op_dir.relative_to(bench_root).as_posix() if op_dir != bench_root else op_dir.name
        try:
            task = load_operator(op_dir, bench_root)
        except TaskFormatError as exc:
            units.append(Unit(rel_path, str(op_dir), (f"{rel_path}_task",), " ".join(str(exc).split())))
            continue
        units.append(Unit(task.rel_path, str(op_dir), tuple(task.result_key(c) for c in task.cases)))
    if not units:
        raise InputError(f"{tree}: no operator directory (proto.yaml and cases.yaml) below it")
    return units


def refuse_problems(tree: Path) -> None:
    """A tree holding KernelBench problem files is refused by name: planning only operator directories would
    leave the problems out of the board without a word."""
    root = tree.resolve()
    found = []
    for path in sorted(root.rglob("*.py")):
        if not _PROBLEM_NAME.match(path.name) or looks_like_operator_dir(path.parent):
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if _MODEL_CLASS.search(text):
            found.append(path.relative_to(root).as_posix())
    if found:
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
        raise InputError(
            f"{tree}: holds KernelBench problem files ({', '.join(found[:3])}{more}), which "
            "cluster-grade does not shard yet; grade them with pytest --cann-shard K/N on each host "
            "and cannbench merge (docs/ci.md), or point --tasks at the CANN operators only"
        )


def split(units: list[Unit], shards: int) -> list[Shard]:
    """At most ``shards`` shards (never an empty one), balanced by case count; deterministic for one tree."""
    if shards < 1:
        raise InputError(f"--shards must be at least 1 (got {shards})")
    count = min(shards, len(units))
    bins: list[list[Unit]] = [[] for _ in range(count)]
    loads = [0] * count
    # an operator that cannot be loaded still costs its shard a session's collection: weight 1
    for unit in sorted(units, key=lambda u: (-max(u.cases, 1), u.rel_path)):
        target = min(range(count), key=lambda i: (loads[i], len(bins[i]), i))
        bins[target].append(unit)
        loads[target] += max(unit.cases, 1)
    order = {u.rel_path: i for i, u in enumerate(units)}
    return [Shard(i + 1, count, tuple(sorted(b, key=lambda u: order[u.rel_path]))) for i, b in enumerate(bins)]


def ignored_elsewhere(shard: Shard, units: list[Unit]) -> list[str]:
    """The operator directories a shard's session must not collect: every other shard's, as ``--ignore`` args."""
    own = {u.path for u in shard.units}
    return [f"--ignore={u.path}" for u in units if u.path not in own]

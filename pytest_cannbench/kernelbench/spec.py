"""KernelBench (Stanford) problem trees: what a problem is and how its cases are named. No torch, no pytest, no
import of problem files (the pytest nodes are ``nodes.problems``).

A problem is a Python file defining ``class Model``, ``get_inputs()`` and ``get_init_inputs()``, e.g.
``level1/19_ReLU.py``. It becomes one File node with ``--cann-kb-trials`` correctness items on distinct
seeds and one timed item (also checked on its own seed): ``19_ReLU.py::19_ReLU[trial1]`` ...
``19_ReLU.py::19_ReLU[timed]``. ``-k relu`` selects a problem, ``-m level1`` a level, ``-k kernelbench`` the
format. The problem's ``rel_path`` is its path under the bench root (``level1/19_ReLU.py``), so case keys read
``level1/19_ReLU.py_1`` and the leaderboard tells the two formats apart by the ``.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pytest_cannbench.vocab.casekey import CaseKey

LEVEL_DIR = re.compile(r"^level(\d+)$")
PROBLEM_NAME = re.compile(r"^\d+_\w+\.py$")
MAX_PROBLEM_BYTES = 1 << 20
MODEL_CLASS = re.compile(r"^class\s+Model\s*\(", re.MULTILINE)
MODEL_NEW = re.compile(r"^class\s+ModelNew\b", re.MULTILINE)
GET_INPUTS = re.compile(r"^def\s+get_inputs\s*\(", re.MULTILINE)
GET_INIT_INPUTS = re.compile(r"^def\s+get_init_inputs\s*\(", re.MULTILINE)


@dataclass(frozen=True)
class Problem:
    path: Path  # the problem file
    rel_path: str  # its path under the bench root, e.g. level1/19_ReLU.py
    name: str  # the file's stem, e.g. 19_ReLU
    level: int | None

    def key(self, case_id: int) -> str:
        return str(CaseKey.case(self.rel_path, case_id))


def is_problem_source(text: str) -> bool:
    return bool(MODEL_CLASS.search(text) and GET_INPUTS.search(text) and GET_INIT_INPUTS.search(text)
                and not MODEL_NEW.search(text))


def is_problem(path: Path, bench: str) -> bool:
    """``auto``: a ``<n>_<name>.py`` file defining the three names; ``stanford``: any such ``.py`` file."""
    if bench == "cann" or path.suffix != ".py" or path.name in ("conftest.py", "__init__.py"):
        return False
    if bench == "auto" and not PROBLEM_NAME.match(path.name):
        return False
    try:
        if path.stat().st_size > MAX_PROBLEM_BYTES:
            return False
        return is_problem_source(path.read_text(errors="replace"))
    except OSError:
        return False


def bench_root(path: Path) -> Path:
    """The directory holding the ``levelN`` directories (or the file's own directory in a flat tree)."""
    for parent in path.parents:
        if LEVEL_DIR.match(parent.name):
            return parent.parent
    return path.parent


def problem_of(path: Path) -> Problem:
    path = path.resolve()
    rel = path.relative_to(bench_root(path)).as_posix()
    level = next((int(m.group(1)) for p in path.parents if (m := LEVEL_DIR.match(p.name))), None)
    return Problem(path=path, rel_path=rel, name=path.stem, level=level)


# an item's name, as ProblemFile makes it
ITEM_NAME = re.compile(r"(?P<problem>[^\[\]]+)\[(?P<label>timed|trial(?P<trial>\d+))\](?:\[cand=(?P<cand>[^\[\]]+)\])?")


def key_of_name(path: Path, name: str, trials: int) -> str | None:
    """The case key of the item ``name`` of the problem file ``path``, from its name alone, as :class:`ProblemFile`
    names its items (``<problem>[trial<i>]`` or ``[timed]``, then ``[cand=<name>]``): what the controller of an
    interrupted xdist session files an unrun item under (nodes.keys.key_from_nodeid)."""
    match = ITEM_NAME.fullmatch(name)
    if match is None or match["problem"] != path.stem:
        return None
    case_id = trials + 1 if match["label"] == "timed" else int(match["trial"])
    return str(CaseKey.case(problem_of(path).rel_path, case_id, match["cand"] or ""))

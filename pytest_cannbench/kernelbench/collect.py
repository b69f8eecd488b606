"""KernelBench (Stanford) problem trees: detection and pytest nodes. No torch, no import of problem files.

A problem is a Python file defining ``class Model``, ``get_inputs()`` and ``get_init_inputs()``, e.g.
``level1/19_ReLU.py``. It becomes one File node with ``--cann-kb-trials`` correctness items on distinct
seeds and one timed item (also checked on its own seed): ``19_ReLU.py::19_ReLU[trial1]`` ...
``19_ReLU.py::19_ReLU[timed]``. ``-k relu`` selects a problem, ``-m level1`` a level, ``-k kernelbench`` the
format. The problem's ``rel_path`` is its path under the bench root (``level1/19_ReLU.py``), so case keys read
``level1/19_ReLU.py_1`` and the leaderboard tells the two formats apart by the ``.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_cannbench import state
from pytest_cannbench.nodes.items import SourceItem
from pytest_cannbench.vocab.casekey import CaseKey
from pytest_cannbench.vocab.records import times_of

if TYPE_CHECKING:
    from pytest_cannbench.judge.source import CaseSource
    from pytest_cannbench.outcome import CaseOutcome
    from pytest_cannbench.state import CannBenchState

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


class ProblemItem(SourceItem):
    """One correctness trial (``case_id`` 1..T) or the timed case (``case_id`` T+1) of a problem."""

    def __init__(self, *, problem: Problem, case_id: int, trials: int, candidate: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.problem, self.case_id, self.trials, self.candidate = problem, case_id, trials, candidate
        self.user_properties.append(("cann_case", str(CaseKey.case(problem.rel_path, case_id, candidate or ""))))
        if candidate:
            self.user_properties.append(("cann_candidate", candidate))

    @property
    def timed(self) -> bool:
        return self.case_id > self.trials

    def make_source(self, st: CannBenchState) -> CaseSource:
        from pytest_cannbench.judge.kernelbench import ProblemCase

        return ProblemCase(problem=self.problem, case_id=self.case_id, settings=st.settings,
                           submission=st.submission_of(self.candidate), service=st.golden_service,
                           state_dir=st.kb_state_dir, candidate=self.candidate or "", memo=st.shared_reference)

    def recorded(self, result: CaseOutcome) -> None:
        cand, base, _ = times_of(result.timing)
        if cand and base:
            self.user_properties.append(("cann_kb_speedup", round(base / cand, 4)))
        self._kernel_coverage(result)

    def _kernel_coverage(self, result: CaseOutcome) -> None:
        """This item's kernel coverage and guard flags, trial or timed, as the judge measured them over its calls
        (``guard.coverage.Ledger`` of the worker that ran them)."""
        from pytest_cannbench.judge.source import case_log_path

        st = state.of(self.config)
        ledger = getattr(getattr(self.worker_for(st), "evidence", None), "ledger", None)
        entry = ledger.records.get(f"case:{case_log_path(self.log_dir_for(st), self.source.key)}") if ledger else None
        if entry:
            result.kernel_coverage = dict(entry["coverage"])
            result.flags = sorted({*result.flags, *(f"guard: {flag}" for flag in entry["flags"])})
            if result.kernel_coverage.get("share") is not None:
                self.user_properties.append(("cann_kb_coverage", result.kernel_coverage["share"]))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        what = "timed case" if self.timed else f"trial {self.case_id}"
        return self.path, 0, f"{self.problem.rel_path} {what}"


class ProblemFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        problem = problem_of(self.path)
        st = state.of(self.config)
        trials = st.settings.kb_trials
        # a multi-candidate run: each case once per candidate, candidates innermost (one golden serves them all)
        candidates: list[str | None] = [*st.candidate_names()] or [None]
        for case_id, candidate in ((c, n) for c in range(1, trials + 2) for n in candidates):
            label = "timed" if case_id > trials else f"trial{case_id}"
            suffix = f"[cand={candidate}]" if candidate else ""
            item = ProblemItem.from_parent(self, name=f"{problem.name}[{label}]{suffix}", problem=problem,
                                           case_id=case_id, trials=trials, candidate=candidate)
            if problem.level is not None:
                marker = f"level{problem.level}"
                if marker not in {line.split(":")[0].strip() for line in self.config.getini("markers")}:
                    self.config.addinivalue_line("markers", f"{marker}: benchmark level {problem.level}")
                item.add_marker(getattr(pytest.mark, marker))
            item.add_marker(pytest.mark.cannbench)
            item.extra_keyword_matches.add("kernelbench")
            yield item


def collect_file(file_path: Any, parent: pytest.Collector) -> ProblemFile | None:
    settings = state.of(parent.config).settings
    path = Path(file_path)
    if not is_problem(path, settings.bench):
        return None
    if settings.shard is not None:
        from pytest_cannbench.nodes.sharding import in_shard

        if not in_shard(problem_of(path).rel_path, *settings.shard):
            return None
    return ProblemFile.from_parent(parent, path=path)

"""KernelBench problems as pytest nodes: one File per problem file, ``--cann-kb-trials`` correctness items on
distinct seeds and one timed item (``19_ReLU.py::19_ReLU[trial1]`` ... ``19_ReLU.py::19_ReLU[timed]``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_cannbench.core import Judge, Route
from pytest_cannbench.judge.kernelbench import ProblemCase
from pytest_cannbench.kernelbench.spec import Problem, is_problem, problem_of
from pytest_cannbench.nodes.items import SourceItem
from pytest_cannbench.nodes.session import judge_of, settings_of
from pytest_cannbench.nodes.sharding import in_shard
from pytest_cannbench.vocab.casekey import CaseKey
from pytest_cannbench.vocab.records import times_of

if TYPE_CHECKING:
    from pytest_cannbench.outcome import CaseOutcome


class ProblemItem(SourceItem):
    """One correctness trial (``case_id`` 1..T) or the timed case (``case_id`` T+1) of a problem."""

    def __init__(
        self, *, problem: Problem, case_id: int, trials: int, candidate: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.problem, self.case_id, self.trials, self.candidate = problem, case_id, trials, candidate
        self.user_properties.append(("cann_case", str(CaseKey.case(problem.rel_path, case_id, candidate or ""))))
        if candidate:
            self.user_properties.append(("cann_candidate", candidate))

    @property
    def timed(self) -> bool:
        return self.case_id > self.trials

    def route(self, judge: Judge) -> Route:
        source = ProblemCase(
            problem=self.problem,
            case_id=self.case_id,
            settings=judge.settings,
            submission=judge.submission_of(self.candidate),
            service=judge.golden_service,
            state_dir=judge.kb_state_dir,
            candidate=self.candidate or "",
            memo=judge.shared_reference,
        )
        return Route(source=source, candidate=self.candidate, timed=self.timed, coverage=True)

    def recorded(self, result: CaseOutcome) -> None:
        cand, base, _ = times_of(result.timing)
        if cand and base:
            self.user_properties.append(("cann_kb_speedup", round(base / cand, 4)))
        if result.kernel_coverage.get("share") is not None:
            self.user_properties.append(("cann_kb_coverage", result.kernel_coverage["share"]))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        what = "timed case" if self.timed else f"trial {self.case_id}"
        return self.path, 0, f"{self.problem.rel_path} {what}"


class ProblemFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        problem = problem_of(self.path)
        trials = settings_of(self.config).kb_trials
        # a multi-candidate run: each case once per candidate, candidates innermost (one golden serves them all)
        candidates: list[str | None] = [*judge_of(self.config).setup.candidates] or [None]
        for case_id, candidate in ((c, n) for c in range(1, trials + 2) for n in candidates):
            label = "timed" if case_id > trials else f"trial{case_id}"
            suffix = f"[cand={candidate}]" if candidate else ""
            item = ProblemItem.from_parent(
                self,
                name=f"{problem.name}[{label}]{suffix}",
                problem=problem,
                case_id=case_id,
                trials=trials,
                candidate=candidate,
            )
            if problem.level is not None:
                marker = f"level{problem.level}"
                if marker not in {line.split(":")[0].strip() for line in self.config.getini("markers")}:
                    self.config.addinivalue_line("markers", f"{marker}: benchmark level {problem.level}")
                item.add_marker(getattr(pytest.mark, marker))
            item.add_marker(pytest.mark.cannbench)
            item.extra_keyword_matches.add("kernelbench")
            yield item


def collect_file(file_path: Any, parent: pytest.Collector) -> ProblemFile | None:
    settings = settings_of(parent.config)
    path = Path(file_path)
    if not is_problem(path, settings.bench):
        return None
    if settings.shard is not None:
        if not in_shard(problem_of(path).rel_path, *settings.shard):
            return None
    return ProblemFile.from_parent(parent, path=path)

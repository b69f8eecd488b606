"""A multi-rank (MC2) case as a pytest item: the life cycle of a case, with a worker per rank on each side.

Setup reserves the case's need for every rank from the memory plan (``taskformat.memory_need``), starts
``world_size`` golden workers and runs the distributed golden (``judge.multi_rank.prepare``); the call starts
``world_size`` candidate workers (``workers.ranks.RankGroup``), judges each rank and folds the verdicts
(``judge.multi_rank.correctness``), and, timed, runs the ranks' timed calls in lockstep (``judge.multi_rank.measure``).
Every rank worker lives for the case only: a group broken by one rank's failure never reaches the next case, and
the memory the plan gave the case is given back at teardown.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cannbench import outcome as oc
from pytest_cannbench.nodes.hidden import OperatorWithHidden
from pytest_cannbench.nodes.items import CaseFailed, CaseItem, GoldenSideError

if TYPE_CHECKING:
    from pytest_cannbench.judge.source import Reference
    from pytest_cannbench.state import CannBenchState
    from pytest_cannbench.taskformat.memory_need import MemoryNeed
    from pytest_cannbench.taskformat.spec import CaseSpec
    from pytest_cannbench.workers.ranks import GoldenRanks, RankGroup

GIB = 1 << 30
MIN_RANK_MEMORY = 1 << 30  # a rank worker's watchdog limit never below this (torch alone holds a quarter of it)


class MultiRankItem(CaseItem):
    """One multi-rank case (``case.world_size`` ranks)."""

    _goldens: GoldenRanks | None = None
    _groups: list[RankGroup]

    @property
    def world_size(self) -> int:
        return self.case.world_size or 1

    def memory_need(self) -> MemoryNeed | None:
        return self._need  # taskformat.memory_need.estimate counts every rank of a multi-rank case

    def admit(self, st: CannBenchState, alone: bool = False) -> str | None:
        from pytest_cannbench.nodes.memory import admit

        return admit(st, self.memory_need(), [], self._memory_hold, self.clock, alone=alone)

    def _scratch(self) -> Path:
        from pytest_cannbench.scratch import make_dir

        return make_dir("ranks")

    def _golden(self, st: CannBenchState) -> Reference:
        from pytest_cannbench.judge.multi_rank import prepare
        from pytest_cannbench.workers.ranks import GoldenRanks

        plan = st.memory_plan()
        per_rank = max(plan.golden // self.world_size + 2 * GIB, 3 * GIB)  # RLIMIT_AS counts torch's mappings
        self._goldens = GoldenRanks(self.world_size, st.log_dir, self._scratch(), per_rank, st.worker_id)
        with st.fence().shared(self.spans):
            return prepare(self.task, self.case, st.settings, self._goldens)

    def _group(self, st: CannBenchState, role: str) -> RankGroup:
        """The case's rank workers of ``role`` (``candidate``: the submission, or the golden in a self-check;
        ``baseline``: the distributed golden, timed), started together."""
        from pytest_cannbench.workers.ranks import RankGroup

        plan, s = st.memory_plan(), st.settings
        memory = max(plan.candidate // self.world_size, MIN_RANK_MEMORY)

        def template(rank: int) -> Any:
            if role == "candidate" and self.candidate is not None:  # a multi-candidate run: this candidate's install
                mode = "golden" if s.self_check else "submission"
                worker = st._new_worker("candidate", mode, st.submission_of(self.candidate), guard_role="candidate")
            else:
                worker = st.worker_apart(role, st.log_dir)
            name = role if self.candidate is None else f"{role}-{self.candidate}"
            worker.log_path = st.log_dir / f"{name}-rank{rank}-worker-{st.worker_id}.log"
            worker.memory_bytes = memory
            return worker

        # the submission's ranks share a network namespace of their own (trusted goldens use the host's loopback)
        group = RankGroup.make(template, self.world_size, s.case_timeout_s, self._scratch(), st.log_dir,
                               private_network=role == "candidate" and not s.self_check)
        self._groups = [*getattr(self, "_groups", []), group]
        return group

    def runtest(self) -> None:
        from pytest_cannbench.judge.multi_rank import MultiRankReference, correctness, fold, measure, payload
        from pytest_cannbench.judge.source import fate
        from pytest_cannbench.timing.stats import not_measured

        st = self._runnable()
        settings = st.settings
        ref = self.reference
        assert isinstance(ref, MultiRankReference)
        with self.clock.phase("candidate"):
            group = self._group(st, "candidate")
            started = group.start(settings.case_timeout_s)
            if any(a.result.status != "ok" for a in started):
                ends = [(a.rank, *fate(a.result.status), a.result.message) for a in started
                        if a.result.status != "ok" and not a.stopped]
                result = fold(self.task, self.case, ends, self.world_size)
                result.message = f"the rank workers did not start: {result.message}"
            else:
                with st.fence().shared(self.spans):
                    result = correctness(self.task, self.case, settings, ref, group,
                                         payload(self.task, self.case, settings), st.log_dir)
        if result.status == oc.PASSED and settings.perf:
            assert self._goldens is not None
            with self.clock.phase("timing"):
                baseline = self._group(st, "baseline")
                baseline.start(settings.case_timeout_s)
                timing, failure = measure(self.task, self.case, settings, ref, group, baseline, self._goldens,
                                          st.log_dir, st.perf_context().judge_flush())
            if failure is not None:
                failure.accuracy = result.accuracy
                failure.warnings = result.warnings
                result = failure
            result.timing = timing
        else:
            result.timing = not_measured("--cann-no-perf" if not settings.perf else f"the case {result.status}")
        result.seconds = dict(self.clock.seconds)
        self._record(result)
        self.recorded(result)
        if result.status in (oc.ERROR,):
            raise GoldenSideError(f"{result.failure_type}: {result.message}")
        if result.status != oc.PASSED:
            raise CaseFailed(f"{result.failure_type}: {result.message}")

    def teardown(self) -> None:
        for group in getattr(self, "_groups", []):
            group.close()
        self._groups = []
        if self._goldens is not None:
            self._goldens.close()
            self._goldens = None
        super().teardown()


class OperatorWithRanks(OperatorWithHidden):
    """An operator's ``cases.yaml`` whose multi-rank cases are :class:`MultiRankItem`s."""

    def item_class(self, case: CaseSpec) -> type[CaseItem]:
        return MultiRankItem if case.world_size is not None else CaseItem

"""A multi-rank (MC2) case on a judge: the life of a case, with a worker per rank on each side.

Admission reserves the case's need for every rank from the memory plan (``taskformat.memory_need`` counts every
rank), the golden starts ``world_size`` golden workers and runs the distributed golden
(``judge.multi_rank.prepare``); the run starts ``world_size`` candidate workers (``workers.ranks.RankGroup``),
judges each rank and folds the verdicts (``judge.multi_rank.correctness``), and, timed, runs the ranks' timed
calls in lockstep (``judge.multi_rank.measure``). Every rank worker lives for the case only: a group broken by one
rank's failure never reaches the next case, and the memory the plan gave the case is given back at teardown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_cannbench import outcome as oc
from pytest_cannbench.core.case_run import CaseRun
from pytest_cannbench.judge.multi_rank import MultiRankReference, correctness, fold, measure, payload, prepare
from pytest_cannbench.judge.source import fate
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.scratch import make_dir
from pytest_cannbench.timing.stats import not_measured
from pytest_cannbench.workers.ranks import GoldenRanks, RankGroup

if TYPE_CHECKING:
    from pytest_cannbench.judge.source import Reference
    from pytest_cannbench.taskformat.spec import CaseSpec, OperatorTask
    from pytest_cannbench.workers.candidate_client import CandidateWorker
    from pytest_cannbench.workers.ranks import GoldenRanks, RankGroup

GIB = 1 << 30
MIN_RANK_MEMORY = 1 << 30  # a rank worker's watchdog limit never below this (torch alone holds a quarter of it)


class MultiRankRun(CaseRun):
    """One multi-rank case (``case.world_size`` ranks) of ``task``."""

    _goldens: GoldenRanks | None = None

    def __init__(self, *args: Any, task: OperatorTask, case: CaseSpec, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.task, self.case = task, case
        self._groups: list[RankGroup] = []

    @property
    def world_size(self) -> int:
        return self.case.world_size or 1

    def admission_workers(self) -> list[CandidateWorker]:
        return []  # every rank worker is started for the case, with the budgets the plan gives it then

    def golden(self) -> Reference:
        judge = self.judge
        per_rank = max(judge.memory_plan.golden // self.world_size + 2 * GIB, 3 * GIB)  # RLIMIT_AS counts mappings
        self._goldens = GoldenRanks(self.world_size, judge.log_dir, make_dir("ranks"), per_rank, judge.worker_id)
        with judge.fence().shared(self.spans):
            return prepare(self.task, self.case, judge.settings, self._goldens)

    def _group(self, role: str) -> RankGroup:
        """The case's rank workers of ``role`` (``candidate``: the submission, or the golden in a self-check;
        ``baseline``: the distributed golden, timed), started together."""
        judge, s, candidate = self.judge, self.judge.settings, self.route.candidate
        memory = max(judge.memory_plan.candidate // self.world_size, MIN_RANK_MEMORY)

        def template(rank: int) -> Any:
            if role == "candidate":
                worker = judge.new_worker(
                    "candidate", "submission", judge.submission_of(candidate), guard_role="candidate"
                )
            else:
                worker = judge.new_worker("baseline", "golden", None, guard_role="baseline")
            name = role if candidate is None else f"{role}-{candidate}"
            worker.log_path = judge.log_dir / f"{name}-rank{rank}-worker-{judge.worker_id}.log"
            worker.memory_bytes = memory
            return worker

        # the submission's ranks share a network namespace of their own (trusted goldens use the host's loopback)
        group = RankGroup.make(
            template,
            self.world_size,
            s.case_timeout_s,
            make_dir("ranks"),
            judge.log_dir,
            private_network=role == "candidate" and not s.self_check,
        )
        self._groups.append(group)
        return group

    def run(self) -> CaseOutcome:
        self.usable()
        judge, settings = self.judge, self.judge.settings
        ref = self.reference
        assert isinstance(ref, MultiRankReference)
        with self.clock.phase("candidate"):
            group = self._group("candidate")
            started = group.start(settings.case_timeout_s)
            if any(a.result.status != "ok" for a in started):
                ends = [
                    (a.rank, *fate(a.result.status), a.result.message)
                    for a in started
                    if a.result.status != "ok" and not a.stopped
                ]
                result = fold(self.task, self.case, ends, self.world_size)
                result.message = f"the rank workers did not start: {result.message}"
            else:
                with judge.fence().shared(self.spans):
                    result = correctness(
                        self.task,
                        self.case,
                        settings,
                        ref,
                        group,
                        payload(self.task, self.case, settings),
                        judge.log_dir,
                    )
        if result.status == oc.PASSED and settings.perf:
            assert self._goldens is not None
            with self.clock.phase("timing"):
                baseline = self._group("baseline")
                baseline.start(settings.case_timeout_s)
                timing, failure = measure(
                    self.task,
                    self.case,
                    settings,
                    ref,
                    group,
                    baseline,
                    self._goldens,
                    judge.log_dir,
                    judge.perf_context().judge_flush(),
                )
            if failure is not None:
                failure.accuracy = result.accuracy
                failure.warnings = result.warnings
                result = failure
            result.timing = timing
        else:
            result.timing = not_measured("--cann-no-perf" if not settings.perf else f"the case {result.status}")
        result.seconds = dict(self.clock.seconds)
        return self.finish(result)

    def teardown(self) -> None:
        for group in self._groups:
            group.close()
        self._groups = []
        if self._goldens is not None:
            self._goldens.close()
            self._goldens = None
        super().teardown()

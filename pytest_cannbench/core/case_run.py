"""One case's whole life on a judge: resume and usability checks, admission to the memory plan, the golden, the
candidate and its second pass, the timing, and the record.

A front-end calls :meth:`CaseRun.setup`, :meth:`CaseRun.run` and :meth:`CaseRun.teardown` (pytest's three
phases; the grader calls them in a row). A case that ends before or instead of a verdict raises
:class:`CaseStopped` after recording its outcome; the front-end turns that into its own vocabulary (a pytest skip,
a one-line failure). An interruption from outside (pytest-timeout) is the front-end's to catch: it calls
:meth:`CaseRun.interrupted` so the case still counts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cannbench import outcome as oc
from pytest_cannbench.core import memory
from pytest_cannbench.core.judge import Judge
from pytest_cannbench.judge.goldens import GoldenFailure
from pytest_cannbench.judge.perf import measure
from pytest_cannbench.judge.source import SkipCase, case_log_path, run_candidate, second_pass
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.phases import PhaseClock
from pytest_cannbench.timing.stats import not_measured

if TYPE_CHECKING:
    from pytest_cannbench.judge.perf import PerfContext
    from pytest_cannbench.judge.source import CaseSource, Reference
    from pytest_cannbench.taskformat.memory_need import MemoryNeed
    from pytest_cannbench.workers.candidate_client import CandidateWorker

NO_CANDIDATE = "no candidate to grade: pass --cann-source DIR, or --cann-source @golden to grade the goldens"
RESUMED = "already recorded in results.jsonl by an identical run (--cann-resume)"


class CaseStopped(Exception):
    """The case ended before or instead of a passing verdict. ``kind``: ``skip`` (not graded), ``fail`` (the
    candidate's verdict), ``error`` (the judge's side: golden or harness), ``task`` (the task's files)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Route:
    """What a case is: its source, the candidate it grades, its memory estimate, whether it is timed."""

    source: CaseSource[Any]
    candidate: str | None = None  # a candidate of several (None: the run's one submission)
    need: MemoryNeed | None = None  # the estimate of its memory (None: no estimate for this source)
    timed: bool = True  # KernelBench trials are accuracy only; the timed case is timed
    coverage: bool = False  # read the worker's kernel coverage of the case's calls into the outcome


class CaseRun:
    """One case on one judge (``judge``: where its workers live and log; a hidden case's is an apart judge)."""

    def __init__(self, judge: Judge, route: Route, seal: Callable[[CaseOutcome], CaseOutcome] | None = None) -> None:
        self.judge = judge
        self.route = route
        self.source = route.source
        self.seal = seal  # what of an outcome may leave the judge (the hidden split's)
        self.outcome: CaseOutcome | None = None
        self.reference: Reference | None = None
        self.build_failed: str | None = None  # this case's own module did not compile at build time
        self.spans: list[list[float]] = []  # monotonic spans of the case's fenced accuracy work
        self.clock = PhaseClock()
        self.golden_alone: str | None = None  # why its golden ran again alone, a warning on its outcome
        self._hold = contextlib.ExitStack()  # its place in the memory plan, admission to teardown

    # ------------------------------------------------------------ where it runs

    def worker(self) -> CandidateWorker:
        return self.judge.worker(self.source.worker_role, self.route.candidate)

    def perf(self) -> PerfContext:
        return self.judge.perf_context()

    @property
    def log_dir(self) -> Path:
        return self.judge.log_dir

    # ------------------------------------------------------------ the record

    def record(self, result: CaseOutcome) -> CaseOutcome:
        self.outcome = self.seal(result) if self.seal is not None else result
        return self.outcome

    def stop(
        self, kind: str, status: oc.Status, failure_type: oc.FailureType | None, message: str, said: str = ""
    ) -> CaseStopped:
        """Record the outcome and return the exception that says so (``said``: the line, if not the message)."""
        self.record(self.source.outcome(status, failure_type, message))
        return CaseStopped(kind, said or message)

    def interrupted(self, where: str, message: str) -> None:
        """An interruption from outside the case (pytest-timeout) ended it: it counts as a timeout."""
        self.record(self.source.outcome(oc.TIMEOUT, oc.PYTEST_TIMEOUT, f"{where}: {message}" if where else message))

    # ------------------------------------------------------------ phases

    def setup(self) -> None:
        """Everything before the candidate's call: usability, admission, the golden."""
        judge, source = self.judge, self.source
        submission = judge.submission_of(self.route.candidate)
        if judge.resumed(source.key):
            raise CaseStopped("skip", RESUMED)
        if source.task_error:
            return
        if not judge.settings.self_check and submission is None:
            raise self.stop("skip", oc.SKIPPED, oc.NO_CANDIDATE, NO_CANDIDATE)
        if submission is not None:
            if not submission.ok:
                return  # run() fails the case with the submission's status; no golden is needed
            message = source.missing(submission)
            if message is not None:
                raise self.stop("skip", oc.MISSING, oc.NOT_PROVIDED, message)
            own_build = getattr(source, "build_failure", None)  # sources with per-module builds
            self.build_failed = own_build(submission) if own_build is not None else None
            if self.build_failed:
                return  # run() fails the case as compile_failed; no golden is needed
        too_large = self.admit()
        if too_large is not None:  # never started, so never an OOM; not the candidate's fault
            raise self.stop("skip", oc.TOO_LARGE, oc.FailureType.TOO_LARGE, too_large, f"{oc.TOO_LARGE}: {too_large}")
        try:
            self.reference = self.golden()
            self.clock.merge(self.reference.seconds)
            self.phase("candidate")
        except SkipCase as exc:  # needs_npu is a status of its own; too_large stays a skip
            status = oc.NEEDS_NPU if exc.failure_type == oc.FailureType.NEEDS_NPU else oc.SKIPPED
            raise self.stop("skip", status, exc.failure_type, str(exc)) from None
        except GoldenFailure as exc:
            raise self.stop("error", oc.ERROR, oc.GOLDEN_ERROR, str(exc), f"golden_error: {exc}") from None

    def usable(self) -> None:
        """The case's task and submission are usable, else it is recorded as what stopped it."""
        source = self.source
        if source.task_error:
            raise self.stop("task", oc.ERROR, oc.TASK_ERROR, source.task_error, f"task_error: {source.task_error}")
        submission = self.judge.submission_of(self.route.candidate)
        if submission is not None and not submission.ok:
            raise self.stop(
                "fail",
                oc.Status(submission.status),
                oc.FailureType(submission.status),
                submission.message,
                f"{submission.status}: {submission.message}",
            )
        if self.build_failed:
            raise self.stop(
                "fail",
                oc.COMPILE_FAILED,
                oc.FailureType.COMPILE_FAILED,
                self.build_failed,
                f"{oc.COMPILE_FAILED}: {self.build_failed}",
            )

    def run(self) -> CaseOutcome:
        """The candidate, judged, then timed once it passes; the final outcome (a failure raises
        :class:`CaseStopped` after it is recorded)."""
        self.usable()
        judge, source, settings = self.judge, self.source, self.judge.settings
        ref = self.reference
        assert ref is not None
        worker = self.worker()
        with judge.fence().shared(self.spans):  # the candidate's calls and their verdicts
            result, candidate_s = self.correctness(ref, worker)
        if result.status == oc.PASSED and settings.perf and self.route.timed:
            from pytest_cannbench.judge.precision import decided_without_native  # brings torch

            self.phase("peak")  # the timed sets' references are goldens too
            with self.clock.phase("timing"):
                timing, failure = measure(
                    source, ref, worker, self.perf(), self.clock, lean=decided_without_native(result.accuracy)
                )
            if failure is not None:
                failure.accuracy = result.accuracy
                result = failure
            result.timing = timing
        else:
            result.timing = not_measured(
                "--cann-no-perf"
                if not settings.perf
                else "not the timed item"
                if not self.route.timed
                else f"the case {result.status}"
            )
        if judge.fence().active and result.timing:  # for the reports' account of isolation (never scored)
            result.timing["accuracy_spans"] = [*self.spans, *result.timing.get("accuracy_spans", [])]
        result.golden_cached = ref.cached
        if self.golden_alone:
            result.warnings.append(self.golden_alone)
        result.seconds = dict(self.clock.seconds, candidate=candidate_s)
        return self.finish(result)

    def finish(self, result: CaseOutcome) -> CaseOutcome:
        """Record the final outcome; a failure raises :class:`CaseStopped`."""
        if self.route.coverage:
            self._kernel_coverage(result)
        final = self.record(result)
        if result.status == oc.ERROR:
            raise CaseStopped("error", f"{result.failure_type}: {result.message}")
        if result.status != oc.PASSED:
            raise CaseStopped("fail", f"{result.failure_type}: {result.message}")
        return final

    def teardown(self) -> None:
        self.reference = None  # outputs can be large; do not keep them past the case
        self.judge.release_regions()  # nor the regions' pages, grown to the largest case so far
        self._hold.close()  # its share of the memory pool, any raised budgets

    # ------------------------------------------------------------ the parts

    def admission_workers(self) -> list[CandidateWorker]:
        """The candidate-side workers whose limits are raised when the case runs alone."""
        timed = self.judge.settings.perf and self.route.timed
        return [self.worker()] + ([self.judge.worker("baseline")] if timed else [])

    def admit(self, alone: bool = False) -> str | None:
        """Through the run's memory plan: why the case is too large, or None once it holds its place (released
        at teardown); ``alone``: run it alone whatever its estimate."""
        return memory.admit(self.judge, self.route.need, self.admission_workers(), self._hold, self.clock, alone=alone)

    def phase(self, phase: str) -> None:
        """Hold what the case's next phase needs of its memory pool reservation (:func:`memory.hold_phase`)."""
        memory.hold_phase(self.judge, self.route.need, phase, self.clock)

    def golden(self) -> Reference:
        """The case's reference. A golden that runs out of its slot's memory (its working memory is more than
        the estimate from the case's tensors) runs once more alone, with the whole run's memory, when that is
        more; the case's warnings say so."""
        judge = self.judge
        try:
            with judge.fence().shared(self.spans):  # accuracy work, held off while another judge times
                return self.source.prepare()
        except GoldenFailure as exc:
            if not exc.oom or memory.runs_alone(judge, self.route.need) or not memory.more_alone(judge):
                raise
            first = str(exc).splitlines()[0]
        self._hold.close()  # its share of the memory pool, for the whole pool
        self._hold = contextlib.ExitStack()
        too_large = self.admit(alone=True)
        if too_large is not None:
            raise GoldenFailure(f"{first}; not run again alone: {too_large}", oom=True)
        whole = judge.memory_plan.golden_whole / (1 << 30)
        try:
            with judge.fence().shared(self.spans):
                ref = self.source.prepare()
        except GoldenFailure as exc:
            raise GoldenFailure(f"{exc} (also alone, with {whole:.1f} GiB of address space)", oom=exc.oom) from None
        self.golden_alone = (
            f"the golden ran out of its slot's memory ({first}); it ran again alone, with "
            f"{whole:.1f} GiB of address space"
        )
        return ref

    def correctness(self, ref: Reference, worker: CandidateWorker) -> tuple[CaseOutcome, float]:
        """The candidate on the case's inputs, judged; once it passes, once more on new inputs (where the
        source has a second pass). Returns the verdict and the first call's seconds."""
        from pytest_cannbench.judge.precision import decided_without_native  # brings torch

        source, timeout_s, log_dir = self.source, self.judge.settings.case_timeout_s, self.log_dir
        answer = run_candidate(source, ref, worker, timeout_s, log_dir, self.clock)
        if answer.failure is not None:
            result = answer.failure
        else:
            with self.clock.phase("compare"):
                result = source.judge(answer.outputs or [], ref)
        result.warnings += [f"guard (warn mode): {flag}" for flag in answer.flags]
        if result.status == oc.PASSED:
            self.judge.fence().let_windows_pass()  # another judge's window, waiting, goes before the second pass
            like = ref if decided_without_native(result.accuracy) else None  # its native runs where needed
            self.phase("golden_kept")  # the first reference stays with the judge
            again = second_pass(
                source,
                worker,
                timeout_s,
                log_dir,
                self.clock,
                like=like,
                after_golden=lambda: self.phase("candidate_kept"),
            )
            if again is not None:
                again.accuracy = again.accuracy or result.accuracy
                result = again
        return result, answer.seconds or 0.0

    def _kernel_coverage(self, result: CaseOutcome) -> None:
        """The case's kernel coverage and guard flags as the judge measured them over its calls (the ledger of
        the worker that ran them)."""
        ledger = getattr(getattr(self.worker(), "evidence", None), "ledger", None)
        entry = ledger.records.get(f"case:{case_log_path(self.log_dir, self.source.key)}") if ledger else None
        if entry:
            result.kernel_coverage = dict(entry["coverage"])
            result.flags = sorted({*result.flags, *(f"guard: {flag}" for flag in entry["flags"])})

    def grade(self) -> CaseOutcome:
        """The three phases in a row: the case's outcome, whatever stopped it (a plain-Python front-end's call)."""
        try:
            self.setup()
            return self.run()
        except CaseStopped as stopped:
            if self.outcome is None:  # resumed: nothing new recorded
                return self.source.outcome(oc.SKIPPED, None, str(stopped))
            return self.outcome
        finally:
            self.teardown()

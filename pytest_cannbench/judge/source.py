"""What one case of any task format gives the judge (:class:`CaseSource`), and the steps shared by all formats.

A CANN operator case (:mod:`judge.case`) and a KernelBench problem (:mod:`judge.kernelbench`) both feed the
same item life cycle (:mod:`nodes.items`) and the same timing loop (:mod:`judge.perf`): they differ only in
how reference data is made, which target the candidate worker builds, and how a set of outputs is judged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pytest_cannbench import outcome as oc
from pytest_cannbench.judge.goldens import GoldenFailure
from pytest_cannbench.outcome import CaseOutcome, FailureType, Status
from pytest_cannbench.phases import PhaseClock, measured
from pytest_cannbench.workers.batch import WorkerStatus

if TYPE_CHECKING:
    from pytest_cannbench.submission.build import SubmissionState
    from pytest_cannbench.workers.candidate_client import CandidateWorker

Anchors = Callable[..., dict[str, Any]]  # timing.anchors: (task, case, data) -> t_hw_us, sources, bytes, flops


class Reference(Protocol):
    """The trusted side's data of one input set: what the candidate is called with, and what it is judged on."""

    cached: bool  # from the golden cache (no worker round trip)
    seconds: dict[str, float]  # what making it cost, by phase

    def kwargs(self) -> dict[str, Any]: ...

    def out_bytes(self) -> int: ...


@dataclass(frozen=True)
class Baseline:
    """One live baseline the timing loop runs beside the candidate (in the baseline worker)."""

    name: str  # the first one gives t_baseline_us; another one ``n`` gives ``t_<n>_us`` and ``<n>_baseline``
    label: str  # how a note names it: "the <label> failed: ..."
    target: dict[str, Any]


class SkipCase(Exception):
    """The reference side declines the case (it is skipped, not graded); ``failure_type`` says why."""

    def __init__(self, failure_type: FailureType, message: str) -> None:
        super().__init__(message)
        self.failure_type = failure_type


R = TypeVar("R", bound=Reference)  # the reference data of one task format (GoldenData, ProblemReference)


class CaseSource(Protocol[R]):
    """One case of a task source, as the item life cycle, the judge and the timing loop see it.

    Generic in its format's :class:`Reference`: the methods taking a reference are only ever given what
    this source's own :meth:`prepare` made."""

    golden_noun: str  # how messages name the trusted side: "golden" or "reference"
    worker_role: str  # which candidate worker runs it (state.WORKER_ROLES)

    @property
    def key(self) -> str:
        """The result key, e.g. level1/exp_3 or level1/19_ReLU.py_1."""

    @property
    def rel_path(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def task_error(self) -> str | None:
        """The case itself is broken (a task_error, not the candidate's)."""

    def outcome(self, status: Status, failure_type: FailureType | None = None, message: str = "") -> CaseOutcome: ...

    def missing(self, submission: SubmissionState) -> str | None:
        """Why the submission does not provide this case (None: it does)."""

    def prepare(self, seed: int | None = None, like: R | None = None) -> R:
        """Reference data for the case's own seed (or ``seed``); raises GoldenFailure or SkipCase. ``like``: the
        case's reference on another input set, which the format may use to defer work only some verdicts need
        (a CANN operator's native reference); :meth:`judge` then completes it where it must."""

    def check_seed(self) -> int | None:
        """The seed of a second correctness pass on new inputs (None: the format has none)."""

    def timed_seed(self, index: int) -> int: ...

    def candidate_target(self, ref: R) -> dict[str, Any]: ...

    def baselines(self, ref: R) -> list[Baseline]: ...

    def judge(self, outputs: list[Any], ref: R, *, stats: bool = True) -> CaseOutcome:
        """The accuracy verdict on one set of candidate outputs for ``ref``'s input set; ``stats=False`` when
        only the verdict is read (a timed output): the figures may then be left out, never the verdict. Raises
        GoldenFailure when completing a reference prepared ``like`` another fails."""

    def anchors(self, ref: R, live: Anchors) -> dict[str, Any]:
        """Hardware and metadata anchors of the timing record (empty: none)."""


W = WorkerStatus
CANDIDATE_FATES: dict[WorkerStatus, tuple[Status, FailureType]] = {  # a call's end -> (case status, failure type)
    W.RAISED: (oc.FAILED, oc.STRUCTURAL),
    W.CRASHED: (oc.CRASHED, oc.CANDIDATE_CRASH),
    W.TIMEOUT: (oc.TIMEOUT, oc.CANDIDATE_TIMEOUT),
    W.OOM_KILLED: (oc.OOM_KILLED, oc.OUT_OF_MEMORY),
    W.IMPORT_FAILED: (oc.IMPORT_FAILED, FailureType.IMPORT_FAILED),
    W.INPUT_MUTATED: (oc.FAILED, oc.INPUT_MUTATED),
    W.ASYNC_ESCAPE: (oc.FAILED, oc.ASYNC_ESCAPE),
    **{W(kind): (oc.FAILED, kind) for kind in oc.GUARD_FAILURES},
}


def fate(worker_status: str) -> tuple[Status, FailureType]:
    """The case status and failure type of a candidate-worker result that is not an answer (anything unknown is a
    crash)."""
    return CANDIDATE_FATES.get(worker_status, (oc.CRASHED, oc.CANDIDATE_CRASH))  # type: ignore[call-overload]


def case_log_path(log_dir: Path, key: str) -> Path:
    return log_dir / "cases" / f"{key.replace('..', '_')}.log"


def is_structural(failure_type: str | None) -> bool:
    """A per-output verdict that failed on shape, dtype or type (either spelling of the vocabulary)."""
    return failure_type in (oc.STRUCTURAL, "structural")


@dataclass
class CandidateAnswer:
    outputs: list[Any] | None  # views of the worker's shared memory, valid until its next call
    failure: CaseOutcome | None  # set when there is nothing to judge (raised, crashed, timed out...)
    seconds: float | None
    flags: list[str] = field(default_factory=list)  # guard findings in warn mode


def run_candidate(source: CaseSource[R], ref: R, worker: CandidateWorker, timeout_s: float,
                  log_dir: Path, clock: PhaseClock | None = None) -> CandidateAnswer:
    """One call of the candidate in its worker; any misbehaviour becomes a failure outcome."""
    clock = measured(clock)
    with clock.phase("inputs_judge"):  # the judge's own copy of the inputs (generated on first use)
        kwargs = ref.kwargs()
    result = worker.call(source.candidate_target(ref), kwargs, expected_out_bytes=ref.out_bytes(),
                         timeout=timeout_s, case_log=case_log_path(log_dir, source.key))
    clock.merge(result.phases)
    if result.status == "ok":
        return CandidateAnswer(outputs=result.outputs, failure=None, seconds=result.seconds, flags=result.flags)
    status, failure_type = fate(result.status)
    message = result.message
    if result.log_tail:
        message += f"\n--- end of its output ({result.case_log or worker.log_path}):\n{result.log_tail}"
    return CandidateAnswer(outputs=None, failure=source.outcome(status, failure_type, message),
                           seconds=result.seconds)


def second_pass(source: CaseSource[Any], worker: CandidateWorker, timeout_s: float,
                log_dir: Path, clock: PhaseClock | None = None, like: Any = None,
                after_golden: Callable[[], None] | None = None) -> CaseOutcome | None:
    """The candidate once more on inputs no call has seen (their own seed): a verdict that held on one input
    set must hold on another. Returns the failure, or None when it passed too (or the format has no such pass).
    ``like``: the first check's reference (see :meth:`CaseSource.prepare`); ``after_golden``: called once the
    reference is made, before the candidate (the memory pool's phase)."""
    seed = source.check_seed()
    if seed is None:
        return None
    clock = measured(clock)
    try:
        ref = source.prepare(seed, like=like)
    except GoldenFailure as exc:
        return source.outcome(oc.ERROR, oc.GOLDEN_ERROR, f"second correctness pass: {exc}")
    clock.merge(ref.seconds)
    if after_golden is not None:
        after_golden()
    answer = run_candidate(source, ref, worker, timeout_s, log_dir, clock)
    if answer.failure is not None:
        verdict = answer.failure
    else:
        try:
            with clock.phase("compare"):
                verdict = source.judge(answer.outputs or [], ref, stats=False)  # a pass keeps only its status
        except GoldenFailure as exc:
            return source.outcome(oc.ERROR, oc.GOLDEN_ERROR, f"second correctness pass: {exc}")
    if verdict.status == oc.PASSED:
        return None
    verdict.message = f"second correctness pass (new inputs): {verdict.message}"
    return verdict

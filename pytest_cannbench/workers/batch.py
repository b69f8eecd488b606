"""The judge's records of a timing batch: one in progress (:class:`StreamedBatch`, streamed one set at a time by
:meth:`~pytest_cannbench.workers.candidate_client.CandidateWorker.open_batch` and ``run_call``) and its result
(:class:`BatchResult`), apart from the worker handle so that the timing loop can name them without it; and the
words a candidate worker's call or batch ends in (:class:`WorkerStatus`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench import outcome as oc
from pytest_cannbench.vocab.registry import Word
from pytest_cannbench.workers.contract import Snapshot
from pytest_cannbench.workers.cpu_meter import Reading
from pytest_cannbench.workers.tensor_wire import BatchLayout


class WorkerStatus(Word):
    """How a call (or a timing batch) in a candidate worker ended, as the judge saw it. The guard's findings are
    statuses of their own, named like their failure types (outcome.GUARD_FAILURES); the most serious decides when
    a call has several (guard.policy). judge.source.CANDIDATE_FATES turns each into a case status."""

    OK = "ok"
    RAISED = "raised"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    OOM_KILLED = "oom_killed"
    IMPORT_FAILED = "import_failed"
    INPUT_MUTATED = "input_mutated"
    ASYNC_ESCAPE = "async_escape"
    FORBIDDEN_ACCESS = oc.FORBIDDEN_ACCESS.value
    API_TAMPERED = oc.API_TAMPERED.value
    GUARD_BLINDED = oc.GUARD_BLINDED.value
    BUILTIN_COMPUTE = oc.BUILTIN_COMPUTE.value
    NO_CUSTOM_KERNEL = oc.NO_CUSTOM_KERNEL.value
    LOW_KERNEL_COVERAGE = oc.LOW_KERNEL_COVERAGE.value
    HOST_LIBRARY = oc.HOST_LIBRARY.value


@dataclass
class BatchResult:
    """A timing batch as the judge sees it: per-call times and outputs, and what it observed itself."""

    status: WorkerStatus
    seconds: list[float] = field(default_factory=list)  # per timed call, as the worker reports them
    outputs: list[list[Any]] = field(default_factory=list)  # per timed call: views of the region until the next request
    phases: dict[str, float] = field(default_factory=dict)  # the worker's account of its time
    wall_s: float = 0.0  # the judge's own clock around the whole exchange
    cpu_s: float | None = None  # CPU time the worker used during the exchange, all threads (workers.cpu_meter)
    busiest_cpu_s: float | None = None  # the same, of its busiest living thread alone (from /proc)
    held_s: float = 0.0  # streamed: the judge's own clock from each "ready" it received to the "go" it sent
    timer: str = ""
    notes: list[str] = field(default_factory=list)
    message: str = ""
    log_tail: str = ""
    case_log: str | None = None
    flags: list[str] = field(default_factory=list)


@dataclass
class StreamedBatch:
    """A timing batch in progress (:meth:`CandidateWorker.open_batch`): the worker waits, frozen, for call
    ``next``, whose set is not in the region yet; ``result`` once it ended."""

    layout: BatchLayout
    kwargs_sets: list[dict[str, Any]]
    call_sets: list[int]
    case_log: Path | None
    deadline: float  # time.perf_counter() by which the whole batch must be over
    timeout: float
    before: Snapshot = (0, frozenset())
    cpu0: Reading = field(default_factory=lambda: Reading(None))
    t0: float = 0.0
    written: set[int] = field(default_factory=set)  # sets already in the region
    next: int = 0
    result: BatchResult | None = None
    keys: tuple[str, ...] = ()  # the case and operator the judge's CPU samples are merged under
    calls: int = 0  # warm-up and timed calls the worker makes in the batch
    ready_at: float | None = None  # the judge's clock when the last "ready" arrived (the worker waits from then)
    held: float = 0.0  # summed from ready_at to each "go": inside the worker's wait, by the judge's clock
    deferred: bool = False  # its final reply is judged by ``CandidateWorker.conclude``, after the window
    ended: tuple[dict[str, Any], float, float | None, float | None] | None = None  # (reply, wall, cpu, busiest)

    @property
    def waiting(self) -> bool:
        return self.result is None and self.ended is None

    @property
    def claims_ok(self) -> bool:
        """Judged ok, or ended with the worker's own claim of success (judged after the window)."""
        if self.result is not None:
            return self.result.status == "ok"
        return self.ended is not None and bool(self.ended[0].get("ok"))

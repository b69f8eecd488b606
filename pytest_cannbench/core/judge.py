"""One judge: the processes and shared state where cases run (a pytest process, an xdist worker, a service actor).

A judge is given a :class:`JudgeSetup` (what its controller decided) and makes its services on first use: the
golden worker, the candidate workers (one per role and candidate), the device plan, the timing context, the
memory pool and the fence. It never builds anything and never decides anything a run decides once.
"""

from __future__ import annotations

import shutil
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_cannbench.guard.policy import coverage_floor, mode_for
from pytest_cannbench.guard.sandbox import SandboxChoice, user_python_path
from pytest_cannbench.judge.goldens import make_service
from pytest_cannbench.judge.perf import PerfContext
from pytest_cannbench.options import Settings
from pytest_cannbench.scratch import cache_dir, make_dir
from pytest_cannbench.submission.build import SubmissionState, discover
from pytest_cannbench.timing.anchors import make_anchor_source
from pytest_cannbench.timing.devices import plan as make_plan
from pytest_cannbench.timing.gpu_telemetry import Telemetry
from pytest_cannbench.timing.isolation import Fence
from pytest_cannbench.timing.npu_parse import pick_secret_shape
from pytest_cannbench.workers.candidate_client import CandidateWorker
from pytest_cannbench.workers.cpu_watch import for_judge
from pytest_cannbench.workers.huge_pages import untimed_worker_env
from pytest_cannbench.workers.limits import cpu_threads, timing_threads
from pytest_cannbench.workers.memory_plan import MemoryPlan
from pytest_cannbench.workers.memory_pool import MemoryPool
from pytest_cannbench.workers.triton_helper import uses_triton

if TYPE_CHECKING:
    from pytest_cannbench.guard.sandbox import SandboxChoice
    from pytest_cannbench.judge.goldens import GoldenService
    from pytest_cannbench.judge.perf import PerfContext
    from pytest_cannbench.timing.devices import DevicePlan
    from pytest_cannbench.timing.isolation import Fence
    from pytest_cannbench.workers.candidate_client import CandidateWorker
    from pytest_cannbench.workers.memory_pool import MemoryPool, PoolSize

T = TypeVar("T")
MAX_LIVE_WORKERS = 6  # candidate workers kept alive at once when several candidates share a judge (LRU)

# candidate-worker roles: (log name, mode when grading, whether it loads the submission's install)
WORKER_ROLES = {
    "candidate": ("candidate", "submission", True),  # CANN operators of the submission
    "kernelbench": ("kernelbench", "kernelbench", True),  # ModelNew modules (+ their JIT builds)
    "baseline": ("baseline", "golden", False),
}  # the live baseline: never imports the submission


@dataclass(frozen=True)
class JudgeSetup:
    """What a judge is given by its controller; builtins only in :meth:`to_dict` (xdist's workerinput, Ray)."""

    worker_id: str  # "main" for the only judge, xdist's "gw0".., a service's judge name
    processes: int  # the run's judges (xdist workers, service judges sharing the machine, or 1)
    memory_plan: MemoryPlan
    submission: SubmissionState | None = None  # the single candidate (or the first of several)
    submissions: dict[str, SubmissionState] = field(default_factory=dict)  # several candidates: name -> state
    pins: dict[str, str] = field(default_factory=dict)  # golden.py path -> sha256 before any submission code ran
    resumed: frozenset[str] = frozenset()  # case keys an earlier identical run recorded (--cann-resume)
    fence_path: str | None = None  # the run's quiet-window fence; None when isolation is off or nothing is timed
    task_roots: tuple[str, ...] = ()  # the task trees graded (protected from submission code)
    candidates: tuple[str, ...] = ()  # the candidates items are parametrised by (empty: one submission)
    cpu_slot: int | None = None  # the judge's index for its workers' CPU block, where not xdist's (a service)

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "processes": self.processes,
            "memory_plan": self.memory_plan.to_dict(),
            "submission": self.submission.to_dict() if self.submission is not None else None,
            "submissions": {k: v.to_dict() for k, v in self.submissions.items()},
            "pins": dict(self.pins),
            "resumed": sorted(self.resumed),
            "fence_path": self.fence_path,
            "task_roots": list(self.task_roots),
            "candidates": list(self.candidates),
            "cpu_slot": self.cpu_slot,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], **override: Any) -> JudgeSetup:
        sub = data.get("submission")
        made = cls(
            worker_id=str(data["worker_id"]),
            processes=int(data["processes"]),
            memory_plan=MemoryPlan.from_dict(data["memory_plan"]),
            submission=SubmissionState.from_dict(sub) if sub is not None else None,
            submissions={k: SubmissionState.from_dict(v) for k, v in (data.get("submissions") or {}).items()},
            pins=dict(data.get("pins") or {}),
            resumed=frozenset(data.get("resumed") or ()),
            fence_path=data.get("fence_path"),
            task_roots=tuple(data.get("task_roots") or ()),
            candidates=tuple(data.get("candidates") or ()),
            cpu_slot=data.get("cpu_slot"),
        )
        return replace(made, **override) if override else made


class Judge:
    """One judge's workers and services; a context manager (closing stops every process it started)."""

    def __init__(self, settings: Settings, setup: JudgeSetup) -> None:
        self.settings = settings
        self.setup = setup
        self.submissions: dict[str, SubmissionState] = dict(setup.submissions)
        self.goldens_computed: Counter[Any] = Counter()
        self.pool_size: PoolSize | None = None  # the pool's size, from the cases this judge will run
        self.log_dir = Path(settings.report_dir) / "logs"
        self._private_goldens = False  # an apart judge: no golden cache, its own golden worker
        self._service: GoldenService | None = None
        self._workers: dict[str, CandidateWorker] = {}
        self._device: DevicePlan | None = None
        self._perf: PerfContext | None = None
        self._fence: Fence | None = None
        self._memory_pool: MemoryPool | None = None
        self._kb_state_dir: Path | None = None
        self._references: OrderedDict[Any, Any] = OrderedDict()
        # goldens kept for other candidates: a few suffice when candidates are innermost (a session); a front-end
        # grading whole candidates one after another (the service) keeps a case set's worth
        self.reference_slots = settings.repeat + 4
        self._apart: Judge | None = None
        self._owner: Judge | None = None
        self._spare: CandidateWorker | None = None  # started ahead of the next candidate (start_spare)
        self._spare_dir: Path | None = None  # the session directory that candidate is to be built into
        self._spare_claimed = False  # a candidate is being built into it (claim_spare)

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------ what the setup says

    @property
    def worker_id(self) -> str:
        return self.setup.worker_id

    @property
    def submission(self) -> SubmissionState | None:
        return self.setup.submission

    @property
    def memory_plan(self) -> MemoryPlan:
        return self.setup.memory_plan

    def submission_of(self, candidate: str | None) -> SubmissionState | None:
        """The submission a case grades: its candidate's, or the run's only one."""
        if candidate is None:
            return self.submission
        return self.submissions.get(candidate)

    def add_candidate(self, name: str, submission: SubmissionState) -> None:
        """A candidate built after the judge started (the service: one per request)."""
        self.submissions[name] = submission

    # ------------------------------------------------------------ a spare worker for the next candidate

    def start_spare(self, sandbox: dict[str, Any]) -> Path | None:
        """Start the next candidate's worker before the candidate exists: torch imported, its guard armed and its
        sandbox up, showing an empty private session directory (returned) that the candidate is then built into
        (``Controller.prepare_candidate(session=...)``). Its first request imports the submission, as for any
        worker. ``sandbox`` is the controller's choice (``SandboxChoice.to_dict()``); a judge already holding a
        spare returns its directory. None under self-check (no submission)."""
        if self._spare_dir is not None:
            return self._spare_dir
        if self.settings.self_check:
            return None
        session = make_dir("session")
        (session / "site").mkdir()
        stub = SubmissionState(
            status="ok", source=None, site_dir=str(session / "site"), session_dir=str(session), sandbox=sandbox
        )
        worker = self.new_worker("candidate", "submission", stub, guard_role="candidate")
        worker.log_path = self.log_dir / f"candidate-worker-spare-{session.name}.log"
        worker.spawn()
        self._spare, self._spare_dir, self._spare_claimed = worker, session, False
        return session

    @property
    def spare(self) -> CandidateWorker | None:
        """The worker started for the next candidate, if one waits (:meth:`start_spare`)."""
        return self._spare

    def claim_spare(self) -> Path | None:
        """The spare's directory for the one candidate about to be built (None: no spare, or already claimed)."""
        if self._spare_dir is None or self._spare_claimed:
            return None
        self._spare_claimed = True
        return self._spare_dir

    def _adopt_spare(self, submission: SubmissionState | None) -> CandidateWorker | None:
        """The spare, if it was started for this submission's directory and nothing it was started with differs
        (an OPP package or a load_inline build sets the worker's environment; Triton sources get their own cache
        at the worker's start)."""
        spare, where = self._spare, self._spare_dir
        if spare is None or where is None or submission is None or submission.session_dir != str(where):
            return None
        self._spare, self._spare_dir = None, None
        site = submission.site_dir
        if submission.env or site != spare.site_dir or (spare.device.startswith("cuda") and uses_triton(site or "")):
            self._close_worker(spare, kill=True)
            return None
        spare.static_problems = submission.guard_problems
        return spare

    def _drop_spare(self, unused_dir_too: bool) -> None:
        spare, where = self._spare, self._spare_dir
        self._spare, self._spare_dir = None, None
        if spare is not None:
            self._close_worker(spare, kill=True)
        if (
            unused_dir_too
            and where is not None
            and str(where) not in {s.session_dir for s in self.submissions.values()}
        ):
            shutil.rmtree(where, ignore_errors=True)

    def discover(self, name: str) -> None:
        """List a candidate's interfaces in the worker that will grade its cases, which stays up for them: a
        service's candidate pays one worker start, not two (a controller in another process discovers at build)."""
        sub = self.submissions[name]
        work = Path(sub.session_dir or self.log_dir)
        discover(sub, work, work, self.settings.guard, worker=self.worker("candidate", name))

    def drop_candidate(self, name: str) -> None:
        """Close a candidate's workers; its install is its controller's to clean. They are killed, not asked to
        exit: nothing of theirs is needed any more, and an interpreter's orderly exit (torch's) costs a service's
        next request about half a second."""
        sub = self.submissions.pop(name, None)
        if sub is not None and self._spare_dir is not None and sub.session_dir == str(self._spare_dir):
            self._drop_spare(unused_dir_too=False)  # built into it but never graded: its directory goes with it
        for key in [k for k in self._workers if k.endswith(f"@{name}")]:
            self._close_worker(self._workers.pop(key), kill=True)

    def resumed(self, key: str) -> bool:
        return key in self.setup.resumed

    def timed_threads(self) -> int:
        """Threads of the candidate and baseline workers under this run's options (:func:`timing_threads`)."""
        return run_timed_threads(self.settings, self.setup.processes)

    # ------------------------------------------------------------ shared goldens

    def shared_reference(self, key: Any, make: Callable[[], T]) -> tuple[T, bool]:
        """``(reference, shared)``: with several candidates, one golden per case and seed serves every candidate
        (cases run case by case, candidates innermost, so a short memory suffices)."""
        if not self.setup.candidates and not self.submissions:
            self.goldens_computed[key] += 1
            return make(), False
        if key in self._references:
            self._references.move_to_end(key)
            return self._references[key], True
        value = make()
        self.goldens_computed[key] += 1
        self._references[key] = value
        while len(self._references) > self.reference_slots:
            self._references.popitem(last=False)
        return value, False

    # ------------------------------------------------------------ services, made on first use

    def golden_service(self) -> GoldenService:
        if self._service is None:
            import torch

            settings = replace(self.settings, golden_cache=None) if self._private_goldens else self.settings
            torch.set_num_threads(cpu_threads())  # the judge's own comparisons
            service = make_service(settings, self.log_dir, cpu_threads(), self.memory_plan.golden)
            name = "golden-worker.log" if self._private_goldens else f"golden-worker-{self.worker_id}.log"
            service.worker.log_path = self.log_dir / name
            self._service = service
        return self._service

    def device(self, detected: str | None = None) -> DevicePlan:
        """This judge's device plan; ``detected``, the kind another judge found for ``--cann-device auto``, spares
        detecting it here (importing torch)."""
        if self._owner is not None:
            return self._owner.device(detected)
        if self._device is None:
            self._device = device_plan(self.settings, self.worker_id, detected)
        return self._device

    def detected_device(self) -> str | None:
        """The device kind this judge planned with, if it planned one."""
        return self._device.kind if self._device is not None else None

    def worker(self, role: str, candidate: str | None = None) -> CandidateWorker:
        """The candidate worker of a role (:data:`WORKER_ROLES`) and candidate; under self-check every role runs
        goldens. Each candidate has its own workers (at most :data:`MAX_LIVE_WORKERS` alive)."""
        _, _, loads_submission = WORKER_ROLES[role]
        key = f"{role}@{candidate}" if candidate is not None and loads_submission else role
        worker = self._workers.get(key)
        if worker is None:
            name, mode, _ = WORKER_ROLES[role]
            live = [k for k in self._workers if "@" in k]
            if "@" in key and len(live) >= MAX_LIVE_WORKERS:
                self._close_worker(self._workers.pop(live[0]))
            submission = self.submission_of(candidate) if loads_submission else None
            log_name = name if "@" not in key else f"{name}-{candidate}"
            adopted = self._adopt_spare(submission) if role == "candidate" and "@" in key else None
            worker = adopted or self.new_worker(log_name, mode, submission, guard_role=name)
            self._workers[key] = worker
        return worker

    def new_worker(
        self, name: str, mode: str, submission: SubmissionState | None, guard_role: str | None = None
    ) -> CandidateWorker:
        """A candidate-side worker the caller owns (closes); ``mode`` is the grading mode, golden under
        self-check."""
        s = self.settings
        if s.self_check:
            mode = "golden"
        plan = self.device()
        base = make_dir("worker")  # the worker's empty, private cwd
        worker = CandidateWorker(
            log_path=self.log_dir / f"{name}-worker-{self.worker_id}.log",
            workdir=base / f"work-{self.worker_id}",
            mode=mode,
            site_dir=submission.site_dir if submission is not None else None,
            env={**(submission.env if submission is not None else {}), **plan.env, **untimed_worker_env(s.perf)},
            device=plan.worker_device,
            watch=for_judge(self.timed_threads(), self.worker_id, plan.worker_device, self.setup.cpu_slot),
            threads=self.timed_threads(),
            memory_bytes=self.memory_plan.candidate,
            startup_timeout_s=max(120.0, s.case_timeout_s),
            guard=mode_for(guard_role or name, s.guard, s.kb_guard),
            protect=self.protected_paths(),
            coverage_floor=coverage_floor(guard_role or name, s.guard, s.kb_guard),
            static_problems=submission.guard_problems if submission is not None else [],
            sandbox=SandboxChoice.from_dict(submission.sandbox)
            if submission and submission.sandbox
            else self._sandbox(),
            readable=self._sandbox_readable(submission),
        )
        if self._private_goldens:  # an apart judge's workers log into its private directory, hidden from workers
            worker.log_path = self.log_dir / f"{name}-worker.log"
            worker.protect = sorted({*worker.protect, str(self.log_dir)})
        return worker

    def release_regions(self) -> None:
        """After a case: the shared regions give back their pages past the plan's ``region_keep``."""
        for worker in self._workers.values():
            if worker.region is not None:
                worker.region.release(self.memory_plan.region_keep)

    def _sandbox(self) -> SandboxChoice | None:
        """The OS sandbox the controller chose for the submission code (None: no submission)."""
        sub = self.submission or next(iter(self.submissions.values()), None)
        return SandboxChoice.from_dict(sub.sandbox) if sub is not None else None

    def _sandbox_readable(self, submission: SubmissionState | None) -> list[str]:
        """What a sandboxed worker sees besides the system: its private install (or the KernelBench copy) and
        the judge-owned KernelBench reference state."""
        paths = [submission.session_dir] if submission is not None and submission.session_dir else []
        if self.submission is not None and self.submission.session_dir:
            paths.append(self.submission.session_dir)  # KernelBench ModelNew modules, also for the baseline
        paths.append(str(self.kb_state_dir()))
        if self.settings.no_install:  # the user's own cann_bench, wherever PYTHONPATH says it is installed
            paths += user_python_path()
        return sorted(set(paths))

    def protected_paths(self) -> list[str]:
        """What a submission's worker may not read or write: the task trees, the reports, the golden cache, the
        plugin's per-machine cache and the hidden case tree."""
        return protected_paths(self.settings, self.setup.task_roots)

    def kb_state_dir(self) -> Path:
        """Judge-owned directory of KernelBench reference state dicts (one file per problem and init seed)."""
        if self._owner is not None:
            return self._owner.kb_state_dir()
        if self._kb_state_dir is None:
            self._kb_state_dir = make_dir("kb-state")
        return self._kb_state_dir

    def fence(self) -> Fence:
        if self._owner is not None:
            return self._owner.fence()
        if self._fence is None:
            path = self.setup.fence_path
            self._fence = Fence(Path(path) if path else None)
        return self._fence

    def memory_pool(self) -> MemoryPool:
        """What the cases in flight reserve their estimated needs from (workers.memory_pool)."""
        if self._owner is not None:
            return self._owner.memory_pool()
        if self._memory_pool is None:
            plan = self.memory_plan
            size = self.pool_size.bytes if self.pool_size is not None else plan.workers * plan.slot
            self._memory_pool = MemoryPool(Path(plan.pool_file) if plan.pool_file else None, size)
        return self._memory_pool

    def perf_context(self) -> PerfContext:
        if self._perf is None:
            if self._owner is not None:  # the owner's anchors and device, this judge's baseline and logs
                self._perf = replace(
                    self._owner.perf_context(), baseline_worker=self.worker("baseline"), log_dir=self.log_dir
                )
                return self._perf

            s, plan = self.settings, self.device()
            self._perf = PerfContext(
                settings=s,
                device=plan,
                baseline_worker=self.worker("baseline"),
                anchors=make_anchor_source(s, plan, cache_dir(), self.timed_threads()),
                log_dir=self.log_dir,
                npu=_npu_timer(s) if plan.kind == "npu" else None,
                fence=self.fence(),
                telemetry=Telemetry() if plan.kind == "cuda" else None,
            )
        return self._perf

    def apart(self) -> Judge:
        """A judge beside this one for cases whose traces must not reach the reports (the hidden split): its own
        golden worker (no golden cache) and candidate workers, logging into a private temporary directory that
        closing removes; the same memory plan, pool, fence and device as this judge."""
        if self._apart is None:
            other = Judge(self.settings, self.setup)
            other._private_goldens, other._owner = True, self
            other.log_dir = make_dir("hidden")
            self._apart = other
        return self._apart

    # ------------------------------------------------------------ end

    def _close_worker(self, worker: CandidateWorker, kill: bool = False) -> None:
        if kill:
            worker.kill()
        else:
            worker.close()
        shutil.rmtree(worker.workdir.parent, ignore_errors=True)

    def close(self) -> None:
        if self._apart is not None:
            self._apart.close()
            self._apart = None
        if self._service is not None:
            self._service.close()
            self._service = None
        self._drop_spare(unused_dir_too=True)
        for worker in self._workers.values():
            self._close_worker(worker)
        self._workers.clear()
        self._perf = None
        self._references.clear()
        if self._kb_state_dir is not None:
            shutil.rmtree(self._kb_state_dir, ignore_errors=True)
            self._kb_state_dir = None
        if self._private_goldens:
            shutil.rmtree(self.log_dir, ignore_errors=True)


def device_plan(settings: Settings, worker_id: str, detected: str | None = None) -> DevicePlan:
    """The device plan of a judge (or the controller, ``main``); ``detected``: the kind a judge found for
    ``--cann-device auto``, which spares detecting it again (importing torch)."""
    kind = detected if settings.device == "auto" and detected else settings.device
    return make_plan(kind, list(settings.device_ids), worker_id)


def run_timed_threads(settings: Settings, processes: int) -> int:
    """Threads of a run's candidate and baseline workers, shared by its ``processes`` judges."""
    return timing_threads(settings.timing_threads, settings.timing_isolation == "fence", processes)


def protected_paths(settings: Settings, task_roots: tuple[str, ...] | list[str]) -> list[str]:
    """What submission code may not read or write (builds and workers alike)."""
    import os

    s = settings
    paths = [s.report_dir, os.path.dirname(s.leaderboard), str(cache_dir())]
    if s.golden_cache:
        paths.append(s.golden_cache)
    if s.hidden_cases:
        paths.append(s.hidden_cases)
    paths += [str(p) for p in task_roots]
    return sorted(set(paths))


def _npu_timer(s: Settings) -> dict[str, Any]:
    return {"secret_shape": list(pick_secret_shape()), "freq_boost": s.freq_boost, "level": s.profiler_level}

"""Per-process plugin state: one :class:`CannBenchState` on ``config.stash``, reached through :func:`of`.

Never in module globals: pytester runs inner sessions in-process. The golden service, the candidate
workers, the device plan and the timing context are made on first use (they bring torch or processes).
"""

from __future__ import annotations

import os
import shutil
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from pytest_cannbench.options import Settings
from pytest_cannbench.scratch import cache_dir, make_dir, reap
from pytest_cannbench.submission.build import Box, SubmissionState
from pytest_cannbench.workers.limits import cpu_threads, processes, timing_threads, usable_cores

if TYPE_CHECKING:
    from pytest_cannbench.guard.sandbox import SandboxChoice
    from pytest_cannbench.judge.goldens import GoldenService
    from pytest_cannbench.timing.devices import DevicePlan
    from pytest_cannbench.timing.isolation import Fence
    from pytest_cannbench.timing.perf import PerfContext
    from pytest_cannbench.workers.candidate_client import CandidateWorker
    from pytest_cannbench.workers.memory_plan import MemoryPlan
    from pytest_cannbench.workers.memory_pool import MemoryPool, PoolSize

WORKERINPUT_KEY = "cannbench_submission"
CANDIDATES_KEY = "_candidates"  # inside the submission's workerinput: every candidate of a multi-candidate run
MAX_LIVE_WORKERS = 6  # candidate workers kept alive at once in a multi-candidate run (the oldest is closed)
T = TypeVar("T")
RESUME_WORKERINPUT_KEY = "cannbench_resume"
PINS_WORKERINPUT_KEY = "cannbench_golden_pins"

# candidate-worker roles: (log name, mode when grading, whether it loads the submission's install)
WORKER_ROLES = {"candidate": ("candidate", "submission", True),  # CANN operators of the submission
                "kernelbench": ("kernelbench", "kernelbench", True),  # ModelNew modules (+ their JIT builds)
                "baseline": ("baseline", "golden", False)}  # the live baseline: never imports the submission


def worker_id(config: pytest.Config) -> str:
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else "main"


@dataclass
class CannBenchState:
    """What one pytest process of a cannbench run holds: settings, the submission, its workers and services."""

    config: pytest.Config
    settings: Settings
    submission: SubmissionState | None = None
    owns_submission: bool = False  # built here (the controller): cleaned up here
    resumed: frozenset[str] = frozenset()  # cases an earlier identical run recorded (controller)
    pins: dict[str, str] = field(default_factory=dict)  # golden.py path -> sha256 before any submission code ran
    _service: GoldenService | None = None
    _workers: dict[str, CandidateWorker] = field(default_factory=dict)
    _device: DevicePlan | None = None
    _perf: PerfContext | None = None
    _kb_state_dir: Path | None = None
    submissions: dict[str, SubmissionState] = field(default_factory=dict)  # multi-candidate runs: name -> state
    _references: OrderedDict[Any, Any] = field(default_factory=OrderedDict)  # shared goldens (multi-candidate)
    goldens_computed: Counter[Any] = field(default_factory=Counter)
    _candidates: list[str] | None = None
    _fence_path: Path | None = None  # the session's quiet-window fence (timing/isolation.py)
    owns_fence: bool = False  # made here (the controller, or the only process): removed here
    _fence: Fence | None = None
    _memory_plan: MemoryPlan | None = None
    _memory_pool: MemoryPool | None = None  # the memory plan's pool (issue 22); the ledger file is the plan's
    pool_size: PoolSize | None = None  # the pool's size, from the collected cases (nodes.memory.size_session_pool)

    @property
    def worker_id(self) -> str:
        return worker_id(self.config)

    @property
    def report_dir(self) -> Path:
        return Path(self.settings.report_dir)

    @property
    def log_dir(self) -> Path:
        return self.report_dir / "logs"

    # ------------------------------------------------------------ the submission

    def prepare_judge_process(self) -> None:
        """Huge pages for this judge's tensors (workers/huge_pages.py) and the comparison's kernel, before any case
        and any submission code; not in an xdist controller, which runs no case (both import torch)."""
        if self.settings.active and self.runs_cases():
            from pytest_cannbench.judge.error_scan import compiled
            from pytest_cannbench.workers.huge_pages import latch_in_judge

            latch_in_judge()
            compiled()

    def reap_scratch(self) -> None:
        """Remove what killed sessions left in the temporary directory (scratch.reap); the controller only."""
        if self.settings.active and getattr(self.config, "workerinput", None) is None:
            reap()

    def start_submission(self, announce: Callable[[str], None] | None = None) -> None:
        """Build, install and discover once: on the controller (before xdist starts workers) or from workerinput."""
        s, config = self.settings, self.config
        if not (s.source or s.no_install):
            return
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None:
            data = workerinput.get(WORKERINPUT_KEY)
            if data is not None:
                self.submission = SubmissionState.from_dict(data)
                self.submissions = {k: SubmissionState.from_dict(v) for k, v in data.get(CANDIDATES_KEY, {}).items()}
            return
        if config.option.collectonly:
            return
        from pytest_cannbench.guard import sandbox
        from pytest_cannbench.submission import kernelbench as kernelbench_submission
        from pytest_cannbench.submission.build import prepare
        from pytest_cannbench.taskformat.dirs import pin_goldens

        self.pins = pin_goldens(self.task_roots())  # before build.sh can touch anything
        try:
            box = Box(sandbox.choose(s.sandbox), tuple(self.protected_paths()))
        except sandbox.SandboxUnavailable as exc:
            raise pytest.UsageError(str(exc)) from None
        if self.multi:
            self._start_candidates(announce, box)
            return
        if announce is not None:
            announce(f"cannbench: preparing submission {s.source or '(installed cann_bench)'} ...")
        if kernelbench_submission.wanted(s):  # ModelNew modules: nothing to build or install
            assert s.source is not None  # wanted() is false without a source
            self.submission = kernelbench_submission.prepare(s.source, self.log_dir, s.build_timeout_s, box=box)
        else:
            self.submission = prepare(s.source, no_install=s.no_install, report_dir=self.report_dir,
                                      build_timeout=s.build_timeout_s, guard=s.guard, box=box, rebuild=s.rebuild,
                                      announce=announce)
        self.owns_submission = True

    def golden_pins(self) -> dict[str, str]:
        """The goldens as they were before the submission was built: here, or from workerinput."""
        workerinput = getattr(self.config, "workerinput", None)
        if workerinput is not None:
            return dict(workerinput.get(PINS_WORKERINPUT_KEY) or {})
        return self.pins

    def task_roots(self) -> list[Path]:
        """The task trees this run collects (``--cann-tasks`` and path arguments that exist)."""
        roots = []
        for arg in [self.settings.tasks, *self.config.args]:
            if arg:
                path = Path(str(arg).split("::", 1)[0]).resolve()
                if path.exists():
                    roots.append(path if path.is_dir() else path.parent)
        return roots

    # ------------------------------------------------------------ many candidates (issue 17)

    @property
    def multi(self) -> bool:
        """Several candidates in this session: several --cann-source, or a KernelBench generation directory."""
        from pytest_cannbench.submission.generations import is_generation

        s = self.settings
        if self._candidates is not None:
            return bool(self._candidates)
        return len(s.sources) > 1 or any(is_generation(src) for src in s.sources)

    def candidate_names(self) -> list[str]:
        """The candidates items are parametrised by (empty: a single-candidate run, items as always)."""
        if self._candidates is None:
            from pytest_cannbench.submission.generations import expand

            self._candidates = [c.name for c in expand(list(self.settings.sources))] if self.multi else []
        return list(self._candidates)

    def _start_candidates(self, announce: Callable[[str], None] | None, box: Box) -> None:
        """Each candidate its own build, private install and logs (``reports/candidates/<name>/``)."""
        from pytest_cannbench.submission import kernelbench as kernelbench_submission
        from pytest_cannbench.submission.build import prepare
        from pytest_cannbench.submission.generations import expand

        s = self.settings
        for cand in expand(list(s.sources)):
            if announce is not None:
                announce(f"cannbench: preparing candidate {cand.name} ({cand.source}) ...")
            report_dir = self.report_dir / "candidates" / cand.name
            if s.bench == "stanford" or (s.bench == "auto" and kernelbench_submission.looks_like(cand.source)):
                sub = kernelbench_submission.prepare(cand.source, report_dir / "logs", s.build_timeout_s, cand.sample,
                                                     box=box)
            else:
                sub = prepare(cand.source, no_install=False, report_dir=report_dir, build_timeout=s.build_timeout_s,
                              guard=s.guard, box=box)
            self.submissions[cand.name] = sub
        self.submission = next(iter(self.submissions.values()), None)
        self.owns_submission = True

    def submission_of(self, candidate: str | None) -> SubmissionState | None:
        """The submission an item grades: its candidate's, or the session's only one."""
        if candidate is None:
            return self.submission
        return self.submissions.get(candidate)

    def shared_reference(self, key: Any, make: Callable[[], T]) -> tuple[T, bool]:
        """``(reference, shared)``: in a multi-candidate run, one golden per case and seed serves every candidate
        (items run case by case, candidates innermost, so a short memory suffices)."""
        if not self.candidate_names():
            self.goldens_computed[key] += 1
            return make(), False
        if key in self._references:
            self._references.move_to_end(key)
            return self._references[key], True
        value = make()
        self.goldens_computed[key] += 1
        self._references[key] = value
        while len(self._references) > self.settings.repeat + 4:
            self._references.popitem(last=False)
        return value, False

    def submission_for_workers(self) -> dict | None:
        if self.submission is None:
            return None
        data = self.submission.to_dict()
        if self.submissions:
            data[CANDIDATES_KEY] = {k: v.to_dict() for k, v in self.submissions.items()}
        return data

    def resume_keys(self) -> frozenset[str]:
        """Cases an earlier identical run recorded (--cann-resume): kept here, or from workerinput."""
        workerinput = getattr(self.config, "workerinput", None)
        if workerinput is not None:
            return frozenset(workerinput.get(RESUME_WORKERINPUT_KEY) or ())
        return self.resumed

    # ------------------------------------------------------------ services, made on first use

    def golden_service(self) -> GoldenService:
        if self._service is None:
            import torch

            from pytest_cannbench.judge.goldens import make_service

            torch.set_num_threads(cpu_threads())  # the judge's own comparisons
            service = make_service(self.settings, self.log_dir, cpu_threads(), self.memory_plan().golden)
            service.worker.log_path = self.log_dir / f"golden-worker-{self.worker_id}.log"
            self._service = service
        return self._service

    def device(self, detected: str | None = None) -> DevicePlan:
        """This process's device plan; ``detected``, the kind an xdist worker found for ``--cann-device auto``,
        spares the controller detecting it (importing torch, 1.9 s, at the end of the session)."""
        if self._device is None:
            from pytest_cannbench.timing.devices import plan as make_plan

            s = self.settings
            kind = detected if s.device == "auto" and detected else s.device
            self._device = make_plan(kind, list(s.device_ids), self.worker_id)
        return self._device

    def detected_device(self) -> str | None:
        """The device kind this process planned with, if it planned one (for the controller: ``device``)."""
        return self._device.kind if self._device is not None else None

    def worker(self, role: str, candidate: str | None = None) -> CandidateWorker:
        """The candidate worker of a role (:data:`WORKER_ROLES`) and candidate; under self-check every role runs
        goldens. Each candidate of a multi-candidate run has its own workers (at most MAX_LIVE_WORKERS alive)."""
        _, _, loads_submission = WORKER_ROLES[role]
        key = f"{role}@{candidate}" if candidate is not None and loads_submission else role
        worker = self._workers.get(key)
        if worker is None:
            name, mode, _ = WORKER_ROLES[role]
            if self.settings.self_check:
                mode = "golden"
            live = [k for k in self._workers if "@" in k]
            if "@" in key and len(live) >= MAX_LIVE_WORKERS:
                old = self._workers.pop(live[0])
                old.close()
                shutil.rmtree(old.workdir.parent, ignore_errors=True)
            submission = self.submission_of(candidate) if loads_submission else None
            log_name = name if "@" not in key else f"{name}-{candidate}"
            worker = self._workers[key] = self._new_worker(log_name, mode, submission, guard_role=name)
        return worker

    def worker_apart(self, role: str, log_dir: Path) -> CandidateWorker:
        """A worker of ``role`` outside the session's pool, logging into ``log_dir`` (issue 18: the hidden split's
        own workers, whose output never reaches the report directory); the caller closes it."""
        name, mode, loads_submission = WORKER_ROLES[role]
        worker = self._new_worker(name, "golden" if self.settings.self_check else mode,
                                  self.submission if loads_submission else None)
        worker.log_path = log_dir / f"{name}-worker.log"
        worker.protect = sorted({*worker.protect, str(log_dir)})
        return worker

    def release_regions(self) -> None:
        """After a case: the shared regions give back their pages past the plan's ``region_keep`` (issue 22)."""
        for worker in self._workers.values():
            if worker.region is not None:
                worker.region.release(self.memory_plan().region_keep)

    def _new_worker(self, name: str, mode: str, submission: SubmissionState | None,
                    guard_role: str | None = None) -> CandidateWorker:
        from pytest_cannbench.guard.policy import coverage_floor, mode_for
        from pytest_cannbench.workers.candidate_client import CandidateWorker
        from pytest_cannbench.workers.cpu_watch import for_judge
        from pytest_cannbench.workers.huge_pages import untimed_worker_env
        s = self.settings
        plan, memory = self.device(), self.memory_plan().candidate
        base = make_dir("worker")  # the worker's empty, private cwd
        return CandidateWorker(
            log_path=self.log_dir / f"{name}-worker-{self.worker_id}.log",
            workdir=base / f"work-{self.worker_id}", mode=mode,
            site_dir=submission.site_dir if submission is not None else None,
            env={**(submission.env if submission is not None else {}), **plan.env, **untimed_worker_env(s.perf)},
            device=plan.worker_device, watch=for_judge(self.timed_threads(), self.worker_id, plan.worker_device),
            threads=self.timed_threads(), memory_bytes=memory,
            startup_timeout_s=max(120.0, s.case_timeout_s),
            guard=mode_for(guard_role or name, s.guard, s.kb_guard), protect=self.protected_paths(),
            coverage_floor=coverage_floor(guard_role or name, s.guard, s.kb_guard),
            static_problems=submission.guard_problems if submission is not None else [],
            sandbox=self._sandbox(), readable=self._sandbox_readable(submission))

    def _sandbox(self) -> SandboxChoice | None:
        """The OS sandbox the controller chose for this session's submission code (None: no submission)."""
        from pytest_cannbench.guard.sandbox import SandboxChoice

        return SandboxChoice.from_dict(self.submission.sandbox) if self.submission is not None else None

    def _sandbox_readable(self, submission: SubmissionState | None) -> list[str]:
        """What a sandboxed worker sees besides the system: its private install (or the KernelBench copy) and
        the judge-owned KernelBench reference state."""
        paths = [submission.session_dir] if submission is not None and submission.session_dir else []
        if self.submission is not None and self.submission.session_dir:
            paths.append(self.submission.session_dir)  # KernelBench ModelNew modules, also for the baseline
        paths.append(str(self.kb_state_dir()))
        if self.settings.no_install:  # the user's own cann_bench, wherever PYTHONPATH says it is installed
            from pytest_cannbench.guard.sandbox import user_python_path

            paths += user_python_path()
        return sorted(set(paths))

    def protected_paths(self) -> list[str]:
        """What a submission's worker may not read or write: the task trees (goldens, cases), the reports and
        results, the golden cache and the plugin's per-machine cache (its private install lives in a temporary
        directory, not there)."""
        s = self.settings
        paths = [s.report_dir, os.path.dirname(s.leaderboard), str(cache_dir())]
        if s.golden_cache:
            paths.append(s.golden_cache)
        paths += self.hidden_paths()
        paths += [str(p) for p in self.task_roots()]
        return sorted(set(paths))

    def hidden_paths(self) -> list[str]:
        """Issue 18: what only the judge may see of the hidden split (the hidden case tree); a sandbox hides these
        from every worker as it hides the task trees."""
        return [self.settings.hidden_cases] if self.settings.hidden_cases else []

    def kb_state_dir(self) -> Path:
        """Judge-owned directory of KernelBench reference state dicts (one file per problem and init seed)."""
        if self._kb_state_dir is None:
            self._kb_state_dir = make_dir("kb-state")
        return self._kb_state_dir

    def fence_path(self) -> Path | None:
        """The session's fence file: made by the controller (or the only process) on first use, from workerinput
        on xdist workers; None when isolation is off or nothing is timed."""
        s = self.settings
        if not (s.active and s.perf and s.timing_isolation == "fence"):
            return None
        if self._fence_path is None:
            from pytest_cannbench.timing.isolation import FENCE_WORKERINPUT_KEY, new_fence_path

            workerinput = getattr(self.config, "workerinput", None)
            if workerinput is not None:
                given = workerinput.get(FENCE_WORKERINPUT_KEY)
                self._fence_path = Path(given) if given else None
            else:
                self._fence_path, self.owns_fence = new_fence_path(), True
        return self._fence_path

    def fence(self) -> Fence:
        if self._fence is None:
            from pytest_cannbench.timing.isolation import Fence

            self._fence = Fence(self.fence_path())
        return self._fence

    def perf_context(self) -> PerfContext:
        if self._perf is None:
            from pytest_cannbench.timing.anchors import make_anchor_source
            from pytest_cannbench.timing.gpu_telemetry import Telemetry
            from pytest_cannbench.timing.perf import PerfContext

            s, plan = self.settings, self.device()
            self._perf = PerfContext(
                settings=s, device=plan, baseline_worker=self.worker("baseline"),
                anchors=make_anchor_source(s, plan, cache_dir(), self.timed_threads()), log_dir=self.log_dir,
                npu=_npu_timer(s) if plan.kind == "npu" else None, fence=self.fence(),
                telemetry=Telemetry() if plan.kind == "cuda" else None)
        return self._perf

    # ------------------------------------------------------------ header and end

    def timing_header(self) -> list[str]:
        """How cases will be timed and anchored; calibrates the roofline here, once per machine, when it is used."""
        s, config = self.settings, self.config
        if not s.perf:
            return ["cannbench: timing off (--cann-no-perf): cases are 'not measured'"]
        from pytest_cannbench.timing.anchors import hardware_key, roofline_line
        from pytest_cannbench.timing.in_worker import MAX_FLUSH_BYTES
        from pytest_cannbench.timing.machine import last_level_cache_bytes
        from pytest_cannbench.workers.cpu_watch import header_line

        plan = self.device()
        flush = (f"cache flush {min(2 * last_level_cache_bytes(), MAX_FLUSH_BYTES) >> 20} MiB" if plan.kind == "cpu"
                 else "L2 flush" if plan.kind == "cuda" else "cache-clean kernel")
        hap = f", HAP to +-{s.hap_target:g}" if s.hap_target > 0 else ""
        repeat = (f"repeat auto ({s.repeat}-{s.repeat_max} calls, speed-up to +-{s.timing_target * 100:g}%{hap} or "
                  f"{s.timing_budget_s:g} s a case)" if s.repeat_auto else f"repeat {s.repeat}")
        threads = self.timed_threads()
        lines = [f"cannbench: timing on {plan.label}: {threads} thread{'s' if threads > 1 else ''} per timed call, "
                 f"warmup {s.warmup}, {repeat} on fresh verified inputs streamed "
                 f"one call at a time, candidate and baseline interleaved (ABBA), {flush}; T_baseline = the golden "
                 "in native precision on the device, unless metadata has one"]
        lines.append(header_line(threads, self.run_processes(), plan.worker_device))  # thread budget, CPU meter
        if s.timing_isolation == "off":
            lines.append("cannbench: timing isolation off (cann_timing_isolation = off): other workers' accuracy "
                         "work runs during timed windows")
        if plan.kind == "cuda":
            lines.append(f"cannbench: GPU clocks, temperature and power read around each window (a throttled one is "
                         f"timed again once); CUDA graphs {s.cuda_graph} (cann_cuda_graph)")
        key = hardware_key(s, plan)
        if key:
            lines.append(f"cannbench: anchors from metadata/<{key}>.json where it has the case; else live")
        if config.option.collectonly or not (s.source or s.no_install or s.self_check):
            return lines
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        announce = reporter.write_line if reporter is not None else None
        lines.append(roofline_line(cache_dir(), plan, self.timed_threads(), announce))
        return lines

    def budget_line(self) -> str:
        """The effective memory and thread budgets of this run's workers, and the inherited limits behind them."""
        from pytest_cannbench.workers import limits

        plan, threads = self.memory_plan(), max(1, usable_cores() // self.run_processes())  # goldens, comparisons
        return limits.header_line(limits.inherited(), plan.golden, plan.candidate, threads)

    def memory_plan(self) -> MemoryPlan:
        """The session's memory plan (issue 22): made once by the controller (or the only process), from
        workerinput on xdist workers, so every judge plans with the same numbers."""
        if self._memory_plan is None:
            from pytest_cannbench.workers import limits, memory_plan

            workerinput = getattr(self.config, "workerinput", None)
            given = workerinput.get(memory_plan.WORKERINPUT_KEY) if workerinput is not None else None
            if given:
                self._memory_plan = memory_plan.MemoryPlan.from_dict(given)
            else:
                s, gib = self.settings, 1 << 30
                workers = self.run_processes()
                candidates = min(len(self.candidate_names()) or 1, MAX_LIVE_WORKERS)
                per_judge = 2 + candidates + (1 if s.perf else 0)  # judge, golden, candidate(s), baseline
                self._memory_plan = memory_plan.make_plan(
                    limits.inherited(), memory_plan.mem_available(), workers, per_judge,
                    int(s.golden_memory_gib * gib) if s.golden_memory_gib else None,
                    int(s.worker_memory_gib * gib) if s.worker_memory_gib else None,
                    int(s.session_memory_gib * gib) if s.session_memory_gib else None,
                    timed_regions=candidates + 1 if s.perf else 0)
                if workers > 1:  # the memory pool's ledger: one file per session, like the timing fence
                    from dataclasses import replace

                    from pytest_cannbench.timing.devices import lock_dir

                    ledger = lock_dir() / f"memory-{os.getpid()}-{os.urandom(6).hex()}.pool"
                    ledger.touch()
                    self._memory_plan = replace(self._memory_plan, pool_file=str(ledger))
        return self._memory_plan

    def memory_pool(self) -> MemoryPool:
        """What the cases in flight reserve their estimated needs from (workers.memory_pool)."""
        if self._memory_pool is None:
            from pytest_cannbench.workers.memory_pool import MemoryPool

            plan = self.memory_plan()
            size = self.pool_size.bytes if self.pool_size is not None else plan.workers * plan.slot
            self._memory_pool = MemoryPool(Path(plan.pool_file) if plan.pool_file else None, size)
        return self._memory_pool

    def runs_cases(self) -> bool:
        """Whether this pytest process runs cases itself: an xdist worker, or a session without xdist."""
        if getattr(self.config, "workerinput", None) is not None:
            return True
        distributed = self.config.getoption("dist", "no") != "no" and bool(getattr(self.config.option, "tx", None))
        return not distributed  # xdist's own test for a controller (``--dist load`` without ``-n`` runs inline)

    def run_processes(self) -> int:
        """The run's pytest processes, from this session's own config: an xdist worker's ``workercount``, the
        controller's ``tx`` count, 1 without xdist. Not the environment: an inline session (pytester) inside an
        xdist worker inherits ``PYTEST_XDIST_WORKER_COUNT`` without being one of its workers."""
        workerinput = getattr(self.config, "workerinput", None)
        if workerinput is not None:
            return max(1, int(workerinput.get("workercount") or processes()))
        if self.runs_cases():  # a session without xdist
            return 1
        return len(self.config.option.tx)  # the controller: one worker per tx

    def timed_threads(self) -> int:
        """Threads of the candidate and baseline workers under this run's options (:func:`limits.timing_threads`)."""
        s = self.settings
        return timing_threads(s.timing_threads, s.timing_isolation == "fence", self.run_processes())

    def close(self) -> None:
        if self._service is not None:
            self._service.close()
            self._service = None
        for worker in self._workers.values():
            worker.close()
            shutil.rmtree(worker.workdir.parent, ignore_errors=True)
        self._workers.clear()
        self._perf = None
        if self._kb_state_dir is not None:
            shutil.rmtree(self._kb_state_dir, ignore_errors=True)
            self._kb_state_dir = None
        if self.submission is not None and self.owns_submission:
            from pytest_cannbench.submission.build import cleanup

            for sub in {id(x): x for x in [self.submission, *self.submissions.values()]}.values():
                cleanup(sub)
            self.owns_submission = False
        self._references.clear()
        plan = self._memory_plan
        if plan is not None and plan.pool_file and not hasattr(self.config, "workerinput"):
            from pytest_cannbench.workers.dispatch import needs_path

            Path(plan.pool_file).unlink(missing_ok=True)
            needs_path(plan.pool_file).unlink(missing_ok=True)
        if self._fence_path is not None and self.owns_fence:
            from pytest_cannbench.timing.isolation import remove_fence

            remove_fence(self._fence_path)
            self.owns_fence = False
        self._fence_path, self._fence = None, None


STATE_KEY = pytest.StashKey[CannBenchState]()
SIGTERM_KEY = pytest.StashKey[object]()


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt("SIGTERM")


def trap_sigterm(config: pytest.Config) -> None:
    """``kill PID`` ends a cannbench session as Ctrl-C does: pytest unwinds, the board records the cases left as
    interrupted, and :func:`close` kills every worker group (otherwise they are orphaned mid-golden)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        config.stash[SIGTERM_KEY] = signal.signal(signal.SIGTERM, _sigterm)


def create(config: pytest.Config, settings: Settings) -> CannBenchState:
    """The process's state, made once at pytest_configure."""
    st = config.stash[STATE_KEY] = CannBenchState(config=config, settings=settings)
    return st


def of(config: pytest.Config) -> CannBenchState:
    return config.stash[STATE_KEY]


def close(config: pytest.Config) -> None:
    st = config.stash.get(STATE_KEY, None)
    if st is not None:
        st.close()
    previous = config.stash.get(SIGTERM_KEY, None)
    if previous is not None:
        import signal

        signal.signal(signal.SIGTERM, previous)  # type: ignore[arg-type]
        del config.stash[SIGTERM_KEY]


def _npu_timer(s: Settings) -> dict:
    from pytest_cannbench.timing.npu_parse import pick_secret_shape

    return {"secret_shape": list(pick_secret_shape()), "freq_boost": s.freq_boost, "level": s.profiler_level}

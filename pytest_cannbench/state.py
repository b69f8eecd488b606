"""Per-process plugin state: one :class:`CannBenchState` on ``config.stash``, reached through :func:`of`.

Never in module globals: pytester runs inner sessions in-process. The golden service, the candidate
workers, the device plan and the timing context are made on first use (they bring torch or processes).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_cannbench.options import Settings
from pytest_cannbench.submission.build import SubmissionState

if TYPE_CHECKING:
    from pytest_cannbench.judge.goldens import GoldenService
    from pytest_cannbench.timing.devices import DevicePlan
    from pytest_cannbench.timing.perf import PerfContext
    from pytest_cannbench.workers.candidate_client import CandidateWorker

WORKERINPUT_KEY = "cannbench_submission"
RESUME_WORKERINPUT_KEY = "cannbench_resume"

# candidate-worker roles: (log name, mode when grading, whether it loads the submission's install)
WORKER_ROLES = {"candidate": ("candidate", "submission", True),  # CANN operators of the submission
                "kernelbench": ("kernelbench", "kernelbench", False),  # ModelNew modules, scrubbed environment
                "baseline": ("baseline", "golden", False)}  # the live baseline: never imports the submission


def worker_id(config: pytest.Config) -> str:
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else "main"


def processes() -> int:
    """pytest processes of this run (xdist workers, or 1)."""
    return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_threads() -> int:
    """Intra-op threads per process: the cores shared by the run's processes, at least one.

    Oversubscribed OpenMP pools are not just slower but pathological: on the 2-core CI
    machine two busy processes with 2 threads each ran element-wise ops 8-15x slower
    than with 1 thread each.
    """
    return max(1, usable_cores() // processes())


def cache_dir() -> Path:
    """Per-machine data the plugin keeps between runs and projects (the roofline calibration):
    ``$CANNBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/pytest-cannbench``, else ``~/.cache/pytest-cannbench``."""
    explicit = os.environ.get("CANNBENCH_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytest-cannbench"


@dataclass
class CannBenchState:
    """What one pytest process of a cannbench run holds: settings, the submission, its workers and services."""

    config: pytest.Config
    settings: Settings
    submission: SubmissionState | None = None
    owns_submission: bool = False  # built here (the controller): cleaned up here
    resumed: frozenset[str] = frozenset()  # cases an earlier identical run recorded (controller)
    _service: GoldenService | None = None
    _workers: dict[str, CandidateWorker] = field(default_factory=dict)
    _device: DevicePlan | None = None
    _perf: PerfContext | None = None
    _kb_state_dir: Path | None = None

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
            return
        if config.option.collectonly:
            return
        from pytest_cannbench.submission import kernelbench as kernelbench_submission
        from pytest_cannbench.submission.build import prepare

        if announce is not None:
            announce(f"cannbench: preparing submission {s.source or '(installed cann_bench)'} ...")
        if kernelbench_submission.wanted(s):  # ModelNew modules: nothing to build or install
            assert s.source is not None  # wanted() is false without a source
            self.submission = kernelbench_submission.prepare(s.source)
        else:
            self.submission = prepare(s.source, no_install=s.no_install, report_dir=self.report_dir,
                                      build_timeout=s.build_timeout_s, guard=s.guard)
        self.owns_submission = True

    def submission_for_workers(self) -> dict | None:
        return self.submission.to_dict() if self.submission is not None else None

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
            service = make_service(self.settings, self.log_dir, cpu_threads())
            service.worker.log_path = self.log_dir / f"golden-worker-{self.worker_id}.log"
            self._service = service
        return self._service

    def device(self) -> DevicePlan:
        if self._device is None:
            from pytest_cannbench.timing.devices import plan as make_plan

            s = self.settings
            self._device = make_plan(s.device, list(s.device_ids), self.worker_id)
        return self._device

    def worker(self, role: str) -> CandidateWorker:
        """The candidate worker of a role (:data:`WORKER_ROLES`); under self-check every role runs goldens."""
        worker = self._workers.get(role)
        if worker is None:
            name, mode, loads_submission = WORKER_ROLES[role]
            if self.settings.self_check:
                mode = "golden"
            worker = self._workers[role] = self._new_worker(name, mode,
                                                            self.submission if loads_submission else None)
        return worker

    def _new_worker(self, name: str, mode: str, submission: SubmissionState | None) -> CandidateWorker:
        from pytest_cannbench.workers.candidate_client import CandidateWorker
        from pytest_cannbench.workers.client import candidate_memory_bytes

        s = self.settings
        plan = self.device()
        base = Path(tempfile.mkdtemp(prefix="cannbench-worker-"))  # the worker's empty, private cwd
        memory = int(s.worker_memory_gib * (1 << 30)) if s.worker_memory_gib else candidate_memory_bytes()
        return CandidateWorker(
            log_path=self.log_dir / f"{name}-worker-{self.worker_id}.log",
            workdir=base / f"work-{self.worker_id}", mode=mode,
            site_dir=submission.site_dir if submission is not None else None,
            env={**(submission.env if submission is not None else {}), **plan.env}, device=plan.worker_device,
            threads=cpu_threads(), memory_bytes=memory, startup_timeout_s=max(120.0, s.case_timeout_s),
            guard=s.guard, protect=self.protected_paths(),
            static_problems=submission.guard_problems if submission is not None else [])

    def protected_paths(self) -> list[str]:
        """What a submission's worker may not read or write: the task trees (goldens, cases), the reports and
        results, the golden cache and the plugin's per-machine cache (its private install lives in a temporary
        directory, not there)."""
        s = self.settings
        paths = [s.report_dir, os.path.dirname(s.leaderboard), str(cache_dir())]
        if s.golden_cache:
            paths.append(s.golden_cache)
        for arg in [s.tasks, *self.config.args]:
            if arg:
                path = Path(str(arg).split("::", 1)[0]).resolve()
                if path.exists():
                    paths.append(str(path if path.is_dir() else path.parent))
        return sorted(set(paths))

    def kb_state_dir(self) -> Path:
        """Judge-owned directory of KernelBench reference state dicts (one file per problem and init seed)."""
        if self._kb_state_dir is None:
            self._kb_state_dir = Path(tempfile.mkdtemp(prefix="cannbench-kb-state-"))
        return self._kb_state_dir

    def perf_context(self) -> PerfContext:
        if self._perf is None:
            from pytest_cannbench.timing.anchors import make_anchor_source
            from pytest_cannbench.timing.perf import PerfContext

            s, plan = self.settings, self.device()
            self._perf = PerfContext(
                settings=s, device=plan, baseline_worker=self.worker("baseline"),
                anchors=make_anchor_source(s, plan, cache_dir(), cpu_threads()), log_dir=self.log_dir,
                npu=_npu_timer(s) if plan.kind == "npu" else None)
        return self._perf

    # ------------------------------------------------------------ header and end

    def timing_header(self) -> list[str]:
        """How cases will be timed and anchored; calibrates the roofline here, once per machine, when it is used."""
        s, config = self.settings, self.config
        if not s.perf:
            return ["cannbench: timing off (--cann-no-perf): cases are 'not measured'"]
        from pytest_cannbench.timing.anchors import hardware_key, roofline_limits
        from pytest_cannbench.timing.in_worker import MAX_FLUSH_BYTES
        from pytest_cannbench.timing.machine import last_level_cache_bytes

        plan = self.device()
        flush = (f"cache flush {min(2 * last_level_cache_bytes(), MAX_FLUSH_BYTES) >> 20} MiB" if plan.kind == "cpu"
                 else "L2 flush" if plan.kind == "cuda" else "cache-clean kernel")
        repeat = (f"repeat auto ({s.repeat}-{s.repeat_max} calls, speed-up to +-{s.timing_target * 100:g}% or "
                  f"{s.timing_budget_s:g} s a case)" if s.repeat_auto else f"repeat {s.repeat}")
        lines = [f"cannbench: timing on {plan.label}: warmup {s.warmup}, {repeat} on fresh verified inputs streamed "
                 f"one call at a time, candidate and baseline interleaved (ABBA), {flush}; T_baseline = the golden "
                 "in native precision on the device, unless metadata has one"]
        key = hardware_key(s, plan)
        if key:
            lines.append(f"cannbench: anchors from metadata/<{key}>.json where it has the case; else live")
        if config.option.collectonly or not (s.source or s.no_install or s.self_check):
            return lines
        limits = roofline_limits(cache_dir(), plan, self._threads_of_workers())
        lines.append(f"cannbench: T_HW from the {limits.describe()}")
        return lines

    def _threads_of_workers(self) -> int:
        """The intra-op threads each pytest worker will use, seen from the xdist controller (or the only process)."""
        config = self.config
        if hasattr(config, "workerinput") or config.getoption("dist", "no") == "no":
            return cpu_threads()
        workers = len(getattr(config.option, "tx", None) or []) or 1
        return max(1, usable_cores() // workers)

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

            cleanup(self.submission)
            self.owns_submission = False


STATE_KEY = pytest.StashKey[CannBenchState]()


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


def _npu_timer(s: Settings) -> dict:
    from pytest_cannbench.timing.npu_parse import pick_secret_shape

    return {"secret_shape": list(pick_secret_shape()), "freq_boost": s.freq_boost, "level": s.profiler_level}

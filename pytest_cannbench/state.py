"""Per-process plugin state, kept on ``config.stash`` (never in module globals: pytester runs in-process)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

import pytest

from pytest_cannbench.options import Settings
from pytest_cannbench.submission.build import SubmissionState

SETTINGS_KEY = pytest.StashKey[Settings]()
SERVICE_KEY = pytest.StashKey[object]()
SUBMISSION_KEY = pytest.StashKey[SubmissionState]()
OWNS_SUBMISSION_KEY = pytest.StashKey[bool]()
CANDIDATE_KEY = pytest.StashKey[object]()
BASELINE_KEY = pytest.StashKey[object]()
DEVICE_KEY = pytest.StashKey[object]()
PERF_KEY = pytest.StashKey[object]()
WORKERINPUT_KEY = "cannbench_submission"
RESUME_WORKERINPUT_KEY = "cannbench_resume"
RESUME_KEY = pytest.StashKey[frozenset]()


def settings(config: pytest.Config) -> Settings:
    return config.stash[SETTINGS_KEY]


def worker_id(config: pytest.Config) -> str:
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else "main"


def report_dir(config: pytest.Config) -> Path:
    return Path(settings(config).report_dir)


def log_dir(config: pytest.Config) -> Path:
    return report_dir(config) / "logs"


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


def golden_service(config: pytest.Config):  # -> GoldenService, imported lazily (torch)
    service = config.stash.get(SERVICE_KEY, None)
    if service is None:
        import torch

        from pytest_cannbench.judge.goldens import make_service

        torch.set_num_threads(cpu_threads())  # the judge's own comparisons
        service = make_service(settings(config), log_dir(config), cpu_threads())
        service.worker.log_path = log_dir(config) / f"golden-worker-{worker_id(config)}.log"
        config.stash[SERVICE_KEY] = service
    return service


# ---------------------------------------------------------------- the submission


def start_submission(config: pytest.Config, announce: Any = None) -> None:
    """Build, install and discover once: on the controller (before xdist starts workers) or from workerinput."""
    s = settings(config)
    if not (s.source or s.no_install):
        return
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        data = workerinput.get(WORKERINPUT_KEY)
        if data is not None:
            config.stash[SUBMISSION_KEY] = SubmissionState.from_dict(data)
        return
    if config.option.collectonly:
        return
    from pytest_cannbench.submission import kernelbench as kernelbench_submission
    from pytest_cannbench.submission.build import prepare

    if announce is not None:
        announce(f"cannbench: preparing submission {s.source or '(installed cann_bench)'} ...")
    if kernelbench_submission.wanted(s):  # ModelNew modules: nothing to build or install
        state = kernelbench_submission.prepare(s.source)
    else:
        state = prepare(s.source, no_install=s.no_install, report_dir=report_dir(config),
                        build_timeout=s.build_timeout_s, guard=s.guard)
    config.stash[SUBMISSION_KEY] = state
    config.stash[OWNS_SUBMISSION_KEY] = True


def submission(config: pytest.Config) -> Optional[SubmissionState]:
    return config.stash.get(SUBMISSION_KEY, None)


def resume_keys(config: pytest.Config) -> frozenset:
    """Cases an earlier identical run recorded (--cann-resume): from the stash, or from workerinput."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return frozenset(workerinput.get(RESUME_WORKERINPUT_KEY) or ())
    return config.stash.get(RESUME_KEY, frozenset())


def submission_for_workers(config: pytest.Config) -> Optional[dict]:
    state = submission(config)
    return state.to_dict() if state is not None else None


def device(config: pytest.Config):  # -> devices.DevicePlan
    plan = config.stash.get(DEVICE_KEY, None)
    if plan is None:
        from pytest_cannbench.timing.devices import plan as make_plan

        s = settings(config)
        plan = config.stash[DEVICE_KEY] = make_plan(s.device, list(s.device_ids), worker_id(config))
    return plan


def _new_worker(config: pytest.Config, name: str, mode: str, state: Optional[SubmissionState]):
    from pytest_cannbench.workers.candidate_client import CandidateWorker
    from pytest_cannbench.workers.client import candidate_memory_bytes

    s = settings(config)
    plan = device(config)
    base = Path(tempfile.mkdtemp(prefix="cannbench-worker-"))  # the worker's empty, private cwd
    memory = int(s.worker_memory_gib * (1 << 30)) if s.worker_memory_gib else candidate_memory_bytes()
    return CandidateWorker(
        log_path=log_dir(config) / f"{name}-worker-{worker_id(config)}.log",
        workdir=base / f"work-{worker_id(config)}", mode=mode,
        site_dir=state.site_dir if state is not None else None,
        env={**(state.env if state is not None else {}), **plan.env}, device=plan.worker_device,
        threads=cpu_threads(), memory_bytes=memory, startup_timeout_s=max(120.0, s.case_timeout_s),
        guard=s.guard, protect=protected_paths(config),
        static_problems=state.guard_problems if state is not None else [])


def protected_paths(config: pytest.Config) -> list[str]:
    """What a submission's worker may not read or write: the task trees (goldens, cases), the reports and
    results, the golden cache and the plugin's per-machine cache (its private install lives in a temporary
    directory, not there)."""
    s = settings(config)
    paths = [s.report_dir, os.path.dirname(s.leaderboard), str(cache_dir(config))]
    if s.golden_cache:
        paths.append(s.golden_cache)
    for arg in [s.tasks] + list(config.args):
        if arg:
            path = Path(str(arg).split("::", 1)[0]).resolve()
            if path.exists():
                paths.append(str(path if path.is_dir() else path.parent))
    return sorted(set(paths))


def candidate_worker(config: pytest.Config):  # -> CandidateWorker
    worker = config.stash.get(CANDIDATE_KEY, None)
    if worker is None:
        mode = "golden" if settings(config).self_check else "submission"
        worker = config.stash[CANDIDATE_KEY] = _new_worker(config, "candidate", mode, submission(config))
    return worker


def baseline_worker(config: pytest.Config):  # -> CandidateWorker that never imports the submission
    worker = config.stash.get(BASELINE_KEY, None)
    if worker is None:
        worker = config.stash[BASELINE_KEY] = _new_worker(config, "baseline", "golden", None)
    return worker


def perf_context(config: pytest.Config):  # -> perfrun.PerfContext
    ctx = config.stash.get(PERF_KEY, None)
    if ctx is None:
        from pytest_cannbench.timing.anchors import make_anchor_source
        from pytest_cannbench.timing.perf import PerfContext

        s = settings(config)
        ctx = config.stash[PERF_KEY] = PerfContext(
            settings=s, device=device(config), service=golden_service(config), worker=candidate_worker(config),
            baseline_worker=baseline_worker(config),
            anchors=make_anchor_source(s, device(config), cache_dir(config), cpu_threads()), log_dir=log_dir(config),
            npu=_npu_timer(s) if device(config).kind == "npu" else None)
    return ctx


def timing_header(config: pytest.Config) -> list[str]:
    """How cases will be timed and anchored; calibrates the roofline here, once per machine, when it is used."""
    s = settings(config)
    if not s.perf:
        return ["cannbench: timing off (--cann-no-perf): cases are 'not measured'"]
    from pytest_cannbench.timing.anchors import hardware_key, roofline_limits
    from pytest_cannbench.timing.in_worker import MAX_FLUSH_BYTES, last_level_cache_bytes

    plan = device(config)
    flush = (f"cache flush {min(2 * last_level_cache_bytes(), MAX_FLUSH_BYTES) >> 20} MiB" if plan.kind == "cpu"
             else "L2 flush" if plan.kind == "cuda" else "cache-clean kernel")
    lines = [f"cannbench: timing on {plan.label}: warmup {s.warmup}, repeat {s.repeat} on fresh verified inputs, "
             f"{flush}; T_baseline = the golden in native precision on the device, unless metadata has one"]
    key = hardware_key(s, plan)
    if key:
        lines.append(f"cannbench: anchors from metadata/<{key}>.json where it has the case; else live")
    if config.option.collectonly or not (s.source or s.no_install or s.self_check):
        return lines
    limits = roofline_limits(cache_dir(config), plan, _threads_of_workers(config))
    lines.append(f"cannbench: T_HW from the {limits.describe()}")
    return lines


def _threads_of_workers(config: pytest.Config) -> int:
    """The intra-op threads each pytest worker will use, seen from the xdist controller (or the only process)."""
    if hasattr(config, "workerinput") or config.getoption("dist", "no") == "no":
        return cpu_threads()
    workers = len(getattr(config.option, "tx", None) or []) or 1
    return max(1, usable_cores() // workers)


def _npu_timer(s: Settings) -> dict:
    from pytest_cannbench.timing.npu_profile import pick_secret_shape

    return {"secret_shape": list(pick_secret_shape()), "freq_boost": s.freq_boost, "level": s.profiler_level}


def cache_dir(config: pytest.Config) -> Path:
    """Per-machine data the plugin keeps between runs and projects (the roofline calibration):
    ``$CANNBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/pytest-cannbench``, else ``~/.cache/pytest-cannbench``."""
    explicit = os.environ.get("CANNBENCH_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytest-cannbench"


def close(config: pytest.Config) -> None:
    service = config.stash.get(SERVICE_KEY, None)
    if service is not None:
        service.close()
        del config.stash[SERVICE_KEY]
    for key in (CANDIDATE_KEY, BASELINE_KEY):
        worker = config.stash.get(key, None)
        if worker is not None:
            worker.close()
            shutil.rmtree(worker.workdir.parent, ignore_errors=True)
            del config.stash[key]
    state = submission(config)
    if state is not None and config.stash.get(OWNS_SUBMISSION_KEY, False):
        from pytest_cannbench.submission.build import cleanup

        cleanup(state)
        del config.stash[OWNS_SUBMISSION_KEY]

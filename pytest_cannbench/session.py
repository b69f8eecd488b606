"""Per-process plugin state, kept on ``config.stash`` (never in module globals: pytester runs in-process)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .options import Settings

SETTINGS_KEY = pytest.StashKey[Settings]()
SERVICE_KEY = pytest.StashKey[object]()


def settings(config: pytest.Config) -> Settings:
    return config.stash[SETTINGS_KEY]


def worker_id(config: pytest.Config) -> str:
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else "main"


def log_dir(config: pytest.Config) -> Path:
    return Path(config.rootpath) / "reports" / "logs"


def processes() -> int:
    """pytest processes of this run (xdist workers, or 1)."""
    return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))


def cpu_threads() -> int:
    """Intra-op threads per process: the cores shared by the run's processes, at least one.

    Oversubscribed OpenMP pools are not just slower but pathological: on the 2-core CI
    machine two busy processes with 2 threads each ran element-wise ops 8-15x slower
    than with 1 thread each.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // processes())


def golden_service(config: pytest.Config):  # -> GoldenService, imported lazily (torch)
    service = config.stash.get(SERVICE_KEY, None)
    if service is None:
        import torch

        from .goldens import make_service

        torch.set_num_threads(cpu_threads())  # the judge's own comparisons
        service = make_service(settings(config), log_dir(config), cpu_threads())
        service.worker.log_path = log_dir(config) / f"golden-worker-{worker_id(config)}.log"
        config.stash[SERVICE_KEY] = service
    return service


def close(config: pytest.Config) -> None:
    service = config.stash.get(SERVICE_KEY, None)
    if service is not None:
        service.close()
        del config.stash[SERVICE_KEY]

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


def golden_service(config: pytest.Config):  # -> GoldenService, imported lazily (torch)
    service = config.stash.get(SERVICE_KEY, None)
    if service is None:
        from .goldens import make_service

        processes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
        service = make_service(settings(config), log_dir(config), processes)
        service.worker.log_path = log_dir(config) / f"golden-worker-{worker_id(config)}.log"
        config.stash[SERVICE_KEY] = service
    return service


def close(config: pytest.Config) -> None:
    service = config.stash.get(SERVICE_KEY, None)
    if service is not None:
        service.close()
        del config.stash[SERVICE_KEY]

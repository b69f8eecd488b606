"""Which device a pytest process grades on, and the lock that keeps timed regions from overlapping.

``--cann-device auto|cpu|cuda|npu`` and ``--cann-device-ids 0,1,...|all`` (default all: every visible card):
xdist worker ``gwK`` uses id ``ids[K % len(ids)]``. The candidate and baseline workers see only that device
(``CUDA_VISIBLE_DEVICES`` / ``ASCEND_RT_VISIBLE_DEVICES``) and address it as device 0, as the official harness
does. A visibility variable that names cards by UUID (``GPU-...``, ``MIG-...``) is passed on token by token: the
workers then see the card the user allowed, never the host's card of the same position. Accuracy checks of
several workers on one device run in parallel; timed batches take an exclusive per-device file lock, so no two
processes, sessions included, time on one device at once. The whole CPU is one device.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cannbench.vocab.registry import AUTO, DEVICE_CHOICES, DeviceKind
from pytest_cannbench.vocab.registry import parse_ids as parse_ids  # the option's grammar lives with the kinds

DEVICE_KINDS = DEVICE_CHOICES
VISIBILITY_ENV = {k.value: env for k in DeviceKind if (env := k.visibility_env) is not None}


@dataclass(frozen=True)
class DevicePlan:
    kind: str  # cpu, cuda or npu
    physical_id: int | str | None  # None on the CPU; a UUID where the visibility variable names cards by UUID
    env: dict[str, str] = field(default_factory=dict)  # applied to the candidate and baseline workers only

    @property
    def worker_device(self) -> str:
        """How the workers address it (the only device they can see)."""
        return "cpu" if self.kind == "cpu" else f"{self.kind}:0"

    @property
    def label(self) -> str:
        return "cpu" if self.kind == "cpu" else f"{self.kind}:{self.physical_id}"


def detect_kind() -> str:
    """auto: an Ascend NPU when torch_npu finds one, else a CUDA GPU, else the CPU."""
    import importlib.util

    import torch

    if importlib.util.find_spec("torch_npu") is not None:
        try:
            import torch_npu  # noqa: F401

            if torch.npu.is_available():  # type: ignore[attr-defined]
                return "npu"
        except Exception:  # noqa: BLE001 - a broken torch_npu install is "no NPU"
            pass
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


def all_ids(kind: str, env: dict[str, str], count: int) -> list[int | str]:
    """Every device a run may use: those ``CUDA_VISIBLE_DEVICES``/``ASCEND_RT_VISIBLE_DEVICES`` names (physical
    ids, or UUIDs as the variable spells them, which the workers are then given), else ``0..count-1``; [0] when
    none is seen. Renumbering UUIDs as 0..n-1 would hand a worker the host's card 0, which the user may not have
    been given."""
    visible = env.get(VISIBILITY_ENV.get(kind, ""), "")
    tokens = [part.strip() for part in visible.split(",") if part.strip()]
    named: list[int | str] = [int(t) if t.isdigit() else t for t in tokens]
    return named or list(range(count)) or [0]


def device_count(kind: str) -> int:
    import torch

    if kind == DeviceKind.NPU:
        return int(torch.npu.device_count())  # type: ignore[attr-defined]
    return int(torch.cuda.device_count()) if kind == DeviceKind.CUDA else 0


def worker_index(worker_id: str) -> int:
    """gw3 -> 3; the only process of a run without xdist -> 0."""
    return int(worker_id[2:]) if worker_id.startswith("gw") and worker_id[2:].isdigit() else 0


def plan(kind: str, ids: list[int] | list[int | str], worker_id: str) -> DevicePlan:
    if kind == AUTO:
        kind = detect_kind()
    if kind == DeviceKind.CPU:
        return DevicePlan(DeviceKind.CPU.value, None)
    ids = ids or all_ids(kind, dict(os.environ), device_count(kind))
    physical = ids[worker_index(worker_id) % len(ids)]
    return DevicePlan(kind, physical, {VISIBILITY_ENV[kind]: str(physical)})


def lock_dir() -> Path:
    """Where the session's locks live: the device locks here, the quiet-window fences (timing/isolation.py)."""
    base = Path(tempfile.gettempdir()) / f"cannbench-locks-{os.getuid()}"
    base.mkdir(parents=True, exist_ok=True)
    return base


def lock_path(device: DevicePlan) -> Path:
    return lock_dir() / f"{device.label.replace(':', '-')}.lock"


@contextlib.contextmanager
def timing_lock(device: DevicePlan) -> Iterator[None]:
    """Exclusive use of the device for one timed batch (blocks until the other holder is done)."""
    with open(lock_path(device), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)

"""Ascend NPU timing, the device half: run steps under torch_npu's profiler and wait for its export.

Each timed step is ``clean(); call(); device_sync(); prof.step()``; the per-run output directory is
emptied first, polled until ``kernel_details.csv`` holds still, and parsed by :mod:`.npu_parse`.
torch_npu is imported inside :func:`profile_steps` only, so this module loads on machines without an NPU.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from pytest_cannbench.timing.npu_parse import (
    ProfiledSteps,
    ProfileParseError,
    normalize_secrets,
    parse_kernel_details,
)

KERNEL_DETAILS = "kernel_details.csv"
PROFILER_OUTPUT = "ASCEND_PROFILER_OUTPUT"
LEVELS = ("Level0", "Level1", "Level2")


class ProfileExportTimeout(ProfileParseError):
    """The profiler's export did not produce a complete kernel_details.csv in time."""


# --------------------------------------------------------------------------------------------
# output directories


def find_kernel_details(prof_dir: str | os.PathLike[str]) -> Path | None:
    """The run's kernel_details.csv: ``*_ascend_pt/ASCEND_PROFILER_OUTPUT/`` first, else anywhere below.

    None when there is none yet. Several files found by the same pattern raise rather than pick the
    newest: a per-run directory holds exactly one export, so two mean mixed runs, and "newest" could
    be a half-written one.
    """
    root = Path(prof_dir)
    if not root.is_dir():
        return None
    for found in (sorted(root.glob(f"*_ascend_pt/{PROFILER_OUTPUT}/{KERNEL_DETAILS}")),
                  sorted(p for p in root.rglob(KERNEL_DETAILS) if p.is_file())):
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            listed = ", ".join(str(p.relative_to(root)) for p in found)
            raise ProfileParseError(f"{len(found)} kernel_details.csv under {root} ({listed}): runs are mixed")
    return None


def wait_for_kernel_details(prof_dir: str | os.PathLike[str], *, timeout_s: float = 60.0,
                            poll_s: float = 0.2) -> Path:
    """Poll until kernel_details.csv exists and its size holds still across two polls.

    The export may run after the profiler context closes (async parsing); reading a file that is
    still being written would lose the last steps' rows.
    """
    deadline = time.monotonic() + timeout_s
    last: tuple[Path, int] | None = None
    while True:
        path = find_kernel_details(prof_dir)
        if path is not None:
            try:
                size = path.stat().st_size
            except OSError:
                size = -1
            if size > 0 and last == (path, size):
                return path
            last = (path, size)
        if time.monotonic() >= deadline:
            state = "none written" if path is None else f"{path} still changing"
            raise ProfileExportTimeout(f"no complete kernel_details.csv under {prof_dir} after {timeout_s:g}s "
                                       f"({state})")
        time.sleep(poll_s)


def clean_profiler_dir(path: str | os.PathLike[str]) -> Path:
    """Empty (or create) a run's profiler directory, so its export can never mix with a previous run's."""
    target = Path(path)
    if target.is_symlink():
        raise ValueError(f"refusing to clean {target}: it is a symlink")
    resolved = target.resolve()
    protected = {Path(resolved.anchor), Path.home().resolve(), Path.cwd().resolve()}
    if resolved in protected or resolved in Path.cwd().resolve().parents:
        raise ValueError(f"refusing to clean {resolved}: not a per-run profiler directory")
    if resolved.exists() and not resolved.is_dir():
        raise ValueError(f"refusing to clean {resolved}: not a directory")
    if resolved.exists():
        shutil.rmtree(resolved)
    resolved.mkdir(parents=True)
    return resolved


# --------------------------------------------------------------------------------------------
# the runner (needs torch_npu and an NPU)


def profile_steps(call: Callable[[], object], n_steps: int, clean: Callable[[], object],
                  device_sync: Callable[[], object], out_dir: str | os.PathLike[str], *,
                  secret_shapes: Iterable[str], level: str = "Level1",
                  export_timeout_s: float = 60.0) -> ProfiledSteps:
    """Time ``n_steps`` calls under torch_npu's profiler and parse them with the secret delimiters.

    ``clean`` must launch exactly one kernel whose first input has a secret shape (the delimiter);
    ``device_sync`` must wait for the device (e.g. ``torch.npu.synchronize``) so no step's kernels run
    into the next. Use Level1 or Level2: Level0 collects only part of the operator info and may leave
    Input Shapes empty (the parse then fails with a hint). AI Core metrics are requested off; some
    torch_npu releases force PipeUtilization at Level1/2 regardless. Warm-up calls belong before this.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if n_steps < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps}")
    secrets = tuple(secret_shapes)
    normalize_secrets(secrets)  # fail before touching the device
    import torch_npu  # optional dependency, NPU hosts only: never at module import

    api = torch_npu.profiler
    out = clean_profiler_dir(out_dir)
    config = {"profiler_level": getattr(api.ProfilerLevel, level)}
    metrics_off = getattr(getattr(api, "AiCMetrics", None), "AiCoreNone", None)
    if metrics_off is not None:
        config["aic_metrics"] = metrics_off
    with api.profile(activities=[api.ProfilerActivity.NPU],
                     schedule=api.schedule(wait=0, warmup=0, active=n_steps, repeat=1),
                     on_trace_ready=api.tensorboard_trace_handler(str(out)),
                     experimental_config=api._ExperimentalConfig(**config)) as prof:
        for _ in range(n_steps):
            clean()
            call()
            device_sync()
            prof.step()
    csv_path = wait_for_kernel_details(out, timeout_s=export_timeout_s)
    return parse_kernel_details(csv_path, secrets, n_steps)

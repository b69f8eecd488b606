"""The hardware limit where no metadata anchors exist (CPU, most GPUs): a measured roofline.

``T_HW = max(bytes / bandwidth, flops / peak_flops)``, the time the case's compulsory traffic and
arithmetic need on this machine, floored at 1 us like the official data. ``bytes`` and ``flops``
come from the operator's ``perf_model`` (:mod:`pytest_cannbench.taskformat.perf_model`).

The two limits are measured, not looked up, because nothing tells them for an arbitrary host or
container: sustained memory bandwidth (best of several copies and triads over buffers well above the
last-level cache, counting the bytes read plus the bytes written, as STREAM does) and peak fp32
matmul throughput, each with the thread count the candidates will get. The measuring child
(:mod:`pytest_cannbench.timing.calibrate`) runs in a fresh interpreter, so the caller's thread settings,
allocator state and imported modules cannot skew it; this module caches its result per machine. The
key is the CPU model, core counts, thread count, device name, torch version and the method's version, so
a changed machine or torch recalibrates.

Run ``python -m pytest_cannbench.timing.roofline [--device cuda] [--threads N]`` to print one
measurement as JSON. Nothing here imports torch outside the calibration child.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench.atomic import write_atomic
from pytest_cannbench.timing.calibrate import CalibrationError, check_device
from pytest_cannbench.timing.calibrate import main as measure_main
from pytest_cannbench.timing.isolation import load_sample, under_load, windows_under_load
from pytest_cannbench.timing.machine import cpu_model

METHOD_VERSION = 2  # 2: bandwidth by working-set size after the flush
# Bump when the measurement changes: old cache entries no longer match
FLOOR_US = 1.0
CALIBRATION_TIMEOUT_S = 300.0
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # put on the calibration child's PYTHONPATH


@dataclass(frozen=True)
class MachineLimits:
    """Measured limits of one device under one thread count."""

    bandwidth_gbs: float  # sustained memory bandwidth, 1e9 bytes/s (read + write)
    peak_gflops: float  # fp32 matmul, 1e9 flop/s
    key: dict[str, Any]  # what the cache entry is valid for; see machine_key()
    measured_at: str  # ISO 8601, UTC
    details: dict[str, Any] = field(default_factory=dict)  # how it was measured (sizes, seconds)
    cached: bool = field(default=False, compare=False)

    def describe(self) -> str:
        """One line for the terminal header."""
        threads = self.key.get("threads")
        who = f"{self.key.get('device', '?')} ({self.key.get('device_name', '?')}"
        who += f", {threads} thread{'s' if threads != 1 else ''})" if str(self.key.get("device")) == "cpu" else ")"
        when = self.measured_at[:19].replace("T", " ")
        runs = int(self.details.get("calibrations") or 1)
        loaded = self.details.get("under_load")
        return (f"roofline {who}: {self.bandwidth_gbs:.1f} GB/s, {self.peak_gflops:.0f} GFLOP/s fp32; "
                f"calibrated {when} UTC{' (cached)' if self.cached else ''}"
                + (f", best of {runs} calibrations" if runs > 1 else "")
                + (f"; MEASURED UNDER LOAD ({loaded}): T_HW may be too high, rerun `cannbench roofline` on a quiet "
                   "machine" if loaded else ""))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("cached")
        return data

    @classmethod
    def from_json(cls, data: Any) -> MachineLimits:
        """Raises ValueError on anything but a complete, plausible entry."""
        if not isinstance(data, dict):
            raise ValueError("not a mapping")
        bandwidth, peak = data.get("bandwidth_gbs"), data.get("peak_gflops")
        for value in (bandwidth, peak):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
                raise ValueError(f"implausible limit {value!r}")
        if not isinstance(data.get("key"), dict) or not isinstance(data.get("measured_at"), str):
            raise ValueError("missing key or measured_at")
        details = data.get("details")
        return cls(float(bandwidth), float(peak), dict(data["key"]), data["measured_at"],  # type: ignore[arg-type]
                   dict(details) if isinstance(details, dict) else {})


def bandwidth_for(nbytes: float, limits: MachineLimits) -> float:
    """The highest bandwidth a working set of ``nbytes`` could reach: the large-buffer figure, or any calibrated
    size from a quarter of it up that was faster after the timed calls' flush (data the flush left in cache,
    as on a VM reporting the host's whole L3). A smaller set can do at least as well as a larger one, so the
    roofline stays a lower bound for small cases too."""
    best = limits.bandwidth_gbs
    for size, rate in _table(limits).items():
        if size >= nbytes / 4 and rate < math.inf:
            best = max(best, rate)
    return best


def _table(limits: MachineLimits) -> dict[float, float]:
    """The calibration's ``bandwidth_by_bytes`` as {bytes: GB/s}, malformed or non-positive entries left out."""
    table = limits.details.get("bandwidth_by_bytes")
    if not isinstance(table, list):
        return {}
    return {float(e[0]): float(e[1]) for e in table if isinstance(e, list) and len(e) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in e) and e[1] > 0}


def t_hw_us(bytes: float | None, flops: float | None, limits: MachineLimits,
            floor_us: float = FLOOR_US) -> float:
    """The roofline time of ``bytes`` moved and ``flops`` computed, in microseconds (at least ``floor_us``)."""
    for name, value in (("bytes", bytes), ("flops", flops)):
        if value is not None and not (0 <= value < math.inf):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    memory_us = (bytes or 0.0) / (bandwidth_for(bytes or 0.0, limits) * 1e3)  # bytes / (GB/s * 1e9) * 1e6
    compute_us = (flops or 0.0) / (limits.peak_gflops * 1e3)
    return max(memory_us, compute_us, floor_us)


# --------------------------------------------------------------------------------------------
# the cache key


def _torch_version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return "unknown"
    try:
        return version("torch")
    except PackageNotFoundError:
        return "none"


def _gpu_name(device: str) -> str:
    """The GPU's name without initialising CUDA in this process (``nvidia-smi``), else "unknown"."""
    index = device.partition(":")[2] or "0"
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible and index.isdigit() and int(index) < len(visible):
        index = visible[int(index)]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", index],
                             capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.splitlines()[0].strip() if out else "unknown"


def machine_key(device: str = "cpu", threads: int = 1) -> dict[str, Any]:
    """What a calibration is valid for; any change recalibrates."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    model = cpu_model()
    return {
        "device": device,
        "device_name": model if device == "cpu" else _gpu_name(device),
        "cpu_model": model,
        "cpus": os.cpu_count() or 1,
        "usable_cpus": usable,
        "threads": threads,
        "torch": _torch_version(),
        "method": METHOD_VERSION,
    }


# --------------------------------------------------------------------------------------------
# calibration: the measuring child (timing.calibrate) in a fresh interpreter

def calibrate(device: str = "cpu", threads: int = 1, timeout_s: float = CALIBRATION_TIMEOUT_S) -> MachineLimits:
    """Measure bandwidth and fp32 peak in a fresh interpreter (about 2-3 s on a small CPU host)."""
    check_device(device, threads)
    before = load_sample()
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    env["CANNBENCH_JUDGE_PID"] = str(os.getpid())  # the child dies with this process (procs)
    command = [sys.executable, "-m", "pytest_cannbench.timing.calibrate", "--device", device, "--threads", str(threads)]
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise CalibrationError(f"roofline calibration on {device} took more than {timeout_s:g} s") from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise CalibrationError(f"roofline calibration on {device} failed (exit {proc.returncode}): "
                               + " | ".join(tail))
    try:
        measured = json.loads(lines[-1])
        bandwidth, peak = float(measured["bandwidth_gbs"]), float(measured["peak_gflops"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CalibrationError(f"roofline calibration on {device} printed no usable result: {exc}") from None
    if not (0 < bandwidth < math.inf and 0 < peak < math.inf):
        raise CalibrationError(f"roofline calibration on {device} measured {bandwidth} GB/s, {peak} GFLOP/s")
    key = machine_key(device, threads)
    details = dict(measured.get("details", {}))
    after = load_sample()
    details["load"] = [before, after]
    details["under_load"] = windows_under_load([{"start": before, "end": after}], key["usable_cpus"])
    details["calibrations"], details["quiet_calibrations"] = 1, 0 if details["under_load"] else 1
    return MachineLimits(bandwidth_gbs=bandwidth, peak_gflops=peak, key=key,
                         measured_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                         details=details)


def merged(best: MachineLimits, other: MachineLimits) -> MachineLimits:
    """The best of two calibrations of the same device, limit by limit and size by size. Every figure is a rate
    the hardware was seen to reach, so the higher one is the truer limit, and T_HW stays a lower bound: a
    calibration taken while other work ran (which underestimates the limits, raises T_HW and made honest
    baselines "beat the hardware") can only add, never lower, what a quieter one measured. ``best``'s
    key and details are kept; the counts add up."""
    table = _table(best)
    for size, rate in _table(other).items():
        table[size] = max(rate, table.get(size, 0.0))
    details = dict(best.details)
    details["bandwidth_by_bytes"] = [[size, table[size]] for size in sorted(table)] if table else None
    for count in ("calibrations", "quiet_calibrations"):
        details[count] = int(best.details.get(count) or 0) + int(other.details.get(count) or 0)
    details["under_load"] = None if details["quiet_calibrations"] else (best.details.get("under_load")
                                                                        or other.details.get("under_load"))
    return MachineLimits(max(best.bandwidth_gbs, other.bandwidth_gbs), max(best.peak_gflops, other.peak_gflops),
                         best.key, max(best.measured_at, other.measured_at), details, best.cached)


def _cache_path(cache_dir: Path, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir / f"roofline-{digest}.json"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Exclusive across processes, so parallel workers calibrate once, not all at once on shared cores."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    try:
        handle = open(path, "a+")
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_cache(path: Path, key: dict[str, Any]) -> MachineLimits | None:
    try:
        limits = MachineLimits.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
    return limits if limits.key == key else None


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


# calibrations that failed in this process, by (device, threads): not measured again
_FAILED: dict[tuple[str, int], CalibrationError] = {}


def cached_limits(cache_dir: Path, device: str = "cpu", threads: int = 1, *,
                  recalibrate: bool = False, announce: Callable[[str], None] | None = None) -> MachineLimits:
    """The limits of this machine from ``cache_dir``, calibrating when no entry matches its key
    (``announce`` says so first: a first run's pause is explained).

    A cache that cannot be written is not an error: the fresh measurement is returned anyway.
    """
    check_device(device, threads)
    key = machine_key(device, threads)
    cache_dir = Path(cache_dir)

    def measure() -> MachineLimits:
        failed = _FAILED.get((device, threads))
        if failed is not None:  # said once; every case that needs T_HW then fails with it, without a retry each
            raise failed
        if announce is not None:
            announce(f"cannbench: calibrating the roofline (T_HW) of this machine on {device} with {threads} "
                     f"thread(s): once per machine, a few seconds; cached in {cache_dir}")
        try:
            return calibrate(device, threads)
        except CalibrationError as exc:
            _FAILED[(device, threads)] = exc
            raise

    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        return measure()
    path = _cache_path(cache_dir, key)
    with _locked(cache_dir / "roofline.lock"):
        found = _read_cache(path, key)
        # an entry measured only under load is measured again once the machine is quiet, and merged
        stale = found is not None and found.details.get("under_load") and under_load(
            [load_sample()], key["usable_cpus"]) is None
        if found is not None and not recalibrate and not stale:
            limits = MachineLimits(found.bandwidth_gbs, found.peak_gflops, found.key, found.measured_at,
                                   found.details, cached=True)
        else:
            limits = measure() if found is None else merged(measure(), found)
            try:
                _write_atomic(path, limits.to_json())
            except OSError:
                pass
        return _with_fewer_threads(cache_dir, limits)


def _with_fewer_threads(cache_dir: Path, limits: MachineLimits) -> MachineLimits:
    """``limits`` merged with the cached calibrations of the same device with fewer threads: a kernel given k
    threads can do whatever one given fewer can, so their limits bound its T_HW too."""
    threads = limits.key.get("threads")
    if not isinstance(threads, int) or threads <= 1:
        return limits
    for k in range(1, threads):
        key = dict(limits.key, threads=k)
        fewer = _read_cache(_cache_path(cache_dir, key), key)
        if fewer is not None:
            limits = merged(limits, fewer)
    return limits


def main(argv: list[str] | None = None) -> int:
    """``cannbench roofline``: one measurement in this process, printed as JSON."""
    return measure_main(argv, prog="python -m pytest_cannbench.timing.roofline")


if __name__ == "__main__":
    sys.exit(main())

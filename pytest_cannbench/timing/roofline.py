"""The hardware limit where no metadata anchors exist (CPU, most GPUs): a measured roofline.

``T_HW = max(bytes / bandwidth, flops / peak_flops)``, the time the case's compulsory traffic and
arithmetic need on this machine, floored at 1 us like the official data. ``bytes`` and ``flops``
come from the operator's ``perf_model`` (:mod:`pytest_cannbench.taskformat.perf_model`).

The two limits are measured, not looked up, because nothing tells them for an arbitrary host or
container: sustained memory bandwidth (best of several copies and triads over buffers well above the
last-level cache, counting the bytes read plus the bytes written, as STREAM does) and peak fp32
matmul throughput, each with the thread count the candidates will get. Calibration runs in a fresh
interpreter, so the caller's thread settings, allocator state and imported modules cannot skew it,
and is cached per machine: the key is the CPU model, core counts, thread count, device name, torch
version and the method's version, so a changed machine or torch recalibrates.

Run ``python -m pytest_cannbench.timing.roofline [--device cuda] [--threads N]`` to print one
measurement as JSON. Nothing here imports torch outside the calibration child.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

METHOD_VERSION = 1  # bump when the measurement changes: old cache entries no longer match
FLOOR_US = 1.0
MiB = 1 << 20
CALIBRATION_TIMEOUT_S = 300.0


class CalibrationError(RuntimeError):
    """The calibration child failed or returned implausible numbers."""


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
        return (f"roofline {who}: {self.bandwidth_gbs:.1f} GB/s, {self.peak_gflops:.0f} GFLOP/s fp32; "
                f"calibrated {when} UTC{' (cached)' if self.cached else ''}")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("cached")
        return data

    @classmethod
    def from_json(cls, data: Any) -> "MachineLimits":
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


def t_hw_us(bytes: Optional[float], flops: Optional[float], limits: MachineLimits,
            floor_us: float = FLOOR_US) -> float:
    """The roofline time of ``bytes`` moved and ``flops`` computed, in microseconds (at least ``floor_us``)."""
    for name, value in (("bytes", bytes), ("flops", flops)):
        if value is not None and not (0 <= value < math.inf):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    memory_us = (bytes or 0.0) / (limits.bandwidth_gbs * 1e3)  # bytes / (GB/s * 1e9) * 1e6
    compute_us = (flops or 0.0) / (limits.peak_gflops * 1e3)
    return max(memory_us, compute_us, floor_us)


# --------------------------------------------------------------------------------------------
# the cache key


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (implementer/part on Arm hosts), else platform's."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    if fields:
                        break  # the first processor block is enough
                    continue
                name, _, value = line.partition(":")
                fields.setdefault(name.strip().lower(), value.strip())
    except OSError:
        pass
    for name in ("model name", "hardware", "cpu model", "processor name"):
        if fields.get(name):
            return fields[name]
    if "cpu implementer" in fields or "cpu part" in fields:
        return f"arm implementer {fields.get('cpu implementer', '?')} part {fields.get('cpu part', '?')}"
    return platform.processor() or platform.machine() or "unknown"


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
        usable = len(os.sched_getaffinity(0))  # type: ignore[attr-defined]
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
# calibration (parent side)

_CHILD = """\
import importlib.util, sys
spec = importlib.util.spec_from_file_location("_cannbench_roofline_child", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
module.main(sys.argv[2:])
"""


def _check_device(device: str, threads: int) -> None:
    if device != "cpu" and not (device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an int >= 1, got {threads!r}")


def calibrate(device: str = "cpu", threads: int = 1, timeout_s: float = CALIBRATION_TIMEOUT_S) -> MachineLimits:
    """Measure bandwidth and fp32 peak in a fresh interpreter (about 2-3 s on a small CPU host)."""
    _check_device(device, threads)
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    command = [sys.executable, "-c", _CHILD, str(Path(__file__).resolve()), "--device", device,
               "--threads", str(threads)]
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
    return MachineLimits(bandwidth_gbs=bandwidth, peak_gflops=peak, key=key,
                         measured_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                         details=measured.get("details", {}))


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


def _read_cache(path: Path, key: dict[str, Any]) -> Optional[MachineLimits]:
    try:
        limits = MachineLimits.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
    return limits if limits.key == key else None


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    from pytest_cannbench.atomic import write_atomic

    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def cached_limits(cache_dir: Path, device: str = "cpu", threads: int = 1, *,
                  recalibrate: bool = False) -> MachineLimits:
    """The limits of this machine from ``cache_dir``, calibrating when no entry matches its key.

    A cache that cannot be written is not an error: the fresh measurement is returned anyway.
    """
    _check_device(device, threads)
    key = machine_key(device, threads)
    cache_dir = Path(cache_dir)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        return calibrate(device, threads)
    path = _cache_path(cache_dir, key)
    with _locked(cache_dir / "roofline.lock"):
        if not recalibrate:
            found = _read_cache(path, key)
            if found is not None:
                return MachineLimits(found.bandwidth_gbs, found.peak_gflops, found.key, found.measured_at,
                                     found.details, cached=True)
        limits = calibrate(device, threads)
        try:
            _write_atomic(path, limits.to_json())
        except OSError:
            pass
        return limits


# --------------------------------------------------------------------------------------------
# the measurement (child side: runs in the fresh interpreter)


def _llc_bytes() -> int:
    """The largest cache the kernel reports for CPU 0 (0 if unknown)."""
    largest = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            largest = max(largest, int(digits) * scale)
    return largest


def _best(run: Any, repeats: int, sync: Any = None) -> float:
    """Fastest of ``repeats`` timed calls after one untimed warm-up, in seconds."""
    run()
    if sync:
        sync()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        if sync:
            sync()
        best = min(best, time.perf_counter() - start)
    return best


def _stream(torch: Any, buffer_bytes: int, device: Any, inner: int, sync: Any) -> tuple[float, float, float]:
    """Bandwidth (GB/s) as the best of copy (2 x bytes) and triad (3 x bytes), and their times per kernel."""
    n = buffer_bytes // 4
    a = torch.full((n,), 1.0, dtype=torch.float32, device=device)
    b = torch.full((n,), 2.0, dtype=torch.float32, device=device)
    c = torch.zeros(n, dtype=torch.float32, device=device)

    def copies() -> None:
        for _ in range(inner):
            b.copy_(a)

    def triads() -> None:
        for _ in range(inner):
            torch.add(b, a, alpha=3.0, out=c)

    copy_s = _best(copies, 4, sync) / inner
    triad_s = _best(triads, 4, sync) / inner
    return max(2 * buffer_bytes / copy_s, 3 * buffer_bytes / triad_s) / 1e9, copy_s, triad_s


def _matmul(torch: Any, size: int, device: Any, inner: int, sync: Any) -> tuple[float, float]:
    """fp32 GFLOP/s of a square matmul (best of several), and its time."""
    x = torch.randn(size, size, dtype=torch.float32, device=device)
    y = torch.randn(size, size, dtype=torch.float32, device=device)
    z = torch.empty(size, size, dtype=torch.float32, device=device)

    def matmuls() -> None:
        for _ in range(inner):
            torch.mm(x, y, out=z)

    mm_s = _best(matmuls, 5, sync) / inner
    return 2 * size ** 3 / mm_s / 1e9, mm_s


def _measure_cpu(torch: Any, threads: int) -> dict[str, Any]:
    torch.set_num_threads(threads)
    # Two buffers of twice the reported LLC (virtual machines often overstate it), 64..256 MiB each.
    buffer_bytes = min(max(2 * _llc_bytes(), 64 * MiB), 256 * MiB)
    bandwidth, copy_s, triad_s = _stream(torch, buffer_bytes, "cpu", 1, None)
    size = 1024 if threads <= 4 else 2048
    peak, mm_s = _matmul(torch, size, "cpu", 1, None)
    return {"bandwidth_gbs": bandwidth, "peak_gflops": peak,
            "details": {"buffer_mib": buffer_bytes // MiB, "copy_s": copy_s, "triad_s": triad_s,
                        "matmul_n": size, "matmul_s": mm_s, "threads": torch.get_num_threads()}}


def _measure_cuda(torch: Any, device: str) -> dict[str, Any]:
    dev = torch.device(device)
    torch.cuda.set_device(dev)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 peak, not TF32
    sync = torch.cuda.synchronize
    buffer_bytes = 512 * MiB  # far above any current GPU's L2 cache
    # several kernels per timing, so launch and synchronisation overhead do not count
    bandwidth, copy_s, triad_s = _stream(torch, buffer_bytes, dev, 10, sync)
    size = 8192
    peak, mm_s = _matmul(torch, size, dev, 3, sync)
    return {"bandwidth_gbs": bandwidth, "peak_gflops": peak,
            "details": {"buffer_mib": buffer_bytes // MiB, "copy_s": copy_s, "triad_s": triad_s,
                        "matmul_n": size, "matmul_s": mm_s, "gpu": torch.cuda.get_device_name(dev)}}


def measure(device: str = "cpu", threads: int = 1) -> dict[str, Any]:
    """One measurement in *this* process; :func:`calibrate` runs it in a fresh one."""
    _check_device(device, threads)
    import torch

    with torch.no_grad():
        if device == "cpu":
            return _measure_cpu(torch, threads)
        if not torch.cuda.is_available():
            raise CalibrationError(f"device {device!r} requested but torch.cuda is not available")
        return _measure_cuda(torch, device)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_cannbench.timing.roofline",
                                     description="Measure memory bandwidth and fp32 peak; print JSON.")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.device, args.threads)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

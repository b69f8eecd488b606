"""The roofline calibration child: measure this machine's memory bandwidth and fp32 peak, print JSON.

:func:`pytest_cannbench.timing.roofline.calibrate` runs this module as a fresh interpreter
(``python -m pytest_cannbench.timing.calibrate --device cpu --threads N``), so the caller's thread settings,
allocator state and imported modules cannot skew the numbers. Bandwidth is the best of several copies and
triads over buffers well above the last-level cache, counting the bytes read plus the bytes written (as
STREAM does); the peak is the best of several square fp32 matmuls. torch is imported inside :func:`measure`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

from pytest_cannbench.procs import die_with_parent
from pytest_cannbench.timing.machine import last_level_cache_bytes

MiB = 1 << 20


class CalibrationError(RuntimeError):
    """The calibration child failed or returned implausible numbers."""


def check_device(device: str, threads: int) -> None:
    """Raise ValueError unless ``device`` is cpu, cuda or cuda:N and ``threads`` an int >= 1."""
    if device != "cpu" and not (device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an int >= 1, got {threads!r}")


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


FLUSHED_SIZES = tuple(1 << k for k in range(14, 27, 2))  # 16 KiB .. 64 MiB working sets
MAX_FLUSH_BYTES = 128 * MiB  # as the timed calls' flush (timing.in_worker)


def _flushed_bandwidths(torch: Any, repeats: int = 5) -> list[list[float]]:
    """``[bytes, GB/s]`` per working-set size: the best of a copy (bytes read + written) and a sum (bytes read)
    of that size, each right after the same cache flush a timed call gets. A machine whose flush cannot evict
    everything (a VM reporting the host's whole L3) serves small sets from cache; the roofline must know, or
    eager PyTorch beats the "hardware limit" on every small case."""
    flush = torch.zeros(min(2 * last_level_cache_bytes(), MAX_FLUSH_BYTES) // 4, dtype=torch.float32)
    table = []
    for size in FLUSHED_SIZES:
        a = torch.ones(size // 4, dtype=torch.float32)
        b = torch.empty_like(a)
        best = 0.0
        kernels = ((lambda a=a, b=b: b.copy_(a), 2 * size), (lambda a=a: a.sum(), size))
        for kernel, moved in kernels:
            kernel()
            for _ in range(repeats):
                flush.add_(1.0)
                start = time.perf_counter()
                kernel()
                best = max(best, moved / (time.perf_counter() - start) / 1e9)
        table.append([float(size), best])
    return table


def _measure_cpu(torch: Any, threads: int) -> dict[str, Any]:
    torch.set_num_threads(threads)
    # Two buffers of twice the reported LLC (virtual machines often overstate it), 64..256 MiB each.
    buffer_bytes = min(max(2 * last_level_cache_bytes(), 64 * MiB), 256 * MiB)
    bandwidth, copy_s, triad_s = _stream(torch, buffer_bytes, "cpu", 1, None)
    size = 1024 if threads <= 4 else 2048
    peak, mm_s = _matmul(torch, size, "cpu", 1, None)
    table = _flushed_bandwidths(torch)
    return {"bandwidth_gbs": bandwidth, "peak_gflops": peak,
            "details": {"buffer_mib": buffer_bytes // MiB, "copy_s": copy_s, "triad_s": triad_s,
                        "matmul_n": size, "matmul_s": mm_s, "threads": torch.get_num_threads(),
                        "bandwidth_by_bytes": table}}


def indexed(device: str) -> str:
    """``cuda`` -> ``cuda:0``: torch.cuda.set_device and get_device_name refuse a device without an index (seen
    with torch 2.11 on an H200), and the calibration child sees one card, the one it measures."""
    return device if ":" in device or device == "cpu" else f"{device}:0"


def _measure_cuda(torch: Any, device: str) -> dict[str, Any]:
    dev = torch.device(indexed(device))
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
    """One measurement in *this* process; ``roofline.calibrate`` runs it in a fresh one."""
    check_device(device, threads)
    import torch

    with torch.no_grad():
        if device == "cpu":
            return _measure_cpu(torch, threads)
        if not torch.cuda.is_available():
            raise CalibrationError(f"device {device!r} requested but torch.cuda is not available")
        return _measure_cuda(torch, device)


def main(argv: list[str] | None = None, prog: str = "python -m pytest_cannbench.timing.calibrate") -> int:
    """Print one :func:`measure` result as a JSON line (the calibration child, and ``cannbench roofline``)."""
    parser = argparse.ArgumentParser(prog=prog, description="Measure memory bandwidth and fp32 peak; print JSON.")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    args = parser.parse_args(argv)
    judge = os.environ.pop("CANNBENCH_JUDGE_PID", "")
    if judge.isdigit():  # started by a pytest session: never outlive it
        die_with_parent(int(judge))
    print(json.dumps(measure(args.device, args.threads)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GPU proof of issue 20 items 3 and 6: eager timers against CUDA-graph replays, and the card's telemetry.

Usage: python benchmarks/cuda_graph_fidelity.py [--runs 5] [--repeat 20] [--sizes 1024,65536,1048576,16777216]

For an elementwise kernel (``x * 2 + 1``, fp32) of each size, in this process, through the worker's own loop
(``timing.in_worker.run_batch``, fresh inputs per call, L2 cleared before each), ``--runs`` batches with the
eager timer (``cuda_profiler``) and with ``--cann-cuda-graph on``. Printed per size: the median per-call time
of each, their ratio, the run-to-run CV of each, and the batch's notes (fallbacks). Expected: at the smallest
sizes (launch-bound) graph times at or below eager ones, converging as the kernel grows; no fallback for this
capturable kernel. Before and after, the GPU telemetry reading and the throttle rule's verdict on it.

Without a CUDA GPU it says so and exits 0. Nothing here has run on hardware yet; the numbers belong in
docs/timing.md once it has.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from pytest_cannbench.timing.gpu_telemetry import GpuReading, Telemetry, throttled
from pytest_cannbench.timing.in_worker import Flusher, run_batch


def batch(size: int, repeat: int, graph: str) -> tuple[float, str, list[str]]:
    sets = [{"x": torch.randn(size, device="cuda")} for _ in range(repeat)]
    outs: list[torch.Tensor] = []
    times = run_batch(lambda x: x * 2 + 1, {"x": torch.randn(size, device="cuda")}, lambda i: sets[i], repeat, 3,
                      "cuda:0", time.perf_counter, Flusher("cuda:0"), lambda i, r: outs.append(r.clone()),
                      graph=graph)
    for s, out in zip(sets, outs):  # every timed output is its own set's
        torch.testing.assert_close(out, s["x"] * 2 + 1)
    return statistics.median(times.seconds), times.timer, times.notes


def cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.mean(values) if len(values) > 1 else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--sizes", default="1024,65536,1048576,16777216")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU here: nothing to measure (run this on a GPU machine)")
        return 0
    telemetry = Telemetry()
    before = telemetry.read(0)
    print(f"GPU {torch.cuda.get_device_name(0)}; telemetry before: {before}")
    print(f"{'elements':>10} {'eager us':>9} {'graph us':>9} {'graph/eager':>11} {'CV eager':>8} {'CV graph':>8}  "
          "timers / notes")
    for size in (int(s) for s in args.sizes.split(",")):
        eager = [batch(size, args.repeat, "off") for _ in range(args.runs)]
        graph = [batch(size, args.repeat, "on") for _ in range(args.runs)]
        e, g = [m for m, _, _ in eager], [m for m, _, _ in graph]
        timers = sorted({t for _, t, _ in eager + graph})
        notes = sorted({n for _, _, ns in graph for n in ns if "subtracted" not in n})
        print(f"{size:>10} {statistics.median(e) * 1e6:>9.2f} {statistics.median(g) * 1e6:>9.2f} "
              f"{statistics.median(g) / statistics.median(e):>11.3f} {cv(e):>8.1%} {cv(g):>8.1%}  {timers} {notes}")
    after = telemetry.read(0)
    print(f"telemetry after: {after}")
    readings = [GpuReading.from_dict(r) if "unavailable" not in r else None for r in (before, after)]
    print(f"throttled across the run: {throttled(*readings)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

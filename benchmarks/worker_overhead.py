"""Candidate worker costs: start-up, and the round trip of one call beyond the operator itself.

Usage: python benchmarks/worker_overhead.py [--mib 4] [--calls 200] [--starts 5]

Side by side in one run:
* start: ``CandidateWorker.start()`` (spawn, import torch, import the submission, first frame)
  next to a bare ``python -c "import torch"``, the floor any worker pays;
* round trip: an identity-copy operator called through the worker (judge wall time) next to the
  same operator's own time as the worker measures it, for an input and output of ``--mib`` MiB.
  The difference is what the process boundary adds: writing the input into shared memory, two
  pipe frames, copying the output into shared memory, decoding and freezing the worker.
Targets (issue 3): round trip under 2 ms beyond the operator for 4 MB, start under 3 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from pytest_cannbench.submission.interfaces import call_candidates
from pytest_cannbench.workers.candidate_client import CandidateWorker

SUBMISSION = '''import torch


def copy_op(x):
    out = torch.empty_like(x)
    out.copy_(x)
    return out
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=float, default=4.0)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="cannbench-bench-") as tmp:
        root = Path(tmp)
        (root / "site" / "cann_bench").mkdir(parents=True)
        (root / "site" / "cann_bench" / "__init__.py").write_text(SUBMISSION)

        def worker() -> CandidateWorker:
            return CandidateWorker(log_path=root / "worker.log", workdir=root / "work", site_dir=str(root / "site"))

        bare, starts = [], []
        for _ in range(args.starts):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import torch"], check=True)
            bare.append(time.perf_counter() - t0)
            w = worker()
            starts.append(w.start())
            w.close()
        print(f"start: worker {statistics.median(starts):.2f} s (median of {args.starts}), "
              f"bare 'import torch' {statistics.median(bare):.2f} s, "
              f"worker/bare {statistics.median(starts) / statistics.median(bare):.2f}x  [target < 3 s]")

        x = torch.randn(int(args.mib * (1 << 20)) // 4)
        target = {"kind": "submission", "name": "CopyOp", "function_name": "copy_op",
                  "names": call_candidates("CopyOp", "copy_op")}
        w = worker()
        w.start()
        walls, ops = [], []
        for i in range(args.calls + 10):
            t0 = time.perf_counter()
            result = w.call(target, {"x": x}, expected_out_bytes=x.numel() * 4, timeout=60)
            wall = time.perf_counter() - t0
            assert result.status == "ok" and torch.equal(result.outputs[0], x), result.message
            if i >= 10:  # warm-up: first-touch page faults of the region on both sides
                walls.append(wall)
                ops.append(result.seconds)
        w.close()
        overhead = [a - b for a, b in zip(walls, ops)]
        local = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            torch.empty_like(x).copy_(x)
            local.append(time.perf_counter() - t0)
        print(f"round trip, {args.mib:g} MiB in and out, median of {args.calls}: "
              f"judge wall {statistics.median(walls) * 1e3:.2f} ms, operator (in worker) "
              f"{statistics.median(ops) * 1e3:.2f} ms, "
              f"same operator in-process {statistics.median(local) * 1e3:.2f} ms")
        print(f"overhead beyond the operator: median {statistics.median(overhead) * 1e3:.2f} ms, "
              f"p90 {sorted(overhead)[int(0.9 * len(overhead))] * 1e3:.2f} ms  [target < 2 ms]")
    return 0


if __name__ == "__main__":
    sys.exit(main())

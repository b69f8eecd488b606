"""What the OS sandbox costs: worker start-up and one call's round trip, with bubblewrap and without.

Usage: python benchmarks/sandbox_cost.py [--mib 4] [--calls 200] [--starts 5]

Side by side in one run, the same submission (an identity copy) in two candidate workers that differ only in
``sandbox``: bubblewrap (user, pid, network, mount namespaces; the whitelisted read-only view) and off (the
in-process containment alone). Starts alternate between the two so machine drift hits both; calls are timed by
the judge's wall clock and the difference to the operator's own time is the boundary's cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from pytest_cannbench.guard import sandbox
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
    on = sandbox.choose("auto")
    if not on.on:
        print(f"bubblewrap unavailable here: {on.reason}")
        return 1
    modes = {"bwrap": on, "off": sandbox.choose("off")}
    with tempfile.TemporaryDirectory(prefix="cannbench-bench-") as tmp:
        root = Path(tmp)
        (root / "site" / "cann_bench").mkdir(parents=True)
        (root / "site" / "cann_bench" / "__init__.py").write_text(SUBMISSION)

        def worker(name: str) -> CandidateWorker:
            return CandidateWorker(log_path=root / f"{name}.log", workdir=root / f"work-{name}",
                                   site_dir=str(root / "site"), sandbox=modes[name], readable=[str(root / "site")])

        starts: dict[str, list[float]] = {name: [] for name in modes}
        for _ in range(args.starts):
            for name in modes:
                w = worker(name)
                starts[name].append(w.start())
                w.close()
        x = torch.randn(int(args.mib * (1 << 20)) // 4)
        target = {"kind": "submission", "name": "CopyOp", "function_name": "copy_op",
                  "names": call_candidates("CopyOp", "copy_op")}
        overhead: dict[str, list[float]] = {name: [] for name in modes}
        workers = {name: worker(name) for name in modes}
        for w in workers.values():
            w.start()
        for i in range(args.calls + 10):
            for name, w in workers.items():
                t0 = time.perf_counter()
                result = w.call(target, {"x": x}, expected_out_bytes=x.numel() * 4, timeout=60)
                wall = time.perf_counter() - t0
                assert result.status == "ok" and torch.equal(result.outputs[0], x), (name, result.message)
                if i >= 10 and result.seconds is not None:
                    overhead[name].append(wall - result.seconds)
        for w in workers.values():
            w.close()
    start_on, start_off = statistics.median(starts["bwrap"]), statistics.median(starts["off"])
    call_on, call_off = statistics.median(overhead["bwrap"]), statistics.median(overhead["off"])
    print(f"worker start (median of {args.starts}): bubblewrap {start_on:.2f} s, off {start_off:.2f} s, "
          f"cost {start_on - start_off:+.2f} s ({start_on / start_off:.2f}x)")
    print(f"call round trip beyond the operator, {args.mib:g} MiB in and out (median of {args.calls}): "
          f"bubblewrap {call_on * 1e3:.2f} ms, off {call_off * 1e3:.2f} ms, cost {(call_on - call_off) * 1e3:+.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What closing builtin kernels at the dispatcher costs (guard/forbid.py): at worker start, and per honest call.

Usage: python benchmarks/forbid_cost.py [--starts 5] [--calls 300]

Side by side in one run, two candidate workers that differ only in the guard mode: ``block`` (builtin kernels
closed before the import) and ``warn`` (the same guard, profiler and checks, nothing closed). Starts alternate so
machine drift hits both. The per-call figure is the worker's own time of the call (the guard's profiled call of an
honest submission: ``empty_like`` + ``copy_``, allowed ops only) and the judge's round trip; also the time the
closing itself takes inside a worker (its log line) and the symbol allowlist's one-off read of torch's exports.
"""

from __future__ import annotations

import argparse
import re
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
CLOSED = re.compile(r"builtin kernels closed: (\d+) ops, (\d+) kernels .*\((\d+) ms\)")
# The dispatch of allowed ops alone, in a fresh process with and without the closing: what an honest kernel's
# allocation, views and copies pay per call (the best of 7 rounds of 2000 calls, in microseconds)
DISPATCH = """
import json, sys, timeit, torch
from pytest_cannbench.guard import forbid
torch.set_num_threads(1)
if sys.argv[1] == "closed":
    forbid.close("cpu", lambda op: None)
x = torch.ones(1024)
calls = {"empty_like+copy_": lambda: torch.empty_like(x).copy_(x),
         "view+contiguous": lambda: x.view(32, 32).t().contiguous(),
         "torch.ops.aten.clone": lambda: torch.ops.aten.clone.default(x)}
print(json.dumps({k: min(timeit.repeat(f, number=2000, repeat=7)) / 2000 * 1e6 for k, f in calls.items()}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    modes = ("block", "warn")
    with tempfile.TemporaryDirectory(prefix="cannbench-bench-") as tmp:
        root = Path(tmp)
        (root / "site" / "cann_bench").mkdir(parents=True)
        (root / "site" / "cann_bench" / "__init__.py").write_text(SUBMISSION)

        def worker(mode: str, i: int) -> CandidateWorker:
            return CandidateWorker(log_path=root / f"{mode}-{i}.log", workdir=root / f"work-{mode}-{i}",
                                   site_dir=str(root / "site"), guard=mode, sandbox=sandbox.choose("off"))

        starts: dict[str, list[float]] = {mode: [] for mode in modes}
        closing: list[tuple[int, int, int]] = []
        for i in range(args.starts):
            for mode in modes:
                w = worker(mode, i)
                starts[mode].append(w.start())
                w.close()
                found = CLOSED.search(w.log_path.read_text(errors="replace"))
                if mode == "block":
                    assert found, "the block worker's log has no closing line"
                    closing.append((int(found[1]), int(found[2]), int(found[3])))
                else:
                    assert not found, "a warn worker closed builtin kernels"
        target = {"kind": "submission", "name": "CopyOp", "function_name": "copy_op",
                  "names": call_candidates("CopyOp", "copy_op")}
        for size in (1 << 10, 1 << 20):  # 4 KiB (the per-call overhead shows) and 4 MiB
            x = torch.randn(size)
            inside: dict[str, list[float]] = {mode: [] for mode in modes}
            trip: dict[str, list[float]] = {mode: [] for mode in modes}
            workers = {mode: worker(mode, 100 + size % 7) for mode in modes}
            for w in workers.values():
                w.start()
            for i in range(args.calls + 20):
                for mode, w in workers.items():
                    t0 = time.perf_counter()
                    result = w.call(target, {"x": x}, expected_out_bytes=x.numel() * 4, timeout=60)
                    wall = time.perf_counter() - t0
                    assert result.status == "ok" and torch.equal(result.outputs[0], x), (mode, result.message)
                    if i >= 20 and result.seconds is not None:
                        inside[mode].append(result.seconds)
                        trip[mode].append(wall)
            for w in workers.values():
                w.close()
            block, warn = statistics.median(inside["block"]), statistics.median(inside["warn"])
            print(f"{size * 4 // 1024} KiB call, worker's time (median of {args.calls}): block {block * 1e6:.1f} us, "
                  f"warn {warn * 1e6:.1f} us, difference {(block - warn) * 1e6:+.1f} us; judge's round trip "
                  f"{statistics.median(trip['block']) * 1e3:.2f} / {statistics.median(trip['warn']) * 1e3:.2f} ms")
    ops, kernels, _ = closing[0]
    ms = sorted(c[2] for c in closing)
    s_block, s_warn = statistics.median(starts["block"]), statistics.median(starts["warn"])
    print(f"closing: {ops} ops, {kernels} kernels, {ms[len(ms) // 2]} ms median ({ms[0]}-{ms[-1]} ms) in the worker")
    print(f"worker start (median of {args.starts}): block {s_block:.2f} s, warn {s_warn:.2f} s, "
          f"difference {s_block - s_warn:+.2f} s")
    import json
    import subprocess

    per_op: dict[str, dict[str, list[float]]] = {"closed": {}, "open": {}}
    for _ in range(args.starts):
        for state in per_op:
            done = subprocess.run([sys.executable, "-c", DISPATCH, state], capture_output=True, text=True, check=True)
            for name, us in json.loads(done.stdout.strip().splitlines()[-1]).items():
                per_op[state].setdefault(name, []).append(us)
    for name in per_op["closed"]:
        closed, opened = statistics.median(per_op["closed"][name]), statistics.median(per_op["open"][name])
        print(f"dispatch of {name} (median of {args.starts} processes): closed {closed:.2f} us, open "
              f"{opened:.2f} us, difference {closed - opened:+.2f} us")
    from pytest_cannbench.guard.elf_symbols import torch_exports

    t0 = time.perf_counter()
    names = torch_exports()
    print(f"symbol allowlist: torch's exports read once per judge process, {len(names)} names in "
          f"{(time.perf_counter() - t0) * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

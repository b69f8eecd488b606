"""What the anti-cheat defences cost per case: the C++ example's softplus graded through the candidate worker
with ``--cann-guard off`` and ``block`` side by side, in one run.

A case's candidate work is one correctness call, the second correctness pass (a call) and one timing batch
(warm-up plus ``--cann-repeat`` timed calls). Both workers run the same sequence, alternately, on the same
inputs; the figure is the judge's wall time per case and the ratio block/off. Containment (seccomp) and the
audit hook are on in both modes (they are not optional); ``block`` adds the profiler's op tree, the library and
identity checks. Golden computation, input generation and comparison are excluded: they are the same in both
modes, so the ratio printed is an upper bound of the overhead on a real case.

    python benchmarks/guard_overhead.py [--rounds 7] [--repeat 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_cannbench.submission.interfaces import call_candidates

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = {"64k": 1 << 16, "512k": 1 << 19, "2M": 1 << 21, "8M": 1 << 23}  # float32 elements


def install_example(work: Path) -> Path:
    from tests.conftest import prebuilt_submission

    wheel = next((prebuilt_submission(ROOT / "examples" / "cpp_cpu") / "dist").glob("cann_bench*.whl"))
    site = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    str(wheel)], check=True)
    return site


def one_case(worker, x, fresh, repeat: int) -> float:
    target = {"kind": "submission", "name": "Softplus", "function_name": "softplus",
              "names": call_candidates("Softplus", "softplus"), "rel_path": "level1/softplus"}
    kwargs = {"x": x, "beta": 1.0, "threshold": 20.0}
    out = x.numel() * x.element_size()
    t0 = time.perf_counter()
    for _ in range(2):  # the correctness call and the second pass
        result = worker.call(target, kwargs, expected_out_bytes=out, timeout=120)
        assert result.status == "ok", result.message
    sets = [kwargs] + [{"x": t, "beta": 1.0, "threshold": 20.0} for t in fresh]
    batch = worker.time_batch(target, sets, list(range(1, len(sets))), warmup=3, expected_out_bytes=out, timeout=120)
    assert batch.status == "ok", batch.message
    return time.perf_counter() - t0, statistics.median(batch.seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    import torch

    from pytest_cannbench.workers.candidate_client import CandidateWorker

    work = Path(tempfile.mkdtemp(prefix="cannbench-guard-bench-"))
    site = install_example(work)
    workers = {mode: CandidateWorker(log_path=work / f"{mode}.log", workdir=work / mode, mode="submission",
                                     site_dir=str(site), guard=mode) for mode in ("off", "block")}
    print(f"{'elements':>8} {'kernel':>9} {'off ms':>9} {'block ms':>9} {'overhead':>9}  (per case, judge wall time)")
    try:
        for label, n in SIZES.items():
            x = torch.randn(n)
            fresh = [torch.randn(n) for _ in range(args.repeat)]
            walls: dict[str, list[float]] = {m: [] for m in workers}
            kernel = []
            for _ in range(args.rounds):
                for mode, worker in workers.items():
                    wall, k = one_case(worker, x, fresh, args.repeat)
                    walls[mode].append(wall)
                    kernel.append(k)
            off, block = statistics.median(walls["off"]), statistics.median(walls["block"])
            print(f"{label:>8} {statistics.median(kernel) * 1e3:>8.2f}m {off * 1e3:>9.1f} {block * 1e3:>9.1f} "
                  f"{(block / off - 1) * 100:>8.1f}%")
    finally:
        for worker in workers.values():
            worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the judge's kernel-side watch of a worker costs, and that honest workers give it nothing to find.

Three real workers run the softplus case the way a timed case does (two correctness calls, one streamed batch):
the C++ example (guard block), a pure-Python submission (guard off) and the golden in baseline mode. For each,
with the worker frozen after its batch: the code-page check (``guard.code_pages.findings``, which must find
nothing), the affinity check (``cpu_budget.widened``) and a reading of each CPU meter that opens here, against
the /proc schedstat reading it replaces. Then the example's call times with the timing thread budget enforced
(affinity on one CPU) and without it, alternately, to show the budget costs honest single-threaded code nothing.

    python benchmarks/cpu_watch_cost.py [--rounds 5] [--repeat 10] [--elements 1048576]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PY_SOFTPLUS = "import torch\n\n\ndef softplus(x, beta=1.0, threshold=20.0):\n" \
              "    return torch.nn.functional.softplus(x, beta=beta, threshold=threshold)\n"


def install(work: Path, wheel: Path, name: str) -> Path:
    site = work / f"site-{name}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    str(wheel)], check=True)
    return site


def per_call_us(fn, n: int = 50) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def one_case(worker, target: dict, x, fresh: list) -> list[float]:
    kwargs = {"x": x, "beta": 1.0, "threshold": 20.0}
    out = x.numel() * x.element_size()
    for _ in range(2):
        result = worker.call(target, kwargs, expected_out_bytes=out, timeout=120)
        assert result.status == "ok", result.message
    sets = [kwargs] + [{"x": t, "beta": 1.0, "threshold": 20.0} for t in fresh]
    batch = worker.time_batch(target, sets, list(range(1, len(sets))), warmup=2, expected_out_bytes=out, timeout=120)
    assert batch.status == "ok", batch.message
    return batch.seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--elements", type=int, default=1 << 20)
    args = parser.parse_args()
    import torch

    from pytest_cannbench.guard import code_pages
    from pytest_cannbench.judge.goldens import golden_ref
    from pytest_cannbench.submission.interfaces import call_candidates
    from pytest_cannbench.taskformat.spec import load_operator
    from pytest_cannbench.workers import cpu_budget
    from pytest_cannbench.workers.candidate_client import CandidateWorker
    from pytest_cannbench.workers.contract import thread_cpu
    from pytest_cannbench.workers.cpu_meter import KINDS, CpuMeter
    from pytest_cannbench.workers.cpu_watch import CpuWatch
    from tests.conftest import prebuilt_submission
    from tests.inner import make_wheel

    work = Path(tempfile.mkdtemp(prefix="cannbench-watch-bench-"))
    example = install(work, next((prebuilt_submission(ROOT / "examples" / "cpp_cpu") / "dist").glob("*.whl")), "cpp")
    python = install(work, make_wheel(work / "py-dist", {"cann_bench/__init__.py": PY_SOFTPLUS}), "py")
    task = load_operator(ROOT / "tasks" / "level1" / "softplus", ROOT / "tasks")
    submission = {"kind": "submission", "name": "Softplus", "function_name": "softplus",
                  "names": call_candidates("Softplus", "softplus"), "rel_path": "level1/softplus"}
    golden = {"kind": "golden", **golden_ref(task)}
    budget = cpu_budget.budget_cpus(1, 0)
    workers = {
        "cpp example (block)": (CandidateWorker(log_path=work / "cpp.log", workdir=work / "cpp", site_dir=str(example),
                                                guard="block", watch=CpuWatch(budget)), submission),
        "python (guard off)": (CandidateWorker(log_path=work / "py.log", workdir=work / "py", site_dir=str(python),
                                               guard="off", watch=CpuWatch(budget)), submission),
        "golden (baseline)": (CandidateWorker(log_path=work / "golden.log", workdir=work / "golden", mode="golden",
                                              watch=CpuWatch(budget)), golden),
    }
    x = torch.randn(args.elements)
    fresh = [torch.randn(args.elements) for _ in range(args.repeat)]
    expect = code_pages.vdso_expected()
    try:
        print(f"{'worker':<22} {'threads':>7} {'code pages':>11} {'found':>5} {'affinity':>9} "
              + " ".join(f"{k:>16}" for k in KINDS) + "   (us per check or reading, the worker frozen)")
        for label, (worker, target) in workers.items():
            one_case(worker, target, x, fresh)
            pid = worker.pid
            found = code_pages.findings(pid, expect_vdso=expect)
            pages = statistics.median(per_call_us(lambda pid=pid: code_pages.findings(pid, expect_vdso=expect), 20)
                                      for _ in range(3))
            wide = per_call_us(lambda pid=pid: cpu_budget.widened(pid, budget))
            readings = []
            for kind in KINDS:
                meter = CpuMeter.open(pid, kinds=(kind,))
                if meter.kind != kind:
                    readings.append("-")
                elif kind == "schedstat":
                    readings.append(f"{per_call_us(lambda pid=pid: thread_cpu(pid)):.1f}")
                else:
                    readings.append(f"{per_call_us(meter.total, 200):.1f}")
                meter.close()
            print(f"{label:<22} {len(os.listdir(f'/proc/{pid}/task')):>7} {pages:>11.0f} {len(found):>5} "
                  f"{wide:>9.0f} " + " ".join(f"{r:>16}" for r in readings))
            if found:
                print("   ", found)
        cpp, _ = workers["cpp example (block)"]
        free = CandidateWorker(log_path=work / "free.log", workdir=work / "free", site_dir=str(example),
                               guard="block", watch=CpuWatch(()))
        times: dict[str, list[float]] = {"budget (1 CPU)": [], "no budget": []}
        for _ in range(args.rounds):
            times["budget (1 CPU)"] += one_case(cpp, submission, x, fresh)
            times["no budget"] += one_case(free, submission, x, fresh)
        free.close()
        for label, seconds in times.items():
            q1, median, q3 = (v * 1e6 for v in statistics.quantiles(seconds, n=4))
            print(f"example softplus, {args.elements} elements, {label:<15} median {median:8.1f} us, quartiles "
                  f"{q1:8.1f}-{q3:8.1f} us ({len(seconds)} calls)")
    finally:
        for worker, _ in workers.values():
            worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""N candidates in one session against N sessions, side by side; and an edit-and-grade round trip.

Usage: python benchmarks/multi_candidate.py [-n 4] [-k EXPR] [--tasks tasks]

Every candidate is a prebuilt pure-Python wheel (torch-level operators, graded with ``--cann-guard off``, so
no build time is measured, only what a session costs around it). Part 1 grades the N candidates once as N
``pytest`` sessions (one after the other) and once as one session with N ``--cann-source``; each run is a real
``python -m pytest`` process, timed from its start to its exit, and its ``results.jsonl`` says where the time
went (golden seconds per case: computed once per case in the multi-candidate session, shared after). Part 2 is
an agent's loop: one prebuilt wheel, one operator, one case, timing on, from ``pytest`` start to the
leaderboard written.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

OPERATORS = '''import torch


def softplus(x, beta=1.0, threshold=20.0):
    return torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold).to(x.dtype).contiguous()


def leaky_relu(x, negative_slope=0.01):
    return torch.nn.functional.leaky_relu(x.float(), negative_slope).to(x.dtype).contiguous()


def silu(x):
    return torch.nn.functional.silu(x.float()).to(x.dtype).contiguous()
'''


def _pytest(args: list[str], cwd: Path) -> tuple[float, int, Path]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--cann-golden-cache=off",
                           "--cann-guard=off", *args], cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
    return wall, proc.returncode, cwd / "reports"


def _accounts(reports: Path) -> dict[str, float]:
    """Seconds per phase summed over the run's cases (golden, candidate, ...), and the count of cases."""
    total: Counter[str] = Counter()
    for line in (reports / "results.jsonl").read_text().splitlines():
        outcome = json.loads(line)["outcome"]
        total["cases"] += 1
        total["goldens_computed"] += 0 if outcome.get("golden_cached") else 1
        for key, value in (outcome.get("seconds") or {}).items():
            if isinstance(value, (int, float)):
                total[key] += value
    return dict(total)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=4, help="candidates (default 4)")
    parser.add_argument("-k", dest="keyword", default="(softplus or leaky_relu or silu) and (01 or 02)",
                        help="the subset of the bundled suite (default: cases 1 and 2 of three element-wise "
                             "operators; the whole suite takes hours on a shared 2-core machine)")
    parser.add_argument("--tasks", type=Path, default=ROOT / "tasks")
    args = parser.parse_args()
    from inner import make_wheel

    with tempfile.TemporaryDirectory(prefix="cannbench-multi-") as tmp:
        base = Path(tmp)
        sources = []
        for i in range(args.n):
            source = base / f"cand{i}"
            make_wheel(source / "dist", {"cann_bench/__init__.py": OPERATORS + f"\nVARIANT = {i}\n"})
            sources.append(source)
        common = [f"--cann-tasks={args.tasks.resolve()}", "-k", args.keyword, "--cann-warmup=1", "--cann-repeat=3"]
        singles = []
        for i, source in enumerate(sources):
            cwd = base / f"single{i}"
            cwd.mkdir()
            singles.append(_pytest([*common, f"--cann-source={source}"], cwd))
        cwd = base / "multi"
        cwd.mkdir()
        multi = _pytest([*common, *[f"--cann-source={s}" for s in sources]], cwd)
        single_wall = sum(w for w, _, _ in singles)
        print(f"subset: -k {args.keyword!r} of {args.tasks}, timing on (warmup 1, repeat 3), guard off, "
              f"{os.cpu_count()} CPUs (shared with other work: figures are indicative)")
        print(f"{args.n} sessions:        wall {single_wall:8.1f} s  (each: "
              + ", ".join(f"{w:.1f}" for w, _, _ in singles) + ")")
        print(f"1 session, {args.n} cands: wall {multi[0]:8.1f} s  ratio {multi[0] / single_wall:.2f} "
              f"of {args.n} sessions ({single_wall / multi[0]:.2f}x faster)")
        accounts = [_accounts(r) for _, _, r in singles]
        summed = Counter[str]()
        for a in accounts:
            summed.update(a)
        one = _accounts(multi[2])
        for label, acc, wall in ((f"{args.n} sessions", summed, single_wall), ("1 session", one, multi[0])):
            golden, cand = acc.get("golden", 0.0), acc.get("candidate", 0.0)
            print(f"  {label:<12} cases {int(acc.get('cases', 0)):4d}  goldens computed "
                  f"{int(acc.get('goldens_computed', 0)):4d}  golden {golden:6.1f} s  candidate calls {cand:6.1f} s  "
                  f"rest (startup, workers, timing, reports) {wall - golden - cand:6.1f} s")

        loop = base / "loop"
        loop.mkdir()
        t0 = time.time()
        wall, code, reports = _pytest([f"--cann-tasks={args.tasks.resolve()}", "-k", "softplus and 01",
                                       f"--cann-source={sources[0]}"], loop)
        board = reports / "leaderboard.json"
        written = board.stat().st_mtime - t0 if board.is_file() else float("nan")
        print(f"edit-and-grade round trip (prebuilt wheel, softplus case 1, timing on): leaderboard written "
              f"{written:.1f} s after pytest started, process exited after {wall:.1f} s (exit {code})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

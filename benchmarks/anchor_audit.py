"""Are the live anchors honest? T_HW against the eager PyTorch baseline on every case of a task tree (issue 20).

Usage: python benchmarks/anchor_audit.py --tasks /path/to/cann-bench/tasks/level1 [--repeat 5] [-n 2]
       python benchmarks/anchor_audit.py --board reports/leaderboard.json      # audit a finished run instead

T_HW (the roofline) must be a lower bound for every honest implementation, the baseline included: a case whose
baseline is faster than its T_HW has a degenerate anchor, and its HAP says nothing. The audit grades the tree's
goldens as the candidate (``--cann-source @golden``: an honest submission that is exactly the baseline) with timing on,
then lists per case T_baseline, T_HW, their ratio and the anchor flags:

* ``baseline_below_t_hw`` / ``degenerate_anchors``: the baseline beat T_HW (scoring's flags);
* ``implausible_time``: the candidate (here the same code as the baseline) beat T_HW and failed;
* ``t_hw_outputs_only``: the roofline of the modelled traffic was beaten by the baseline's fastest call and fell
  back to the bytes the outputs must be written with (timing/anchors.check_t_hw).

Prints the cases by status (every collected case must be accounted for) and each one that did not pass, the
counts and every flagged case; ``--json PATH`` writes them. The roofline calibration in the per-machine
cache is the one the run uses: calibrate on a quiet machine first (``cannbench roofline``), or the audit measures
a T_HW inflated by the load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = ("baseline_below_t_hw", "degenerate_anchors", "t_hw_outputs_only")


def run(tasks: Path, out: Path, repeat: int, workers: int, extra: list[str]) -> float:
    """One self-check grading session with timing; its wall seconds."""
    args = [sys.executable, "-m", "pytest", f"--cann-tasks={tasks}", "--cann-source=@golden", f"--cann-repeat={repeat}",
            "--cann-warmup=1", "-q", "-p", "no:cacheprovider", f"--cann-report-dir={out}", "--cann-seed=0",
            "--rootdir", str(out)]
    if workers > 1:
        args += ["-n", str(workers)]
    start = time.monotonic()
    proc = subprocess.run(args + extra, cwd=out, capture_output=True, text=True)
    if not (out / "leaderboard.json").is_file():
        raise SystemExit(f"the run wrote no leaderboard (rc {proc.returncode}):\n{proc.stdout[-3000:]}")
    return time.monotonic() - start


def audit(board: dict[str, Any]) -> dict[str, Any]:
    """Per-case anchors and the counts of every kind of dishonest anchor."""
    rows, counts = [], {flag: 0 for flag in (*FLAGS, "implausible_time")}
    timed, statuses, other = 0, {}, []
    for op in board["operators"]:
        for case in op["cases"]:
            status = case.get("status")
            statuses[status] = statuses.get(status, 0) + 1
            if status != "passed":
                other.append({"key": case["key"], "status": status, "failure_type": case.get("failure_type"),
                              "message": (case.get("message") or "")[:300]})
            base, hw = case.get("t_baseline_us"), case.get("t_hw_us")
            flags = set(case.get("flags") or [])
            if case.get("failure_type") == "implausible_time":
                flags.add("implausible_time")
            if base is None or hw is None:
                if "implausible_time" in flags:
                    counts["implausible_time"] += 1
                continue
            timed += 1
            for flag in counts:
                counts[flag] += flag in flags
            rows.append({"key": case["key"], "t_baseline_us": base, "t_hw_us": hw, "ratio": base / hw,
                         "source": (case.get("anchor_source") or {}).get("t_hw"),
                         "flags": sorted(flags & {*FLAGS, "implausible_time"})})
    return {"timed": timed, "cases": board.get("cases_total"), "statuses": statuses, "not_passed": other,
            "counts": counts, "rows": rows}


def show(result: dict[str, Any]) -> None:
    counts = result["counts"]
    print(f"cases: {result['cases']}; by status: "
          + ", ".join(f"{k} {v}" for k, v in sorted(result["statuses"].items(), key=str)))
    for case in result["not_passed"]:
        print(f"  {case['key']}: {case['status']} ({case['failure_type']}) {case['message'][:150]}")
    print(f"timed cases: {result['timed']} of {result['cases']}")
    for flag, n in counts.items():
        print(f"  {flag:<22} {n}")
    ratios = sorted(r["ratio"] for r in result["rows"])
    if ratios:
        print(f"T_baseline / T_HW: min {ratios[0]:.2f}, median {ratios[len(ratios) // 2]:.2f}, max {ratios[-1]:.1f}")
    flagged = [r for r in result["rows"] if r["flags"]]
    if flagged:
        print(f"{'case':<44}{'T_base us':>12}{'T_HW us':>12}{'ratio':>8}  source / flags")
        for r in flagged:
            print(f"{r['key'][:43]:<44}{r['t_baseline_us']:>12.1f}{r['t_hw_us']:>12.1f}{r['ratio']:>8.2f}  "
                  f"{r['source']} {', '.join(r['flags'])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=None, help="a task tree to grade in self-check with timing")
    parser.add_argument("--board", default=None, help="audit this leaderboard.json instead of running")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per case (default 5)")
    parser.add_argument("-n", dest="workers", type=int, default=2, help="xdist workers (default 2)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--keep", default=None, metavar="DIR",
                        help="grade with DIR as the report directory and keep it")
    parser.add_argument("extra", nargs="*", help="after --: more pytest arguments")
    args = parser.parse_args()
    if bool(args.tasks) == bool(args.board):
        parser.error("give exactly one of --tasks and --board")
    if args.board:
        board = json.loads(Path(args.board).read_text())
    else:
        with contextlib.ExitStack() as stack:
            tmp = args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="cannbench-anchors-"))
            Path(tmp).mkdir(parents=True, exist_ok=True)
            wall = run(Path(args.tasks).resolve(), Path(tmp), args.repeat, args.workers, args.extra)
            board = json.loads((Path(tmp) / "leaderboard.json").read_text())
        print(f"graded in {wall:.0f} s")
    result = audit(board)
    show(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

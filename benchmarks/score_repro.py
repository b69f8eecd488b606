"""Run-to-run reproducibility of the score: the same submission graded three times in one run (issue 20 item 5).

Usage: python benchmarks/score_repro.py [--tasks tasks] [--source examples/cpp_cpu] [--runs n2,n2,serial]
                                        [--keep DIR] [--json OUT] [-- extra pytest arguments, e.g. -k "exp or softplus"]

Grades ``--source`` on ``--tasks`` (the README's main job) once per entry of ``--runs`` (``n2``: ``-n 2``;
``serial``: one process; a suffix ``:off`` also passes ``--cann-timing-isolation off``, so
``--runs n2,n2:off,n2,n2:off`` measures the quiet-window fence), one after the other on the same machine, each
with its own report directory and the same ``--cann-seed`` (the same inputs), then compares the leaderboards side
by side:

* per operator: the score of every run and the largest difference, relative to the mean;
* per case: the HAP of every run and its spread;
* the total of every run;
* the share of operator pairs whose order flips between two runs (any pair of runs);
* the timing budget spent: seconds of timing work per run, waits for the other worker excluded (the sum of the
  cases' ``repeat.spent_s``), the timed calls used, and the wall time of each session.
* every case that did not pass in a run, with its failure: for an honest submission each one is a flake to explain
  (``--keep DIR`` keeps the runs' report directories, logs included, to read them).

The figures are ratios measured in one run: a loaded machine moves all three runs, and only their differences
are reported. Prints a table; ``--json PATH`` also writes the raw figures.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def grade(tasks: Path, source: Path, mode: str, out: Path, extra: list[str]) -> tuple[dict[str, Any], float]:
    """One grading session; its leaderboard and wall seconds."""
    args = [sys.executable, "-m", "pytest", f"--cann-tasks={tasks}", f"--cann-source={source}", "-q",
            "-p", "no:cacheprovider", f"--cann-report-dir={out}", "--cann-seed=0", "--rootdir", str(out)]
    workers, _, isolation = mode.partition(":")
    if workers == "n2":
        args += ["-n", "2"]
    elif workers != "serial":
        raise SystemExit(f"unknown run mode {mode!r} (n2 or serial, with :off for --cann-timing-isolation off)")
    if isolation:
        args += ["-o", f"cann_timing_isolation={isolation}"]
    start = time.monotonic()
    proc = subprocess.run(args + extra, cwd=out, capture_output=True, text=True)
    wall = time.monotonic() - start
    board_path = out / "leaderboard.json"
    if not board_path.is_file():
        raise SystemExit(f"{mode} run wrote no leaderboard (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                         f"{proc.stderr[-3000:]}")
    return json.loads(board_path.read_text()), wall


def summary(boards: list[dict[str, Any]], labels: list[str], walls: list[float]) -> dict[str, Any]:
    """Side-by-side figures of several leaderboards of the same submission."""
    ops = sorted({op["rel_path"] for b in boards for op in b["operators"]})
    scores = {rel: [next((op["score"] for op in b["operators"] if op["rel_path"] == rel), None) for b in boards]
              for rel in ops}
    per_op = {}
    for rel, values in scores.items():
        known = [v for v in values if v is not None]
        mean = statistics.mean(known) if known else 0.0
        per_op[rel] = {"scores": values, "max_diff": max(known) - min(known) if known else None,
                       "max_rel_diff": (max(known) - min(known)) / mean if known and mean else None}
    cases: dict[str, list[Any]] = {}
    for b in boards:
        for op in b["operators"]:
            for c in op["cases"]:
                cases.setdefault(c["key"], []).append(c.get("hap"))
    per_case = {k: {"haps": v, "spread": (max(x for x in v if x is not None) - min(x for x in v if x is not None))
                    if any(x is not None for x in v) else None} for k, v in sorted(cases.items())}
    flips, pairs = 0, 0
    for a, b in itertools.combinations(ops, 2):
        signs = {(sa > sb) - (sa < sb) for sa, sb in zip(scores[a], scores[b]) if sa is not None and sb is not None}
        signs.discard(0)
        pairs += 1
        flips += len(signs) > 1
    spent = [sum(float((c.get("timing") or {}).get("repeat", {}).get("spent_s") or 0.0)
                 for op in b["operators"] for c in op["cases"]) for b in boards]
    calls = [sum(int(c.get("timed_calls") or 0) for op in b["operators"] for c in op["cases"]) for b in boards]
    return {"runs": labels, "totals": [b["total_score"] for b in boards], "wall_s": walls, "timing_s": spent,
            "timed_calls": calls, "operators": per_op, "cases": per_case,
            "order_flips": {"pairs": pairs, "flipped": flips, "share": flips / pairs if pairs else 0.0},
            "degenerate_anchors": [(b.get("degenerate_anchors") or {}).get("count") for b in boards],
            "failed": [[(c["key"], c.get("failure_type") or c.get("status"), c.get("message") or "")
                        for op in b["operators"] for c in op["cases"] if c.get("status") not in ("passed", "missing")]
                       for b in boards]}


def show(result: dict[str, Any]) -> None:
    labels = result["runs"]
    print("operator" + "".join(f"{label:>12}" for label in labels) + f"{'max diff':>10}{'rel':>8}")
    for rel, entry in result["operators"].items():
        cells = "".join(f"{v:>12.2f}" if v is not None else f"{'-':>12}" for v in entry["scores"])
        rel_diff = f"{entry['max_rel_diff']:>8.1%}" if entry["max_rel_diff"] is not None else f"{'-':>8}"
        print(f"{rel:<30}"[:30] + cells + f"{entry['max_diff'] or 0:>10.2f}{rel_diff}")
    print("total   " + "".join(f"{v:>12.2f}" for v in result["totals"]))
    worst = max(result["cases"].items(), key=lambda kv: kv[1]["spread"] or 0.0, default=None)
    if worst is not None:
        print(f"largest case HAP spread: {worst[0]} {worst[1]['haps']}")
    flips = result["order_flips"]
    print(f"operator pairs whose order flips between runs: {flips['flipped']}/{flips['pairs']} "
          f"({flips['share']:.1%})")
    print("timing seconds per run: " + ", ".join(f"{label} {s:.1f}" for label, s in zip(labels, result["timing_s"])))
    print("timed calls per run:    " + ", ".join(f"{label} {n}" for label, n in zip(labels, result["timed_calls"])))
    print("wall seconds per run:   " + ", ".join(f"{label} {s:.0f}" for label, s in zip(labels, result["wall_s"])))
    print(f"degenerate anchors per run: {result['degenerate_anchors']}")
    for label, failed in zip(labels, result["failed"]):
        for key, kind, message in failed:  # an honest submission's failure that another run passed is a flake
            print(f"{label} failed {key}: {kind}: {message[:300]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=str(ROOT / "tasks"))
    parser.add_argument("--source", default=str(ROOT / "examples" / "cpp_cpu"),
                        help="a submission directory (build.sh, or a prebuilt dist/)")
    parser.add_argument("--runs", default="n2,n2,serial")
    parser.add_argument("--json", default=None)
    parser.add_argument("--keep", default=None, metavar="DIR",
                        help="write each run's report directory under DIR and keep it (default: a temporary one)")
    parser.add_argument("extra", nargs="*", help="after --: more pytest arguments for every run")
    args = parser.parse_args()
    tasks, source = Path(args.tasks).resolve(), Path(args.source).resolve()
    modes = args.runs.split(",")
    boards, walls = [], []
    with contextlib.ExitStack() as stack:
        tmp = args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="cannbench-repro-"))
        for i, mode in enumerate(modes):
            out = Path(tmp) / f"run{i}-{mode.replace(':', '-')}"
            out.mkdir(parents=True)
            board, wall = grade(tasks, source, mode, out, args.extra)
            boards.append(board)
            walls.append(wall)
            print(f"run {i + 1}/{len(modes)} ({mode}): total {board['total_score']:.2f} in {wall:.0f} s", flush=True)
    result = summary(boards, [f"{m}#{i + 1}" for i, m in enumerate(modes)], walls)
    show(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

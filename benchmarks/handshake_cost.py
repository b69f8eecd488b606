"""What the streamed handshakes cost the candidate's CPU against the baseline worker's, window by window.

Usage: python benchmarks/handshake_cost.py REPORT_DIR_OR_RESULTS_JSONL [...]

Every timed window records the judge's CPU-time check of the candidate (``timing.cpu_floor``: accounted, used
and allowed ms, the handshakes, the allowance per handshake and the baseline worker's unaccounted CPU per
handshake it was calibrated on, docs/timing.md). This reads the results of one or more runs and prints, per run:
the distribution of the candidate's and the baseline's unaccounted CPU per handshake in the same windows, their
ratio, and how many windows the fixed allowance (``stats.HANDSHAKE_CPU_S``) and the calibrated one would refuse
(short of the floor) - the evidence for ``HANDSHAKE_MARGIN`` and ``HANDSHAKE_CAP_S``. Reads reports only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def windows(path: Path) -> list[dict]:
    """The cpu_floor entries of every timed case in a run's results.jsonl (or its report directory)."""
    results = path / "results.jsonl" if path.is_dir() else path
    found = []
    for line in results.read_text().splitlines():
        row = json.loads(line)
        timing = (row.get("outcome") or {}).get("timing") or {}
        for entry in timing.get("cpu_floor") or []:
            found.append({**entry, "case": row["outcome"]["key"]})
    return found


def quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    pick = [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.5, 0.9, 0.99)]
    return f"median {pick[0]:.3f}  p90 {pick[1]:.3f}  p99 {pick[2]:.3f}  max {ordered[-1]:.3f}"


def summary(found: list[dict]) -> list[str]:
    from pytest_cannbench.timing.stats import HANDSHAKE_CPU_S

    cand, base, ratio = [], [], []
    fixed_refused, calibrated_refused, worst = 0, 0, (0.0, "")
    for w in found:
        h = w.get("handshakes") or 0
        if not h:
            continue
        c = max(0.0, w["used_ms"] - w["accounted_ms"]) / h
        cand.append(c)
        # the recorded slack with the fixed allowance in place of the calibrated one (older runs recorded none)
        fixed = w["slack_ms"] - (w.get("allowance_ms", HANDSHAKE_CPU_S * 1e3) - HANDSHAKE_CPU_S * 1e3) * h
        fixed_refused += w["accounted_ms"] < w["used_ms"] - fixed
        calibrated_refused += w["accounted_ms"] < w["used_ms"] - w["slack_ms"]
        use = (w["used_ms"] - w["accounted_ms"]) / w["slack_ms"] if w["slack_ms"] else 0.0
        worst = max(worst, (use, w["case"]))
        if w.get("baseline_ms") is not None:
            base.append(w["baseline_ms"])
            if w["baseline_ms"] > 0:
                ratio.append(c / w["baseline_ms"])
    lines = [f"windows {len(found)} (with a streamed baseline: {len(base)})",
             f"candidate unaccounted ms/handshake: {quantiles(cand)}",
             f"baseline  unaccounted ms/handshake: {quantiles(base)}",
             f"candidate / baseline, same window:  {quantiles(ratio)}"
             + (f"  (mean {statistics.fmean(ratio):.2f})" if ratio else ""),
             f"short of the floor: fixed allowance {fixed_refused}, calibrated {calibrated_refused}",
             f"largest share of the allowed slack used: {worst[0]:.2f} ({worst[1]})"]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="report directories or results.jsonl files")
    args = parser.parse_args()
    for run in args.runs:
        print(f"== {run}")
        for line in summary(windows(run)):
            print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

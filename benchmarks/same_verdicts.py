"""Do two runs agree verdict for verdict? Statuses and every output's MERE/MARE, case by case, bit for bit.

Usage: python benchmarks/same_verdicts.py BEFORE/results.jsonl AFTER/results.jsonl [--ignore-harness-errors]

A speed-up of the grader must not move a single verdict: this compares each case's status and failure type and,
output by output, the float fields of its accuracy record (MERE, MARE, the error maxima and the region counts)
with ``==``, not a tolerance. ``--ignore-harness-errors`` leaves out cases where either run has a harness-side
error (a golden worker killed by a machine-wide memory shortage says nothing about the verdict code). Exit 1 on
any difference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

FIELDS = ("passed", "rule", "mere", "mare", "max_abs_err", "mean_abs_err", "native_mere", "normal_mere",
          "native_normal_mere", "mismatch_count", "small_value_err", "cancel_err", "normal_err", "total_count")
HARNESS = {"golden_error", "worker_crash", "harness_error", "session_interrupted"}


def load(path: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for line in path.read_text().splitlines():
        data = json.loads(line).get("outcome")
        if isinstance(data, dict) and "key" in data:
            out[data["key"]] = data
    return out


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    found = [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in ("status", "failure_type") if a.get(k) != b.get(k)]
    acc_a, acc_b = a.get("accuracy") or [], b.get("accuracy") or []
    if len(acc_a) != len(acc_b):
        return [*found, f"{len(acc_a)} outputs != {len(acc_b)}"]
    for i, (x, y) in enumerate(zip(acc_a, acc_b)):
        found += [f"output {i} {k}: {x.get(k)!r} != {y.get(k)!r}" for k in FIELDS if x.get(k) != y.get(k)]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--ignore-harness-errors", action="store_true")
    args = parser.parse_args()
    before, after = load(args.before), load(args.after)
    keys = sorted(set(before) | set(after))
    skipped, bad, same = [], 0, 0
    for key in keys:
        a, b = before.get(key), after.get(key)
        if a is None or b is None:
            print(f"{key}: only in {'after' if a is None else 'before'}")
            bad += 1
            continue
        if args.ignore_harness_errors and (a.get("failure_type") in HARNESS or b.get("failure_type") in HARNESS):
            skipped.append(key)
            continue
        diff = differences(a, b)
        if diff:
            bad += 1
            print(f"{key}: " + "; ".join(diff[:6]))
        else:
            same += 1
    print(f"{same} cases identical, {bad} differ, {len(skipped)} left out (harness errors: {', '.join(skipped)})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

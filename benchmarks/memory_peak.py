"""Run a command and sample the summed PSS of its whole process tree: the figure a memory plan must stay under.

PSS (proportional set size) charges a shared page to each sharer by its share, so the sum over the tree is what
the tree really holds (RSS would count torch's shared libraries once per process). Usage::

    python benchmarks/memory_peak.py [--interval 1] [--out peak.json] -- pytest ...

Prints the peak, its time and the process count at the peak; ``--out`` also writes every sample (a sample that
could not be a new peak holds the tree's summed RSS, an upper bound of its PSS: :mod:`tree_memory`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from tree_memory import PeakSampler


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    start = time.monotonic()
    proc = subprocess.Popen(command)
    sampler = PeakSampler(proc.pid, interval=args.interval, keep=bool(args.out))
    while proc.poll() is None:
        sampler.sample()
        time.sleep(args.interval)
    for pss, what in sampler.at_peak:
        print(f"memory_peak:   {pss / 2**30:6.2f} GiB  {what}", file=sys.stderr)
    print(f"memory_peak: rc {proc.returncode}, {time.monotonic() - start:.0f} s, peak PSS "
          f"{sampler.peak / 2**30:.2f} GiB at {sampler.peak_at} s over {sampler.peak_procs} processes "
          f"({sampler.read} of {sampler.samples} samples read PSS)", file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps({"rc": proc.returncode, "peak_bytes": sampler.peak,
                                        "peak_at_s": sampler.peak_at, "at_peak": sampler.at_peak,
                                        "samples": sampler.history}))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

"""Run a command and sample the summed PSS of its whole process tree: the figure a memory plan must stay under.

PSS (proportional set size) charges a shared page to each sharer by its share, so the sum over the tree is what
the tree really holds (RSS would count torch's shared libraries once per process). Usage::

    python benchmarks/memory_peak.py [--interval 1] [--out peak.json] -- pytest ...

Prints the peak, its time and the process count at the peak; ``--out`` also writes every sample.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def children_map() -> dict[int, list[int]]:
    """pid -> child pids, from /proc/*/stat."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def tree(root: int) -> list[int]:
    kids, todo, seen = children_map(), [root], []
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo.extend(kids.get(pid, []))
    return seen


def pss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def name(pid: int) -> str:
    """A short label: the module a worker runs (``-m x.y``), else the command."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in argv if w]
    if "-m" in words and words.index("-m") + 1 < len(words):
        return words[words.index("-m") + 1].rsplit(".", 1)[-1]
    return " ".join(words)[:60]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    start = time.monotonic()
    proc = subprocess.Popen(command)
    samples: list[tuple[float, int, int]] = []
    at_peak: list[tuple[int, str]] = []  # (PSS, what) of each process at the peak
    while proc.poll() is None:
        each = [(pss_bytes(p), name(p)) for p in tree(proc.pid)]
        samples.append((round(time.monotonic() - start, 1), sum(b for b, _ in each), len(each)))
        if samples[-1][1] >= max(s[1] for s in samples):
            at_peak = sorted(each, reverse=True)
        time.sleep(args.interval)
    peak = max(samples, key=lambda s: s[1]) if samples else (0.0, 0, 0)
    for pss, what in at_peak[:6]:
        print(f"memory_peak:   {pss / 2**30:6.2f} GiB  {what}", file=sys.stderr)
    print(f"memory_peak: rc {proc.returncode}, {time.monotonic() - start:.0f} s, peak PSS "
          f"{peak[1] / 2**30:.2f} GiB at {peak[0]} s over {peak[2]} processes", file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps({"rc": proc.returncode, "peak_bytes": peak[1], "peak_at_s": peak[0],
                                        "at_peak": at_peak, "samples": samples}))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

"""The peak summed PSS of a process tree, sampled without bending the run it measures.

PSS (proportional set size) charges a shared page to each sharer by its share, so the sum over a tree is what the
tree really holds (RSS counts torch's shared libraries once per process). Reading it is not free:
``/proc/<pid>/smaps_rollup`` walks every page-table entry of the process. On the 2-core development VM one sample
of a grading tree holding 1.9 GiB cost 63 ms of CPU, so sampling every 0.2 s took about 30% of a core from the
run being measured, and more as the tree grew: a ``-n 2`` run, which keeps both cores busy, lost that time, while
a single-process harness measured beside it did not (the sampler ran on its idle core).

:class:`PeakSampler` reads ``/proc/<pid>/statm`` first, a counter the kernel keeps (no page walk). A process's PSS
never exceeds its RSS, so while the tree's summed RSS is not above the peak PSS seen so far, no sample can be a
new peak, and PSS is not read. That bound is loose where many processes share torch's libraries (RSS counts them
once per process): on the README main job, ten processes, it still read PSS at 1543 of 1611 ticks, 219 s of CPU in
a 590 s run. So above it PSS is read at every tick whose summed RSS is the highest yet (the tree is growing: the
moment a peak forms) and otherwise at most once a second (``REREAD_S``). A peak held under a second while the
tree's RSS is below its own earlier high can be missed; every figure says how many ticks read PSS. What the
sampler itself spent is reported (``cpu_s``), so a figure can say what its measurement cost.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

INTERVAL_S = 0.2
PAGE = os.sysconf("SC_PAGE_SIZE")
RSS_SLACK = 4 << 20  # per process: statm's counters are per-CPU batched and may lag a few hundred KiB
REREAD_S = 1.0  # below the tree's highest RSS so far, PSS is read at most this often


def children_map() -> dict[int, list[int]]:
    """pid -> child pids, from /proc/*/stat."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def tree(root: int, include_root: bool = True) -> list[int]:
    """``root``'s descendants (and ``root`` itself unless ``include_root`` is false)."""
    kids, todo, seen = children_map(), [root], []
    while todo:
        pid = todo.pop()
        if pid != root or include_root:
            seen.append(pid)
        todo.extend(kids.get(pid, []))
    return seen


def rss_bytes(pid: int) -> int:
    """Resident set size from /proc/<pid>/statm: the kernel's counters, read without walking page tables."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def pss_bytes(pid: int) -> int:
    """Proportional set size from /proc/<pid>/smaps_rollup (a walk of every page-table entry)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
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


class PeakSampler(threading.Thread):
    """The peak summed PSS of ``root``'s tree, ticking every ``interval`` seconds, reading PSS as the module says.

    ``at_peak``: the largest processes at the peak, (bytes, label). ``samples``: ticks taken; ``read``: ticks that
    read PSS; ``cpu_s``: the sampler thread's own CPU time. ``history`` (when ``keep``): (seconds since start,
    summed bytes, processes) for every tick, RSS where PSS was not read (an upper bound of it).
    """

    def __init__(self, root: int, include_root: bool = True, interval: float = INTERVAL_S,
                 keep: bool = False, reread_s: float = REREAD_S) -> None:
        super().__init__(daemon=True)
        self.root, self.include_root, self.interval, self.keep = root, include_root, interval, keep
        self.reread_s, self._rss_high, self._last_read = reread_s, 0, float("-inf")
        self.peak, self.peak_procs, self.peak_at, self.samples, self.read, self.cpu_s = 0, 0, 0.0, 0, 0, 0.0
        self.at_peak: list[tuple[int, str]] = []
        self.history: list[tuple[float, int, int]] = []
        self.stop = threading.Event()
        self._start = time.monotonic()

    def sample(self) -> None:
        """One tick (also callable directly, without the thread)."""
        pids = tree(self.root, self.include_root)
        rss = sum(rss_bytes(p) for p in pids)
        self.samples += 1
        at = round(time.monotonic() - self._start, 1)
        now = time.monotonic()
        possible = rss > self.peak - RSS_SLACK * len(pids)  # every process's PSS <= its RSS
        rising = rss > self._rss_high  # the tree holds more than at any tick before
        self._rss_high = max(self._rss_high, rss)
        if not possible or not (rising or now - self._last_read >= self.reread_s):
            if self.keep:
                self.history.append((at, rss, len(pids)))
            return
        self._last_read = now
        self.read += 1
        each = [(pss_bytes(p), p) for p in pids]
        total = sum(b for b, _ in each)
        if self.keep:
            self.history.append((at, total, len(pids)))
        if total > self.peak:
            self.peak, self.peak_procs, self.peak_at = total, len(pids), at
            self.at_peak = [(b, name(p)) for b, p in sorted(each, reverse=True)[:6]]

    def run(self) -> None:
        start = time.thread_time()
        while not self.stop.wait(self.interval):
            self.sample()
        self.cpu_s = time.thread_time() - start

    def finish(self) -> None:
        self.stop.set()
        self.join()

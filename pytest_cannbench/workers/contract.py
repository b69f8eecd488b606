"""The output contract the judge checks itself, from outside the frozen candidate worker.

Nothing here asks the worker: thread and child-process counts and per-thread CPU time come from ``/proc``, input
bytes from the shared region the judge wrote. So a call that left work running (``async_escape``), wrote into its
inputs (``input_mutated``) or claims a time its threads could not have spent is caught whatever it forged.
"""

from __future__ import annotations

import os
from typing import Any

from pytest_cannbench.workers.tensor_wire import Region

Snapshot = tuple[int, frozenset[int]]  # (thread count, child pids)


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each of the worker's threads, read by the judge from /proc (the worker cannot forge
    it): the scheduler's nanosecond run times where available, else user + system ticks (10 ms resolution).
    A thread that ends between two readings drops out, which can only lower the plausibility floor: the floor's
    total comes from ``workers.cpu_meter``, which keeps it; these per-thread readings give the busiest thread."""
    out: dict[int, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    tick = os.sysconf("SC_CLK_TCK")
    for name in tids:
        try:
            with open(f"/proc/{pid}/task/{name}/schedstat") as fh:
                out[int(name)] = int(fh.read().split()[0]) / 1e9
            continue
        except (OSError, ValueError, IndexError):
            pass
        try:
            with open(f"/proc/{pid}/task/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            out[int(name)] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            continue
    return out


def cpu_used(before: dict[int, float], after: dict[int, float]) -> tuple[float | None, float | None]:
    """``(all threads, busiest thread)`` CPU seconds between two :func:`thread_cpu` readings. One thread can
    not run longer than the wall time it was given, so the busiest thread bounds the batch from below
    whatever the number of threads; a thread born in between counts from zero."""
    if not after:
        return None, None
    used = [max(0.0, cpu - before.get(tid, 0.0)) for tid, cpu in after.items()]
    return sum(used), max(used)


def process_snapshot(pid: int) -> Snapshot:
    """The worker's thread count and child processes, read by the judge from /proc (the worker cannot lie)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, frozenset()
    children: set[int] = set()
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                children.update(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return len(tids), frozenset(children)


def escaped(before: Snapshot, after: Snapshot) -> str:
    """Work the call left running: threads or child processes that did not exist when it began."""
    problems = []
    if after[0] > before[0]:
        problems.append(f"{after[0] - before[0]} new thread(s)")
    if after[1] - before[1]:
        problems.append(f"{len(after[1] - before[1])} new child process(es)")
    return " and ".join(problems)


def mutated_inputs(region: Region, args: dict[str, Any], kwargs: dict[str, Any]) -> list[str]:
    """Inputs whose bytes in the region differ from what the judge wrote (compared in the judge, after the call)."""
    changed = []
    for name, (kind, value) in args.items():
        if kind == "v":
            continue
        slots = [value] if kind == "t" else value
        originals = [kwargs[name]] if kind == "t" else list(kwargs[name])
        for slot, original in zip(slots, originals):
            if slot is None or original is None or not slot["nbytes"]:
                continue
            if not _same_bytes(region, slot["offset"], slot["nbytes"], original):
                changed.append(name)
                break
    return changed


def _same_bytes(region: Region, offset: int, nbytes: int, original: Any) -> bool:
    """Byte equality of a region slot and the tensor the judge wrote there, compared 8 bytes at a time
    (a uint8 comparison is 6x slower: 2.2 ms against 0.35 ms for 4 MiB here)."""
    import torch

    then = original.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
    words = nbytes // 8 * 8
    if words:
        now = torch.frombuffer(region.mm, dtype=torch.int64, count=words // 8, offset=offset)
        if not torch.equal(now, then[:words].view(torch.int64)):
            return False
    if nbytes > words:
        tail = torch.frombuffer(region.mm, dtype=torch.uint8, count=nbytes - words, offset=offset + words)
        return torch.equal(tail, then[words:])
    return True

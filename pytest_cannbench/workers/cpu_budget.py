"""The timing thread budget, enforced by the kernel: candidate and baseline workers run on ``threads`` CPUs.

``--cann-timing-threads`` sets the worker's intra-op threads (``torch.set_num_threads``, ``OMP_NUM_THREADS``),
which a submission's own code is free to ignore: a kernel that fans out to eight threads a call would time 8x
faster on an 8-core host than its one-thread baseline. So the judge spawns each candidate and baseline worker
with a CPU affinity of exactly ``threads`` CPUs (:func:`budget_cpus`, chosen per xdist worker so that two judges'
workers do not share where the CPUs allow, within the CPUs the judge itself may use), inherited by every thread
and process the worker starts; the containment filter (``guard.containment``, installed before the submission is
imported) refuses ``sched_setaffinity`` afterwards, so the submission cannot widen it. Any number of threads then
shares those CPUs: no speed-up beyond the budget. The judge reads every thread's affinity after each call and
batch (:func:`widened`) as a second line, for a worker whose filter could not be installed.

Candidate and baseline of one judge share its CPUs: they run one at a time (the other is frozen). The golden
worker (references, not timed) keeps the judge's CPUs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

MAX_SLOTS = 4096


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on, in order (all of them where affinity is unknown)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def budget_cpus(threads: int, index: int, allowed: list[int] | None = None) -> tuple[int, ...]:
    """``threads`` CPUs of ``allowed`` for the judge of xdist index ``index``: consecutive blocks, judge ``i``
    from ``i * threads`` on, wrapping around (judges share CPUs only when there are fewer than their budgets
    need). All of ``allowed`` when the budget is that large."""
    cpus = sorted(allowed if allowed is not None else allowed_cpus())
    if threads <= 0 or threads >= len(cpus):
        return tuple(cpus)
    start = (index * threads) % len(cpus)
    return tuple(sorted(cpus[(start + k) % len(cpus)] for k in range(threads)))


def claim_slot(directory: Path, prefix: str = "judge-slot") -> tuple[int, IO[str]]:
    """The lowest judge index no live process on this host holds, for a judge that is not an xdist worker (a
    service's judge actor): its workers' CPU block is :func:`budget_cpus` of that index, so judges of one host,
    of one service or of several, do not pin their workers to the same CPUs. The index is held by an exclusive
    ``flock`` on ``directory/<prefix>-<index>.lock`` for as long as the returned file stays open; the kernel
    releases it when the process ends, however it ends."""
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(MAX_SLOTS):
        handle = open(directory / f"{prefix}-{index}.lock", "a")  # noqa: SIM115 - held open: the claim
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        return index, handle
    raise RuntimeError(f"no free judge slot among {MAX_SLOTS} in {directory}")


@contextlib.contextmanager
def pinned(cpus: tuple[int, ...]) -> Iterator[str]:
    """Run the block (a spawn) with the calling thread's affinity set to ``cpus``: a child forked there inherits
    it before it runs a single instruction, so no thread of the worker is ever outside it. Yields "" or why the
    affinity could not be set (the budget is then not enforced)."""
    if not cpus:
        yield "no CPU budget"
        return
    if not hasattr(os, "sched_setaffinity"):
        yield "sched_setaffinity is not available on this platform"
        return
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as exc:
        yield f"sched_setaffinity({sorted(cpus)}): {exc.strerror}"
        return
    try:
        yield ""
    finally:
        os.sched_setaffinity(0, before)


def parse_list(text: str) -> set[int]:
    """A kernel CPU list ("0-3,6") as a set."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def thread_affinities(pid: int) -> dict[int, set[int]]:
    """Each thread's allowed CPUs, read by the judge from /proc (``Cpus_allowed_list``)."""
    found: dict[int, set[int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as fh:
                for line in fh:
                    if line.startswith("Cpus_allowed_list:"):
                        found[int(tid)] = parse_list(line.split(":", 1)[1])
                        break
        except (OSError, ValueError):
            continue
    return found


def widened(pid: int, cpus: tuple[int, ...]) -> str:
    """The worker's threads allowed outside the budget ``cpus`` (the worker frozen), described; "" if none."""
    if not cpus:
        return ""
    budget = set(cpus)
    wide = {tid: allowed for tid, allowed in thread_affinities(pid).items() if not allowed <= budget}
    if not wide:
        return ""
    tid, allowed = next(iter(sorted(wide.items())))
    return (f"{len(wide)} thread(s) of the worker run outside the timing thread budget (CPUs {format_list(cpus)}), "
            f"e.g. thread {tid} on CPUs {format_list(tuple(allowed))}: the affinity the judge set was widened")


def format_list(cpus: tuple[int, ...] | list[int] | set[int]) -> str:
    """``(0, 1, 2, 5)`` as "0-2,5"."""
    ordered = sorted(cpus)
    runs: list[str] = []
    for cpu in ordered:
        if runs and cpu == int(runs[-1].split("-")[-1]) + 1:
            runs[-1] = f"{runs[-1].split('-')[0]}-{cpu}"
        else:
            runs.append(str(cpu))
    return ",".join(runs)


def describe(threads: int, workers: int, allowed: list[int] | None = None) -> dict[str, object]:
    """How the budget is enforced for this run (the header's words and the board's ``config.cpu_budget``)."""
    cpus = sorted(allowed if allowed is not None else allowed_cpus())
    per_judge = [budget_cpus(threads, i, cpus) for i in range(max(1, workers))]
    shared = len({c for block in per_judge for c in block}) < sum(len(b) for b in per_judge)
    if not hasattr(os, "sched_setaffinity"):
        return {"enforced_by": "nothing", "weak": "no sched_setaffinity on this platform: the thread budget is "
                "only the worker's thread count, which a submission may exceed", "cpus": []}
    whole = threads <= 0 or threads >= len(cpus)
    weak = ""
    if whole:
        weak = (f"the budget ({threads or 'all'} thread(s)) is every CPU the judge may use ({format_list(cpus)}): "
                "a fan-out gains at most that")
    elif shared:
        weak = "fewer CPUs than the judges' budgets need: judges' workers share CPUs"
    return {"enforced_by": "cpu_affinity", "refused_by": "seccomp (sched_setaffinity)",
            "cpus": [format_list(b) for b in per_judge], "weak": weak}


def header_line(threads: int, workers: int, meter: str, allowed: list[int] | None = None) -> str:
    """The session header's line on the thread budget and the CPU meter behind the floor."""
    info = describe(threads, workers, allowed)
    if info["enforced_by"] == "nothing":
        budget = f"timing thread budget NOT ENFORCED ({info['weak']})"
    else:
        blocks = info["cpus"]
        assert isinstance(blocks, list)
        where = "; ".join(f"judge {i}: CPUs {b}" for i, b in enumerate(blocks)) if len(blocks) > 1 \
            else f"CPUs {blocks[0]}"
        budget = (f"timing thread budget enforced by CPU affinity ({where}), which the contained worker cannot widen "
                  "(seccomp refuses sched_setaffinity; the judge also reads every thread's affinity)")
        if info["weak"]:
            budget += f"; note: {info['weak']}"
    if meter in ("perf_task_clock", "cgroup_v1", "cgroup_v2"):
        floor = f"CPU floor from {meter} (exited threads and children kept)"
    else:
        floor = (f"CPU floor WEAKER: {meter} (threads that exit inside a batch are not seen; no perf counter or "
                 "cgroup could be opened)")
    return f"cannbench: {budget}; {floor}"

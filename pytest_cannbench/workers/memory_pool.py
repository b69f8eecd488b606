"""The session's memory pool: the cases in flight reserve their estimated need from one pool of bytes,
and a case the pool cannot hold now waits, first come first served, until the cases before it let go.

Why a pool and not only the memory plan's budgets: the plan (:mod:`.memory_plan`) keeps every process under its
budget, so the session never exceeds the machine, but on a large machine every budget is large and which cases
happen to run at the same moment decided the peak. Official level 1 under ``-n 2`` peaked anywhere between 4.4 and
5.5 GiB on the same code (docs/performance.md, Rounds 10-14): its largest golden (3.3-3.6 GiB) met whatever the other
judge ran. The pool makes the peak a property of the run, not of the schedule.

Its size (:func:`size_pool`): by default the largest case that will run plus, for each other judge, a case at the
third quartile of the needs (``auto``): the largest case runs beside any of three cases in four but never beside
another outlier, and cases of equal size all run at once; never less than the plan's ``MIN_SLOT`` (1 GiB) per
judge, since holding small cases apart saves less than their waits cost (the README main job, every case under
0.5 GiB: 38 s of waits for a pool of 0.54 GiB, Round 15). (The median in its place held back half the cases and
cost official level 1 a sixth of its wall: benchmarks/results/performance-rounds.md, Round 15.) ``machine``: every
judge's whole slot
(the plan's bound alone). Never more than the judges' slots together.

A reservation has a claim (the case's estimated peak) and holds part of it at a time: its golden phase's need while
a golden runs, its candidate phase's between goldens (``MemoryPool.hold``), so the room a large golden leaves while
its candidate runs serves another case. Growing back waits until the pool has room, and the banker's test keeps
the pool safe: a case is admitted, or grows, only if some order still lets every holder reach its claim, so two
cases can never wait for each other; a holder waiting to grow goes before newcomers.

The ledger is one small JSON file per session (the plan's ``pool_file``, made by the controller), changed only under
an exclusive ``flock`` of itself: a list of tickets in arrival order, each with its process, its claim (``None``:
the whole pool, a case that runs alone), what it holds and wants, and whether it is admitted. Any process that looks
admits, in ticket order, every waiting ticket that fits, and stops at the first that does not (no overtaking, so no
starvation); a ticket whose process died (or is a zombie) is dropped. One judge (no xdist) has no file and never
waits.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_cannbench.workers.memory_plan import GIB, MIN_SLOT

POLL_FIRST, POLL_MOST = 0.002, 0.02  # seconds between looks while waiting (doubling)
QUARTILE = 0.75  # the other judges' cases the largest runs beside: up to this quantile of the needs


@dataclass(frozen=True)
class PoolSize:
    """How many bytes the cases in flight may reserve together, and why."""

    bytes: int
    rule: str  # auto | machine | asked
    largest: int = 0  # the largest estimated need among the cases that will run
    quartile: int = 0  # the third quartile of their needs (QUARTILE)
    workers: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        size = f"{self.bytes / GIB:.2f} GiB"
        if self.rule == "auto" and self.bytes == self.workers * MIN_SLOT:
            return f"{size} ({MIN_SLOT / GIB:.0f} GiB per worker: every case is small)"
        if self.rule == "auto":
            return (f"{size} (the largest case, {self.largest / GIB:.2f} GiB, + {self.workers - 1} x a case at "
                    f"the third quartile, {self.quartile / GIB:.2f} GiB)")
        why = "every judge's slot" if self.rule == "machine" else "cann_memory_pool"
        return f"{size} ({why})"


def size_pool(needs: list[int], workers: int, slots: int, mode: str | float) -> PoolSize:
    """The pool for cases of these estimated ``needs`` (those that will run) under ``workers`` judges whose
    slots hold ``slots`` bytes together. ``mode``: ``auto``, ``machine`` or GiB asked."""
    if not isinstance(mode, str):
        return PoolSize(min(slots, int(mode * GIB)), "asked", workers=workers)
    if mode == "machine" or not needs:
        return PoolSize(slots, "machine", workers=workers)
    ordered = sorted(needs)
    largest, quartile = ordered[-1], ordered[math.ceil(QUARTILE * len(ordered)) - 1]
    size = max(workers * MIN_SLOT, largest + (workers - 1) * quartile)
    return PoolSize(min(slots, size), "auto", largest, quartile, workers)


class MemoryPool:
    """One judge's view of the session's pool; ``MemoryPool(None, ...)`` (one judge) never waits. A judge runs one
    case at a time, so it has at most one reservation, the one :meth:`hold` changes."""

    def __init__(self, path: Path | None, capacity: int) -> None:
        self.path = path
        self.capacity = capacity
        self._ticket: int | None = None  # this judge's reservation, while it has one

    @contextlib.contextmanager
    def reserve(self, claim: int | None, first: int | None = None) -> Iterator[float]:
        """Reserve up to ``claim`` bytes for the block (``None``: the whole pool, once no other case holds any),
        holding ``first`` of them from the start (default: all); yields the seconds waited for them."""
        if self.path is None:
            yield 0.0
            return
        if self._ticket is not None:
            raise RuntimeError("a judge reserves for one case at a time")
        first = claim if claim is None or first is None else min(first, claim)
        started = time.monotonic()
        ticket = self._change(lambda ledger: _enqueue(ledger, claim, first))
        try:
            self._wait(lambda ledger: _admitted(ledger, ticket, self.capacity))
            self._ticket = ticket
            yield time.monotonic() - started
        finally:
            self._ticket = None
            self._change(lambda ledger: _leave(ledger, ticket))

    def hold(self, nbytes: int, waiting: Callable[[], object] | None = None) -> float:
        """Hold ``nbytes`` (at most the claim) of this judge's reservation from now on: less at once, more once
        the pool has room and stays safe (another growth or a new case cannot then be stuck); the seconds waited.
        ``waiting`` is called between looks: a judge inside accuracy work lets a timed window pass there, since
        the case it waits for may be the window's (the timing fence is taken after the pool, never before).
        Nothing to do without a reservation or for one of the whole pool."""
        ticket = self._ticket
        if self.path is None or ticket is None:
            return 0.0
        started = time.monotonic()
        self._wait(lambda ledger: _grown(ledger, ticket, nbytes, self.capacity), waiting)
        return time.monotonic() - started

    def _wait(self, step: Any, waiting: Callable[[], object] | None = None) -> None:
        pause = POLL_FIRST
        while not self._change(step):
            if waiting is not None:
                waiting()
            time.sleep(pause)
            pause = min(POLL_MOST, pause * 2)

    def _change(self, step: Any) -> Any:
        """Run ``step`` on the ledger under its lock and write it back; what ``step`` returns."""
        assert self.path is not None
        with open(self.path, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                fh.seek(0)
                text = fh.read()
                ledger = json.loads(text) if text.strip() else {"next": 0, "tickets": []}
                answer = step(ledger)
                fh.seek(0)
                fh.truncate()
                fh.write(json.dumps(ledger))
                fh.flush()
                return answer
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


# The ledger's tickets: {"ticket", "pid", "claim" (None: the whole pool), "held" (what it holds now), "want" (what
# it asks to hold: above "held" while it waits to grow, or to be admitted), "admitted"}.

def _enqueue(ledger: dict[str, Any], claim: int | None, first: int | None) -> int:
    ticket = int(ledger["next"])
    ledger["next"] = ticket + 1
    ledger["tickets"].append({"ticket": ticket, "pid": os.getpid(), "claim": claim, "held": 0, "want": first,
                              "admitted": False})
    return ticket


def _leave(ledger: dict[str, Any], ticket: int) -> None:
    ledger["tickets"] = [t for t in ledger["tickets"] if t["ticket"] != ticket]


def _safe(holders: list[dict[str, Any]], capacity: int) -> bool:
    """The banker's test for one resource: some order lets every holder grow to its claim, each in turn once the
    ones before it finished (smallest remaining need first is such an order whenever one exists)."""
    room = capacity - sum(int(t["held"]) for t in holders)
    for t in sorted(holders, key=lambda t: int(t["claim"]) - int(t["held"])):
        if int(t["claim"]) - int(t["held"]) > room:
            return False
        room += int(t["held"])
    return True


def _admitted(ledger: dict[str, Any], ticket: int, capacity: int) -> bool:
    """Drop the tickets of dead processes, admit what fits in arrival order, and say whether ``ticket`` holds.

    A newcomer must fit beside what every holder holds or waits to grow to (growth goes first, or a case between
    its golden and its second pass could wait for ever), and leave a safe state. Nothing held: the first waiting
    ticket is admitted whatever its size (a case over the pool runs, alone)."""
    tickets = _live(ledger)
    holders = [t for t in tickets if t["admitted"]]
    for t in tickets:
        if t["admitted"]:
            continue
        if holders and (t["claim"] is None or any(h["claim"] is None for h in holders)
                        or sum(max(int(h["held"]), int(h["want"])) for h in holders) + int(t["want"]) > capacity
                        or not _safe([*holders, {**t, "held": t["want"]}], capacity)):
            break  # the first that cannot start: the ones behind it wait too
        t["admitted"], t["held"] = True, t["want"]
        holders.append(t)
    return any(t["ticket"] == ticket and t["admitted"] for t in tickets)


def _grown(ledger: dict[str, Any], ticket: int, nbytes: int, capacity: int) -> bool:
    """Set what ``ticket`` holds to ``nbytes`` (capped at its claim) if the pool allows it now; whether it did."""
    tickets = _live(ledger)
    me = next(t for t in tickets if t["ticket"] == ticket)
    if me["claim"] is None:
        return True
    nbytes = min(nbytes, int(me["claim"]))
    me["want"] = nbytes
    others = [t for t in tickets if t["admitted"] and t is not me]
    if nbytes <= int(me["held"]) or not others or (
            sum(int(t["held"]) for t in others) + nbytes <= capacity
            and _safe([*others, {**me, "held": nbytes}], capacity)):
        me["held"] = nbytes
        return True
    return False


def _live(ledger: dict[str, Any]) -> list[dict[str, Any]]:
    """The ledger's tickets without those of dead processes (dropped from the ledger too)."""
    ledger["tickets"] = [t for t in ledger["tickets"] if _alive(int(t["pid"]))]
    return ledger["tickets"]


def _alive(pid: int) -> bool:
    """Whether a ticket's process still runs: not gone, and not a zombie its parent has yet to reap (an xdist
    worker that crashed stays one until execnet notices, and its ticket would hold the pool meanwhile)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc to read: only whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat[stat.rindex(")") + 2:][:1] not in ("Z", "X")  # the state follows "(comm) "

"""Which case an xdist worker gets next, from the cases' estimated memory needs.

xdist's ``load`` scheduling hands cases out in collection order, in chunks. The session's memory pool
(:mod:`.memory_pool`) then makes a case wait while the cases in flight leave it no room. Official level 1 lists
each operator's largest cases last, so both judges kept reaching large cases together: 26-39 s of ``memory_wait``
in a 100 s accuracy-only run (benchmarks/results/performance-rounds.md, Round 16), time in which a small case could
have run.

The controller can hand out cases by need, but under xdist it collects nothing: the judges know the needs. Each
judge writes them at the end of its collection to a file beside the pool's ledger (:func:`write_needs`, before
xdist tells the controller its collection is complete); the controller's scheduler reads it once
(:func:`read_needs`). A missing or unreadable file means no needs: collection order, and the pool still keeps the
bound. The policy is :func:`pick`, kept free of xdist so it can be tested alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cannbench.atomic import write_atomic


@dataclass(frozen=True)
class CaseNeeds:
    """What the controller knows of the session's cases: the pool's size and each case's claim on it (bytes)."""

    pool: int
    needs: dict[str, int] = field(default_factory=dict)  # nodeid -> estimated peak; a case that runs alone: pool

    def of(self, nodeid: str) -> int:
        return self.needs.get(nodeid, 0)


def needs_path(pool_file: str) -> Path:
    return Path(pool_file + ".needs")


def write_needs(pool_file: str, needs: CaseNeeds) -> None:
    """Every judge writes the same file (they collect the same cases); the rename makes the last one win whole."""
    write_atomic(needs_path(pool_file), json.dumps({"pool": needs.pool, "needs": needs.needs}))


def read_needs(pool_file: str | None) -> CaseNeeds | None:
    """The needs the judges wrote, or None (no pool file, not written, or not what :func:`write_needs` writes)."""
    if not pool_file:
        return None
    try:
        data = json.loads(needs_path(pool_file).read_text())
        pool, needs = int(data["pool"]), {str(k): int(v) for k, v in data["needs"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return CaseNeeds(pool, needs)


def largest_first(needs: Sequence[int]) -> list[int]:
    """Indices of the cases, largest need first (ties keep collection order): the longest cases start early, so
    the session does not end on one judge running a large case alone, and each large case meets small ones."""
    return sorted(range(len(needs)), key=lambda i: -needs[i])


def pick(pending: Sequence[int], needs: Sequence[int], held_elsewhere: int, pool: int) -> int:
    """The position in ``pending`` (indices into ``needs``, in hand-out order) of the case to hand a judge next.

    ``held_elsewhere``: what the other judges' cases may hold while this one runs (for each other judge, the
    largest need among the cases it has been handed and not finished). The first case that fits in the pool
    beside them; if none does, the first (it waits in the pool, as it would have anyway)."""
    room = pool - held_elsewhere
    for position, index in enumerate(pending):
        if needs[index] <= room:
            return position
    return 0

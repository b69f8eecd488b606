"""The order cases are handed to xdist workers in: largest first (issue 22).

xdist's load scheduling hands each worker the next pending items in collection order, so under ``-n N`` a large
case collected late runs while the other workers have nothing left: the session waits on its tail. Handing the
cases out largest first (the longest-processing-time rule) leaves the small ones to fill the workers' last
minutes. The estimate is the case's memory need (taskformat.memory_need: the bytes of its inputs, golden and
comparison), which tracks its work for the element-wise, reduction and index operators of the format; a case
without one keeps its place. The order is a pure function of the collection, so every
xdist worker computes the same one (xdist requires it); items that are not ours keep their positions.
``--cann-schedule collection`` keeps collection order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def largest_first(items: Sequence[T], size: Callable[[T], int | None]) -> list[T]:
    """``items`` with the sized ones (``size`` gives a number: cases with an estimate) reordered largest first
    among the places they held, ties in collection order; the others (None: not ours, or no estimate) stay
    where they were."""
    sized = [(place, n) for place, n in ((place, size(item)) for place, item in enumerate(items)) if n is not None]
    ranked = sorted(sized, key=lambda entry: (-entry[1], entry[0]))
    ordered = list(items)
    for (place, _), (source, _) in zip(sized, ranked):
        ordered[place] = items[source]
    return ordered


def estimated_bytes(item: object) -> int | None:
    """A case's estimated memory need in bytes, the size :func:`largest_first` ranks by; None for an item that
    is not one of our cases or has no estimate."""
    from pytest_cannbench.nodes.items import SourceItem

    if not isinstance(item, SourceItem):
        return None
    need = item.memory_need()
    return None if need is None else need.peak


def reorders(config: object, schedule: str, active: bool) -> bool:
    """Whether this process hands its collection to xdist largest first: an xdist worker (the controller
    schedules the workers' collection, in their order) of an active session that did not ask for collection
    order. A run without xdist keeps collection order: one process gains nothing from it."""
    return active and schedule == "largest-first" and hasattr(config, "workerinput")

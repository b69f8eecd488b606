"""The order xdist workers are handed cases in (nodes/schedule.py, issue 22): pure logic."""

from __future__ import annotations

from pytest_cannbench.nodes.schedule import largest_first


def test_cases_go_largest_first_among_their_own_places():
    sizes = {"a": 10, "b": 300, "c": None, "d": 300, "e": 5, "x": None}
    items = ["x", "a", "b", "c", "d", "e"]
    # ours (sized) fill the places ours held, largest first, ties (b, d) in collection order; "x" (not ours)
    # and "c" (no estimate) stay where they were
    assert largest_first(items, sizes.get) == ["x", "b", "d", "c", "a", "e"]
    assert largest_first(items, sizes.get) == largest_first(list(items), sizes.get)  # the same for every worker


def test_nothing_sized_or_nothing_at_all_keeps_the_order():
    assert largest_first(["p", "q"], lambda item: None) == ["p", "q"]
    assert largest_first([], lambda item: 1) == []

"""One case's route through the package's rooms, traced as it runs: how often it crosses from one room to another,
and how often against the layers (a lower room calling back into a higher one).

Usage (the checkout whose package is first on ``sys.path`` is the one traced; another checkout with
``PYTHONPATH=/that/checkout``)::

    python benchmarks/case_route.py [--json OUT] -- --cann-tasks=tasks --cann-source=examples/cpp_cpu \\
        -k "gelu and (01 or 02)"

The pytest session runs in this process without xdist (``-p no:xdist``); the arguments must select at least one
case, and the last one selected is traced (the first may pay the session's lazy set-up). While that item's
protocol runs (setup, call, teardown, its report), a profile function sees every Python call of the judge
process (all threads started meanwhile too) whose code lies in the package, and pairs it with the nearest calling
frame that also lies in the package; code in pytest, pluggy or the standard library between the two is looked
through. Each distinct pair (caller function, callee function) is one edge of the route.

- *room*: a module's first name below the package (``judge``, ``core``), or the top-level module (``state``,
  ``outcome``).
- *crossing*: an edge whose two functions are in different rooms.
- *against the layers*: a crossing from a lower layer to a higher one. The layers are those of
  ``docs/architecture.md``, bottom first: the vocabulary; the utilities; options; task format, guard, KernelBench
  and report (report is fed plain data); timing; workers; submission; judge; core; the front-ends (``nodes``,
  ``plugin``, ``serve``, ``cluster``, ``cli``, and a former ``state`` module, the pytest session's state).
  A room the table does not know is reported and counted as its own layer above everything.

The worker processes are not traced: their code runs in children, reached through pipes.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

LAYERS: dict[str, int] = {
    "vocab": 0,
    **dict.fromkeys(("__init__", "outcome", "phases", "scratch", "atomic", "cbuild", "procs", "figures"), 1),
    "options": 2,
    **dict.fromkeys(("taskformat", "guard", "kernelbench", "report"), 3),
    "timing": 4,
    "workers": 5,
    "submission": 6,
    "judge": 7,
    "core": 8,
    **dict.fromkeys(("nodes", "plugin", "serve", "cluster", "cli", "state"), 9),
}


class Route:
    """The pytest plugin that traces the last selected item."""

    def __init__(self) -> None:
        import pytest_cannbench

        self.root = str(Path(pytest_cannbench.__file__).resolve().parent) + "/"
        self.edges: Counter[tuple[str, str, str, str]] = Counter()
        self.traced = ""
        self._last = ""
        self._names: dict[Any, tuple[str, str] | None] = {}

    def _where(self, frame: FrameType) -> tuple[str, str] | None:
        code = frame.f_code
        known = self._names.get(code, False)
        if known is not False:
            return known  # type: ignore[return-value]
        path = code.co_filename
        where: tuple[str, str] | None = None
        if path.startswith(self.root):
            parts = path[len(self.root) :].removesuffix(".py").split("/")
            where = (parts[0], ".".join(parts) + ":" + getattr(code, "co_qualname", code.co_name))
        self._names[code] = where
        return where

    def _profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        callee = self._where(frame)
        if callee is None:
            return
        caller = frame.f_back
        while caller is not None:
            found = self._where(caller)
            if found is not None:
                self.edges[(found[0], found[1], callee[0], callee[1])] += 1
                return
            caller = caller.f_back

    def pytest_collection_finish(self, session: Any) -> None:
        if session.items:  # after -k and every other deselection
            self._last = session.items[-1].nodeid

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Any:
        del nextitem
        if item.nodeid != self._last:
            return None
        self.traced = item.nodeid
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)
        try:
            from _pytest.runner import runtestprotocol

            item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
            runtestprotocol(item, nextitem=None, log=True)
            item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        return True


def summarise(edges: Counter[tuple[str, str, str, str]]) -> dict[str, Any]:
    top = max(LAYERS.values()) + 1
    unknown = sorted({r for e in edges for r in (e[0], e[2]) if r not in LAYERS})
    crossings = [e for e in edges if e[0] != e[2]]
    against = [e for e in crossings if LAYERS.get(e[0], top) < LAYERS.get(e[2], top)]
    pairs = Counter((e[0], e[2]) for e in crossings)
    return {
        "edges": len(edges),
        "calls": sum(edges.values()),
        "rooms": sorted({r for e in edges for r in (e[0], e[2])}),
        "crossings": len(crossings),
        "against_layers": len(against),
        "room_pairs": {f"{a} -> {b}": n for (a, b), n in sorted(pairs.items())},
        "against": sorted(f"{e[1]} -> {e[3]}" for e in against),
        "unknown_rooms": unknown,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures and every edge against the layers")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    pytest_args = [a for a in args.pytest_args if a != "--"]
    route = Route()
    code = pytest.main(["-p", "no:xdist", "-p", "no:cacheprovider", "-q", *pytest_args], plugins=[route])
    if not route.traced:
        print("no case was selected: nothing traced", file=sys.stderr)
        return 2
    summary = {"traced": route.traced, "package": route.root, "pytest_exit": int(code), **summarise(route.edges)}
    print(f"\ntraced {summary['traced']} in {summary['package']}")
    print(f"edges {summary['edges']} ({summary['calls']} calls), rooms {len(summary['rooms'])}")
    print(f"crossings {summary['crossings']}, against the layers {summary['against_layers']}")
    for pair, n in summary["room_pairs"].items():
        print(f"  {n:4d}  {pair}")
    if summary["unknown_rooms"]:
        print(f"rooms the layer table does not know (counted as the top layer): {summary['unknown_rooms']}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

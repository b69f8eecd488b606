"""xdist's ``load`` scheduling, handing cases out by memory need (:mod:`.dispatch` has the policy and why).

Imported only by the controller of an xdist session (it subclasses xdist's own scheduler). Differences from
``LoadScheduling``: the cases go out largest first, one at a time, and each judge holds at most
``LOOKAHEAD`` of them (the one it runs and the next, which an xdist worker needs before it starts a case), so
each hand-out sees what the other judges hold. Everything else (crashed workers, collection checks, shutdown)
is xdist's.
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler.load import LoadScheduling  # type: ignore[import-untyped]  # xdist ships no types

from pytest_cannbench.workers.dispatch import CaseNeeds, largest_first, pick, read_needs

LOOKAHEAD = 2  # the case a judge runs and the next one: an xdist worker starts a case once it has its successor


class MemoryScheduling(LoadScheduling):
    """``--dist load`` with cases handed out by their memory needs (``--cann-dispatch memory``)."""

    collection: list[str] | None  # xdist's: the node ids every worker collected, once they all did

    def __init__(self, config: pytest.Config, log: Any, pool_file: str | None) -> None:
        super().__init__(config, log)
        self._pool_file = pool_file
        self.case_needs: CaseNeeds | None = None  # read when the collection is complete
        self._needs: list[int] = []

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:
            for node in self.nodes:
                self.check_schedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        collection: list[str] = next(iter(self.node2collection.values()))
        self.collection = collection
        self.case_needs = needs = read_needs(self._pool_file)
        self._needs = [needs.of(nodeid) if needs is not None else 0 for nodeid in collection]
        self.pending[:] = largest_first(self._needs)
        collector = self.config.pluginmanager.get_plugin("cannbench-results")  # for the summary and the board
        if collector is not None and self._pool_file:  # one judge (-n 1) shares no pool: nothing to say
            collector.dispatch = (f"largest memory need first, each when it fits beside the others "
                                  f"({len(needs.needs)} needs known)" if needs is not None else
                                  "in collection order (the judges' needs could not be read)")
        for node in self.nodes:
            self._fill(node)
        if not self.pending:
            for node in self.nodes:
                node.shutdown()

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        if node.shutting_down:
            return
        if self.pending:
            self._fill(node)
        else:
            node.shutdown()

    def _fill(self, node: Any) -> None:
        held = self.node2pending[node]
        pool = self.case_needs.pool if self.case_needs is not None else 0  # no needs: every one 0, the first fits
        while self.pending and len(held) < LOOKAHEAD:
            elsewhere = sum(max((self._needs[i] for i in cases), default=0)
                            for other, cases in self.node2pending.items() if other is not node)
            index = self.pending.pop(pick(self.pending, self._needs, elsewhere, pool))
            held.append(index)
            node.send_runtest_some([index])

"""A multi-rank (MC2) case as a pytest item: its run is the core's :class:`MultiRankRun` (a worker per rank on
each side, every rank worker living for the case only)."""

from __future__ import annotations

from pytest_cannbench.core import CaseRun, Judge
from pytest_cannbench.core.multi_rank_run import MultiRankRun
from pytest_cannbench.nodes.hidden import OperatorWithHidden
from pytest_cannbench.nodes.items import CaseItem
from pytest_cannbench.taskformat.spec import CaseSpec


class MultiRankItem(CaseItem):
    """One multi-rank case (``case.world_size`` ranks)."""

    def case_run(self, judge: Judge) -> CaseRun:
        return MultiRankRun(judge, self.route(judge), task=self.task, case=self.case)


class OperatorWithRanks(OperatorWithHidden):
    """An operator's ``cases.yaml`` whose multi-rank cases are :class:`MultiRankItem`s."""

    def item_class(self, case: CaseSpec) -> type[CaseItem]:
        return MultiRankItem if case.world_size is not None else CaseItem

"""The grading core: one judge's processes and one case's whole life, with no pytest in it.

- :class:`Controller` owns what a run decides once: the submission's build (in the sandbox), the goldens' pins,
  the memory plan and its ledger, the timing fence's file, the cases an earlier identical run recorded;
- :class:`JudgeSetup` is what a judge is given (plain data: it crosses to xdist workers and service actors);
- :class:`Judge` owns one judge's processes and shared state: the golden worker, the candidate and baseline
  workers, its share of the memory plan and pool, the golden memo, the fence, the timing context;
- :class:`CaseRun` takes one case from admission to its record;
- :class:`Grader` is the plain-Python front door: a controller and a judge in this process, the cases of a task
  tree, one call per case (``docs/core.md``).

Front-ends (the pytest plugin in ``nodes``/``plugin``, the grading service) drive these objects; nothing here
knows which one does.

May import: vocab, options, outcome, phases, scratch, taskformat, guard, timing, workers, submission, judge.
"""

from __future__ import annotations

from pytest_cannbench.core.case_run import CaseRun, CaseStopped, Route
from pytest_cannbench.core.controller import Controller
from pytest_cannbench.core.grader import CaseRef, Grader, claim_cpu_slot
from pytest_cannbench.core.judge import Judge, JudgeSetup

__all__ = [
    "CaseRef",
    "CaseRun",
    "CaseStopped",
    "Controller",
    "Grader",
    "Judge",
    "JudgeSetup",
    "Route",
    "claim_cpu_slot",
]

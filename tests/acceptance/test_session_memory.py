"""Issue 22: under a small session memory plan a case too large for it is recorded too_large, never run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from inner import run_inner

GIB = 1 << 30
ARGS = ("--cann-tasks=tasks", "--cann-self-check", "--cann-no-perf", "--cann-golden-cache=off", "-p",
        "no:cacheprovider", "--cann-session-memory=2")


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_case_over_the_plan_is_too_large_with_its_size(xdist, pytester, capsys, task_tree):
    tasks = task_tree("too_large")
    run = run_inner(pytester, capsys, tasks, *ARGS, *xdist)
    assert run.ret == pytest.ExitCode.OK, run.text  # not the candidate's failure: the run does not fail
    assert "cannbench: memory plan: 2.0 GiB usable (--cann-session-memory) / " in run.text
    assert run.statuses()["wide_add[01]"] == ("passed", "passed", None)
    big = run.cases["wide_add[02]"]
    assert (big.outcome, big.cann["status"], big.cann["failure_type"]) == ("skipped", "too_large", "too_large")
    workers = 2 if xdist else 1
    assert "needs at least 10.0 GiB (golden phase 9.0 GiB, candidate phase 10.0 GiB), over the 1.0 GiB" in \
        big.cann["message"] and f"(2.0 GiB usable, --cann-session-memory, / {workers} worker(s))" in big.cann["message"]
    assert not list((run.root / "reports" / "logs").glob("cases/level2/wide_add_2*"))  # nothing ran for it
    board = json.loads((run.root / "reports" / "leaderboard.json").read_text())
    (op,) = board["operators"]
    assert (op["cases_total"], op["cases_passed"], op["cases_not_graded"]) == (2, 1, 1)
    assert op["score"] == pytest.approx(50.0)  # compile 20 + function 30 over the one graded case
    plan = board["config"]["memory_plan"]
    assert (plan["usable"], plan["workers"], plan["slot"]) == (2 * GIB, workers, GIB)
    if xdist:  # the exclusive lane's lock file: one per session, removed at its end
        assert plan["lock"].endswith(".lock") and not Path(plan["lock"]).exists()
    else:
        assert plan["lock"] is None
    journal = [json.loads(line)["outcome"] for line in
               (run.root / "reports" / "results.jsonl").read_text().splitlines() if '"outcome"' in line]
    assert {o["key"]: o["status"] for o in journal} == {"level2/wide_add_1": "passed",
                                                         "level2/wide_add_2": "too_large"}
    assert "too_large" in "\n".join(run.section())

"""Issue 22: under a small session memory plan a case too large for it is recorded too_large, never run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from inner import int_attr_operator, run_inner

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
    # each judge's three processes: the case's slot is its share less the two idle ones (0.25 GiB each), at least
    # 1 GiB; one running alone under xdist gets no more here (2 GiB less five idle processes)
    slot = 1.5 if workers == 1 else 1.0
    assert f"needs at least 9.0 GiB (golden phase 9.0 GiB, candidate phase 6.1 GiB), over the {slot} GiB" in \
        big.cann["message"] and f"(2.0 GiB usable, --cann-session-memory, / {workers} worker(s))" in big.cann["message"]
    assert not list((run.root / "reports" / "logs").glob("cases/level2/wide_add_2*"))  # nothing ran for it
    board = json.loads((run.root / "reports" / "leaderboard.json").read_text())
    (op,) = board["operators"]
    assert (op["cases_total"], op["cases_passed"], op["cases_not_graded"]) == (2, 1, 1)
    assert op["score"] == pytest.approx(50.0)  # compile 20 + function 30 over the one graded case
    plan = board["config"]["memory_plan"]
    assert (plan["usable"], plan["workers"], plan["slot"]) == (2 * GIB, workers, int(slot * GIB))
    if xdist:  # the exclusive lane's lock file: one per session, removed at its end
        assert plan["lock"].endswith(".lock") and not Path(plan["lock"]).exists()
    else:
        assert plan["lock"] is None
    journal = [json.loads(line)["outcome"] for line in
               (run.root / "reports" / "results.jsonl").read_text().splitlines() if '"outcome"' in line]
    assert {o["key"]: o["status"] for o in journal} == {"level2/wide_add_1": "passed",
                                                         "level2/wide_add_2": "too_large"}
    assert "too_large" in "\n".join(run.section())


HUNGRY = '''import torch


def hungry(x: torch.Tensor, gib: int = 0) -> torch.Tensor:
    if gib:  # working memory no estimate from the case's tensors foresees (address space only: never touched)
        room = torch.empty(gib << 30, dtype=torch.uint8)
        del room
    return x * 2
'''


def test_a_golden_out_of_its_slots_memory_runs_again_alone(pytester, capsys, task_tree) -> None:
    """A golden needing more than its slot (the estimate sees only the case's tensors) is not a golden_error
    while the session's whole memory would hold it: the case runs again alone and says so."""
    tasks = task_tree("basic")
    # the plan of 8 GiB over 2 workers: a slot's golden gets 5.5 GiB of address space, one alone 8.75 GiB
    int_attr_operator(tasks, "hungry", "Hungry", HUNGRY, "gib", "a golden with a large scratch buffer",
                      ["attrs: {gib: 5}, value_range: [-1, 1], note: over its slot",
                       "attrs: {gib: 9}, value_range: [-1, 1], note: over the session",
                       "attrs: {}, value_range: [-1, 1], note: small"])
    run = run_inner(pytester, capsys, tasks, "--cann-tasks=tasks", "--cann-self-check", "--cann-no-perf",
                    "--cann-golden-cache=off", "-p", "no:cacheprovider", "--cann-session-memory=8", "-n", "2",
                    "-k", "hungry")
    assert "cannbench: memory plan: 8.0 GiB usable (--cann-session-memory) / 2 worker(s)" in run.text, run.text
    over_slot, over_all, small = (run.cases[f"hungry[0{i}]"].cann for i in (1, 2, 3))
    assert over_slot["status"] == "passed", run.text
    assert any("ran out of its slot's memory" in w and "ran again alone, with 8.8 GiB" in w
               for w in over_slot["warnings"]), over_slot["warnings"]
    assert (over_all["status"], over_all["failure_type"]) == ("error", "golden_error")
    assert "also alone, with 8.8 GiB of address space" in over_all["message"], over_all["message"]
    assert small["status"] == "passed" and not any("alone" in w for w in small["warnings"])

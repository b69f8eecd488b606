"""Multi-rank (MC2) cases graded as they run: a worker per rank, a gloo group between them, a verdict per rank.

Fixture tree ``tests/fixtures/mc2``: ``all_gather_mm`` (every golden hook: each rank's inputs, the candidate's call,
the distributed truth; world_size 2 and 4), ``matmul_all_reduce`` (no input or call hook: the official runner's own
input rule and call; world_size 2) and ``no_hook`` (task errors). The submission (``tests/fixtures/mc2_submission``)
is plain Python: ``torch.distributed`` moves the data and its own loops compute, so it passes the guard in
``block`` mode; a constant makes rank 1 honest, wrong, hanging or crashing. Every submission run is in the sandbox
(bubblewrap) under the guard, each rank a candidate worker of its own.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import pytest
from inner import make_wheel, run_inner

from pytest_cannbench.guard import sandbox

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BASE = ("-p", "no:cacheprovider", "--cann-golden-cache=off", "-k", "not no_hook")
needs_bwrap = pytest.mark.skipif(not sandbox.choose("auto").on, reason="bubblewrap does not work on this machine")
CASES = ("all_gather_mm[01]", "all_gather_mm[02]", "matmul_all_reduce[01]")


def submission(root: Path, behaviour: str) -> Path:
    text = (FIXTURES / "mc2_submission" / "cann_bench.py").read_text()
    assert 'MISBEHAVE = "honest"' in text
    source = root / f"submission-{behaviour}"
    make_wheel(source / "dist", {"cann_bench/__init__.py": text.replace('MISBEHAVE = "honest"',
                                                                        f'MISBEHAVE = "{behaviour}"')})
    return source


def graded(pytester: pytest.Pytester, capsys: pytest.CaptureFixture, task_tree, behaviour: str, *args: str):
    tasks = task_tree("mc2")
    source = submission(pytester.path, behaviour)
    return run_inner(pytester, capsys, tasks, "--cann-tasks=tasks", *BASE, f"--cann-source={source}",
                     "--cann-guard=block", "--cann-sandbox=bwrap", *args)


def test_multi_rank_cases_and_their_task_errors(pytester, capsys, task_tree) -> None:
    """A case with mc2_distributed and world_size is a multi-rank item; one whose golden has no distributed hook,
    or whose world_size is no int, fails as a task error naming what is missing."""
    from pytest_cannbench.nodes.multi_rank import MultiRankItem

    task_tree("mc2")
    items, _ = pytester.inline_genitems("--cann-tasks=tasks", "-p", "no:cacheprovider")
    kinds = {item.name: type(item).__name__ for item in items}
    # no_hook[02] has no usable world_size: an ordinary item, which fails as its task error
    assert {n for n, k in kinds.items() if k == MultiRankItem.__name__} == {*CASES, "no_hook[01]"}
    run = run_inner(pytester, capsys, Path("tasks"), "--cann-tasks=tasks", "-p", "no:cacheprovider",
                    "--cann-no-perf", "--cann-source=@golden", "-k", "no_hook")
    errors = {name: c.cann["message"] for name, c in run.cases.items() if c.cann}
    assert "defines no mc2_distributed_golden(ctx, inputs, attrs)" in errors["no_hook[01]"]
    assert "needs an int world_size from 1 to 64, got 'two'" in errors["no_hook[02]"]
    assert {c.cann["failure_type"] for c in run.cases.values() if c.cann} == {"task_error"}


def test_self_check_runs_the_distributed_golden_on_every_rank(pytester, capsys, task_tree) -> None:
    """The golden as the candidate: world_size golden workers make each rank's inputs and truth, world_size
    candidate workers run the distributed golden in their own group; each rank is judged."""
    tasks = task_tree("mc2")
    mine = f"cannbench-ranks-p{os.getpid()}n*"  # the inner session runs in this process
    before = set(Path(tempfile.gettempdir()).glob(mine))
    run = run_inner(pytester, capsys, tasks, "--cann-tasks=tasks", *BASE, "--cann-source=@golden", "--cann-no-perf")
    assert set(Path(tempfile.gettempdir()).glob(mine)) == before, "a rank group's scratch directory was left behind"
    assert {n: c.cann["status"] for n, c in run.cases.items()} == {n: "passed" for n in CASES}, run.text[-3000:]
    names = [v["name"] for v in run.cases["all_gather_mm[02]"].cann["accuracy"]]
    assert names == ["rank0:y", "rank1:y", "rank2:y", "rank3:y"]
    logs = pytester.path / "reports" / "logs"
    assert len(list(logs.glob("golden-rank*-main.log"))) == 4 and len(list(logs.glob("candidate-rank*.log"))) == 4


@needs_bwrap
def test_an_honest_submission_passes_on_every_rank(pytester, capsys, task_tree) -> None:
    """Each rank a contained, guarded candidate worker in its own sandbox, its group joined before the submission
    was imported, in a network namespace shared by the case's ranks only."""
    run = graded(pytester, capsys, task_tree, "honest", "--cann-no-perf")
    assert {n: c.cann["status"] for n, c in run.cases.items()} == {n: "passed" for n in CASES}, run.text[-3000:]
    logs = pytester.path / "reports" / "logs"
    for rank in range(4):  # one worker per rank and case; each joined its group before its filter went on
        log = (logs / f"candidate-rank{rank}-worker-main.log").read_text()
        starts = log.split("joined its gloo group")
        assert len(starts) == (4 if rank < 2 else 2) and "containment on" not in starts[0], log[:2000]
        assert all("containment on" in later for later in starts[1:]), log[:2000]
    assert "no private network" not in json.dumps([c.cann for c in run.cases.values()])


@needs_bwrap
def test_one_wrong_rank_fails_the_case_naming_it(pytester, capsys, task_tree) -> None:
    run = graded(pytester, capsys, task_tree, "wrong", "--cann-no-perf")
    for name in ("all_gather_mm[01]", "all_gather_mm[02]"):  # rank 1's rows are wrong, the others' right
        cann = run.cases[name].cann
        assert (cann["status"], cann["failure_type"]) == ("failed", "precision_mismatch"), cann["message"]
        assert cann["message"].startswith("rank 1 of ") and "rank 0 of" not in cann["message"]
        passed = {v["name"]: v["passed"] for v in cann["accuracy"]}
        assert passed["rank1:y"] is False and passed["rank0:y"] is True
    # rank 1's wrong partial sum reaches every rank through the all-reduce
    assert run.cases["matmul_all_reduce[01]"].cann["failure_type"] == "precision_mismatch"


@needs_bwrap
def test_one_hanging_rank_times_out_alone_and_nothing_hangs(pytester, capsys, task_tree) -> None:
    """Rank 1 sleeps in its call: it is the case's timeout (its own status, named); the ranks waiting for it in a
    collective give up first by the group's timeout and the session goes on."""
    t0 = time.monotonic()
    run = graded(pytester, capsys, task_tree, "hang", "--cann-no-perf", "--cann-case-timeout=15")
    assert time.monotonic() - t0 < 240
    for name in CASES:
        cann = run.cases[name].cann
        assert (cann["status"], cann["failure_type"]) == ("timeout", "candidate_timeout"), cann["message"]
        assert cann["message"].startswith("rank 1 of ") and "no answer within 15 s" in cann["message"]
    # in the all-reduce rank 0 waited for rank 1 and gave up by the group's own timeout, before the judge's
    assert "rank 0 of 2: candidate raised" in run.cases["matmul_all_reduce[01]"].cann["message"]


@needs_bwrap
def test_a_crashing_rank_fails_the_case_as_crashed(pytester, capsys, task_tree) -> None:
    run = graded(pytester, capsys, task_tree, "crash", "--cann-no-perf")
    for name in CASES:
        cann = run.cases[name].cann
        assert (cann["status"], cann["failure_type"]) == ("crashed", "candidate_crashed"), cann["message"]
        assert cann["message"].startswith("rank 1 of ") and "exited with code 3" in cann["message"]


@needs_bwrap
def test_a_timed_multi_rank_call_is_its_slowest_ranks(pytester, capsys, task_tree) -> None:
    """Timed calls in lockstep on fresh inputs, each verified on every rank; the baseline is the distributed
    golden in rank workers of its own."""
    run = graded(pytester, capsys, task_tree, "honest", "-k", "all_gather_mm and 01", "--cann-repeat=3")
    cann = run.cases["all_gather_mm[01]"].cann
    assert cann["status"] == "passed", cann["message"]
    timing = cann["timing"]
    assert timing["measured"] and timing["input_sets"] == 3 and timing["cand"]["samples"] == 3
    assert timing["t_cand_us"] > 0 and timing["t_baseline_us"] > 0
    assert "each timed call is as slow as its slowest rank" in timing["notes"][0]

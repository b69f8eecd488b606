"""The pure parts of a multi-rank (MC2) case: its fields, its memory need, its payload, the rank sandbox's command
line and how the ranks' ends fold into the case's verdict."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_cannbench import outcome as oc
from pytest_cannbench.guard import builtin_ops
from pytest_cannbench.judge.multi_rank import STOPPED_TYPE, fold, payload
from pytest_cannbench.taskformat.memory_need import estimate
from pytest_cannbench.taskformat.spec import load_operator
from pytest_cannbench.workers.ranks import group_timeout, shared_network

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mc2"


def task(name: str):
    return load_operator(FIXTURE / "level4" / name, FIXTURE)


def test_multi_rank_fields_and_hooks() -> None:
    gather = task("all_gather_mm")
    assert [c.world_size for c in gather.cases] == [2, 4]
    assert gather.mc2_hooks == {"mc2_distributed_golden", "mc2_make_rank_inputs", "mc2_call_candidate"}
    assert task("matmul_all_reduce").mc2_hooks == {"mc2_distributed_golden"}
    broken = task("no_hook")
    assert "defines no mc2_distributed_golden" in (broken.cases[0].error or "")
    assert "needs an int world_size from 1 to 64, got 'two'" in (broken.cases[1].error or "")


def test_the_memory_need_counts_every_rank() -> None:
    t = task("all_gather_mm")
    two, four = (estimate(t.spec, c) for c in t.cases)
    assert two is not None and four is not None
    # each rank worker is charged a torch process beside its tensors, golden side and candidate side
    assert two.golden >= 2 * (256 << 20) and four.golden >= 4 * (256 << 20)
    assert four.candidate > 2 * two.candidate * 0.9
    # y's declared shape [M * world_size, N] makes it a gathered output: world_size times the largest input
    from dataclasses import replace

    scattered = replace(t.spec, outputs=tuple(replace(o, shape="[M / world_size, N]") for o in t.spec.outputs))
    alone = estimate(scattered, t.cases[1])
    assert alone is not None and alone.kept < four.kept


@dataclass
class _Settings:
    secret: str = ""
    seed: int = 0


def test_payload_keeps_the_tasks_seed_unless_a_secret_or_seed_is_mixed_in() -> None:
    t = task("all_gather_mm")
    case = t.cases[0]
    plain = payload(t, case, _Settings())  # type: ignore[arg-type]
    assert plain["attrs"]["seed"] == 3 and plain["case_id"] == "level4/all_gather_mm_1"
    assert plain["input_shapes"] == [[3, 4], [4, 5]] and plain["dtypes"] == ["float32", "float32"]
    secret = payload(t, case, _Settings(secret="abc"))  # type: ignore[arg-type]
    other = payload(t, case, _Settings(secret="xyz"))  # type: ignore[arg-type]
    assert secret["attrs"]["seed"] != 3 and secret["attrs"]["seed"] != other["attrs"]["seed"]
    assert case.attrs["seed"] == 3  # the case itself is untouched


def test_a_ranks_sandbox_shares_the_groups_network() -> None:
    argv = ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-net", "--bind", "/w", "/w", "--", "python"]
    assert shared_network(argv, ["/store"]) == ["bwrap", "--unshare-user", "--unshare-pid", "--bind", "/w", "/w",
                                                "--bind", "/store", "/store", "--", "python"]
    with pytest.raises(RuntimeError, match="unexpected sandbox command line"):
        shared_network(["bwrap", "--", "python"], [])
    assert group_timeout(300) == 240 and group_timeout(1) == 2.0


def test_a_cases_status_is_its_most_serious_ranks() -> None:
    t = task("all_gather_mm")
    case = t.cases[1]
    ends = [(0, oc.FAILED, oc.STRUCTURAL, "raised: connection closed by peer"),
            (1, oc.TIMEOUT, oc.CANDIDATE_TIMEOUT, "no answer within 20 s"),
            (2, oc.FAILED, STOPPED_TYPE, "stopped"), (3, oc.PASSED, "", "")]
    result = fold(t, case, ends, 4)
    assert (result.status, result.failure_type) == (oc.TIMEOUT, oc.CANDIDATE_TIMEOUT)
    assert result.message.startswith("rank 1 of 4: no answer within 20 s; rank 0 of 4: raised")
    assert result.message.endswith("rank(s) 2 stopped by the judge (they waited in a collective for rank 1)")
    crashed = fold(t, case, [*ends, (3, oc.CRASHED, oc.CANDIDATE_CRASH, "exit 3")], 4)
    assert crashed.failure_type == oc.CANDIDATE_CRASH
    assert fold(t, case, [(r, oc.PASSED, "", "") for r in range(4)], 4).status == oc.PASSED


def test_collectives_are_allowed_only_in_rank_workers() -> None:
    before = set(builtin_ops.COMMUNICATION)
    try:
        builtin_ops.COMMUNICATION.clear()
        assert not builtin_ops.is_allowed("c10d::allreduce_") and not builtin_ops.is_allowed("gloo:all_reduce")
        builtin_ops.allow_communication()
        assert builtin_ops.is_allowed("c10d::allgather_") and builtin_ops.is_allowed("gloo:all_gather")
        assert not builtin_ops.is_allowed("aten::mm") and not builtin_ops.is_allowed("aten::add")
    finally:
        builtin_ops.COMMUNICATION.clear()
        builtin_ops.COMMUNICATION.update(before)

"""Issue 22: xdist's load scheduling hands cases out by memory need (workers.dispatch, workers.xdist_dispatch).

The scheduler is xdist's own class, driven here as xdist's DSession drives it; the nodes stand in for xdist's
worker controllers (they record what they are sent), as in xdist's own scheduler tests."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_cannbench.workers.dispatch import CaseNeeds, largest_first, needs_path, pick, read_needs, write_needs
from pytest_cannbench.workers.xdist_dispatch import LOOKAHEAD, MemoryScheduling

MIB = 1 << 20


def test_largest_first_keeps_collection_order_among_equals() -> None:
    assert largest_first([5, 9, 5, 0, 9, 1]) == [1, 4, 0, 2, 5, 3]


def test_pick_is_the_first_case_that_fits_beside_the_others_or_the_first() -> None:
    needs = [900, 700, 300, 200, 100]
    assert pick([0, 1, 2, 3, 4], needs, held_elsewhere=0, pool=1000) == 0
    assert pick([0, 1, 2, 3, 4], needs, held_elsewhere=750, pool=1000) == 3  # 200 is the first under 250
    assert pick([1, 2, 4], needs, held_elsewhere=750, pool=1000) == 2
    assert pick([0, 1], needs, held_elsewhere=750, pool=1000) == 0  # nothing fits: the largest waits in the pool


def test_needs_file_round_trip_and_what_is_not_one(tmp_path: Path) -> None:
    pool_file = str(tmp_path / "memory-1.pool")
    assert read_needs(None) is None and read_needs(pool_file) is None  # no file: xdist's order
    write_needs(pool_file, CaseNeeds(1000, {"a.yaml::x[01]": 10, "a.yaml::x[02]": 1000}))
    read = read_needs(pool_file)
    assert read == CaseNeeds(1000, {"a.yaml::x[01]": 10, "a.yaml::x[02]": 1000})
    assert read.of("a.yaml::x[02]") == 1000 and read.of("test_plain.py::test_x") == 0
    for junk in ("", "[]", '{"pool": "x", "needs": {}}', '{"pool": 1}', '{"pool": 1, "needs": {"a": "b"}}'):
        needs_path(pool_file).write_text(junk)
        assert read_needs(pool_file) is None, junk


@dataclass(eq=False)
class Node:
    """What the scheduler calls on an xdist WorkerController."""

    name: str
    sent: list[int] = field(default_factory=list)
    gateway: SimpleNamespace = field(init=False)
    shutting_down: bool = False

    def __post_init__(self) -> None:
        self.gateway = SimpleNamespace(id=self.name)

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduler(pytester: pytest.Pytester, tmp_path: Path, needs: list[int] | None, pool: int):
    config = pytester.parseconfig("--tx=2*popen", "--dist=load")
    pool_file = str(tmp_path / "memory-2.pool")
    ids = [f"ops/cases.yaml::case[{i:03d}]" for i in range(len(needs or [0] * 12))]
    if needs is not None:
        write_needs(pool_file, CaseNeeds(pool, dict(zip(ids, needs))))
    sched = MemoryScheduling(config, None, pool_file)
    nodes = [Node("gw0"), Node("gw1")]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, ids)
    assert sched.collection_is_completed
    sched.schedule()
    return sched, nodes


def _run(sched: MemoryScheduling, nodes: list[Node], needs: list[int], pool: int, seed: int) -> list[int]:
    """Finish cases in a random interleaving of the two judges (each judge runs its cases in the order it got
    them), checking at every step that the cases running together fit in the pool; the order they ran in."""
    rng, ran = random.Random(seed), []
    while sched.has_pending:
        running = [sched.node2pending[n][0] for n in nodes if sched.node2pending.get(n)]
        assert sum(needs[i] for i in running) <= pool, (running, [needs[i] for i in running])
        assert all(len(sched.node2pending[n]) <= LOOKAHEAD for n in nodes)
        node = rng.choice([n for n in nodes if sched.node2pending.get(n)])
        index = sched.node2pending[node][0]
        ran.append(index)
        sched.mark_test_complete(node, index, duration=rng.random())
    assert all(n.shutting_down for n in nodes) and sched.tests_finished
    return ran


@pytest.mark.parametrize("seed", range(5))
def test_large_cases_never_run_together_while_small_ones_remain(seed, pytester, tmp_path) -> None:
    """Four cases any two of which overflow the pool, among twenty small ones: the large ones start first and
    each runs beside small ones only; every case is handed out exactly once."""
    rng = random.Random(seed)
    needs = [rng.randint(1, 100) * MIB for _ in range(20)] + [900 * MIB, 800 * MIB, 700 * MIB, 600 * MIB]
    rng.shuffle(needs)
    pool = 1000 * MIB
    sched, nodes = _scheduler(pytester, tmp_path, needs, pool)
    first = [n.sent[0] for n in nodes]
    assert max(needs[i] for i in first) == 900 * MIB  # the largest case is handed out first
    ran = _run(sched, nodes, needs, pool, seed)
    assert sorted(ran) == list(range(len(needs)))
    assert sorted(i for n in nodes for i in n.sent) == list(range(len(needs)))
    assert sched.case_needs is not None and sched.case_needs.pool == pool


def test_without_the_judges_needs_cases_go_out_in_collection_order(pytester, tmp_path) -> None:
    sched, nodes = _scheduler(pytester, tmp_path, None, 0)
    assert sched.case_needs is None
    assert [n.sent for n in nodes] == [[0, 1], [2, 3]]
    ran = _run(sched, nodes, [0] * 12, 0, seed=0)
    assert sorted(ran) == list(range(12))
    assert sorted(nodes[0].sent + nodes[1].sent) == list(range(12))


def test_a_lost_worker_gives_its_cases_back(pytester, tmp_path) -> None:
    needs = [50 * MIB] * 6
    sched, nodes = _scheduler(pytester, tmp_path, needs, 1000 * MIB)
    lost = list(sched.node2pending[nodes[1]])
    crashed = sched.remove_node(nodes[1])  # xdist: the worker died while running its first case
    assert crashed == sched.collection[lost[0]]
    assert lost[1] in sched.pending
    ran = []
    while sched.has_pending:
        index = sched.node2pending[nodes[0]][0]
        ran.append(index)
        sched.mark_test_complete(nodes[0], index)
    assert sorted(ran) == sorted(set(range(6)) - {lost[0]})

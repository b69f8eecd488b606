"""Issue 22: the session memory plan, a case's estimated need, and how too_large cases are scored and resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cannbench.report.journal import recorded
from pytest_cannbench.report.scoring import CaseScore, operator_score
from pytest_cannbench.taskformat.memory_need import MemoryNeed, estimate
from pytest_cannbench.taskformat.spec import load_operator
from pytest_cannbench.workers import memory_plan as mp
from pytest_cannbench.workers.limits import Inherited

GIB = 1 << 30
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "too_large"


def machine(physical: int = 24 * GIB, cgroup: int | None = None, address_space: int | None = None) -> Inherited:
    return Inherited(physical=physical, cgroup_memory=cgroup, address_space=address_space, open_files=None,
                     processes=None, file_size=None, cpus=None)


def test_two_workers_split_what_is_available_and_the_sum_fits() -> None:
    plan = mp.make_plan(machine(), available=20 * GIB, workers=2, processes=3)
    assert plan.bound == "MemAvailable" and plan.usable == int(20 * GIB * 0.9)
    assert plan.share == plan.usable // 2
    assert plan.slot == plan.share - 2 * mp.IDLE_BYTES  # the two idle processes of each judge
    assert plan.candidate == plan.slot and plan.golden == plan.slot + mp.ADDRESS_SPACE_SLACK
    # at any moment each judge has one case in flight and its other processes idle: the session fits
    assert plan.workers * (plan.slot + (plan.processes - 1) * mp.IDLE_BYTES) <= plan.usable
    line = plan.describe()
    assert "18.0 GiB usable (MemAvailable, 10% kept free) / 2 worker(s) = 9.0 GiB each" in line
    assert "a case may use 8.5 GiB" in line
    assert mp.MemoryPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan  # travels through workerinput


def test_timed_regions_keep_more_between_cases_and_the_plan_charges_it() -> None:
    """A timed session's regions keep TIMED_REGION_KEEP backed between cases (a timed case maps every set of a
    window again otherwise); what they keep past REGION_KEEP comes out of the slot, so the session still fits."""
    plain = mp.make_plan(machine(), available=20 * GIB, workers=2, processes=4)
    timed = mp.make_plan(machine(), available=20 * GIB, workers=2, processes=4, timed_regions=2)
    assert plain.region_keep == mp.REGION_KEEP and timed.region_keep == mp.TIMED_REGION_KEEP
    extra = 2 * (mp.TIMED_REGION_KEEP - mp.REGION_KEEP)
    assert timed.slot == plain.slot - extra and timed.whole == plain.whole - extra  # the other judge's regions
    assert timed.workers * (timed.slot + (timed.processes - 1) * mp.IDLE_BYTES + extra) <= timed.usable
    assert "shared regions keep 256 MiB between timed cases" in timed.describe()
    assert "shared regions" not in plain.describe()
    assert mp.MemoryPlan.from_dict(json.loads(json.dumps(timed.to_dict()))) == timed
    # a machine where keeping them would leave a case less than two minimal slots keeps what it always kept
    small = mp.make_plan(machine(), available=int(5 * GIB), workers=2, processes=4, timed_regions=2)
    assert small.region_keep == mp.REGION_KEEP
    assert small.slot == mp.make_plan(machine(), available=int(5 * GIB), workers=2, processes=4).slot


def test_the_tightest_bound_decides() -> None:
    assert mp.make_plan(machine(cgroup=8 * GIB), 20 * GIB, 1, 3).bound == "cgroup"
    boxed = mp.make_plan(machine(address_space=6 * GIB), 20 * GIB, 1, 3)
    assert boxed.bound == "ulimit -v" and boxed.golden <= 6 * GIB  # setrlimit could not raise it anyway
    assert mp.make_plan(machine(), None, 1, 3).bound == "MemTotal"  # no /proc/meminfo
    assert mp.make_plan(machine(physical=0), None, 1, 3).slot == mp.MIN_SLOT


def test_asked_values_win_but_never_above_the_hard_bounds() -> None:
    plan = mp.make_plan(machine(cgroup=16 * GIB), 2 * GIB, 2, 4, asked_total=12 * GIB)
    assert (plan.usable, plan.bound) == (12 * GIB, "--cann-session-memory")  # taken as it is, MemAvailable too
    assert "kept free" not in plan.describe()
    assert mp.make_plan(machine(cgroup=16 * GIB), None, 1, 3, asked_total=64 * GIB).usable == 16 * GIB
    asked = mp.make_plan(machine(cgroup=16 * GIB), None, 1, 3, asked_golden=3 * GIB, asked_candidate=40 * GIB)
    assert asked.golden == 3 * GIB and asked.candidate == 16 * GIB and asked.asked_golden
    assert "golden 3.0 GiB address space (asked)" in asked.describe()


def test_mem_available_is_read_from_meminfo() -> None:
    assert mp.mem_available("MemTotal: 100 kB\nMemAvailable:   2048 kB\n") == 2 << 20
    assert mp.mem_available("MemTotal: 100 kB\n") is None


def test_too_large_names_the_need_and_the_budget() -> None:
    plan = mp.make_plan(machine(), None, 2, 3, asked_total=4 * GIB)
    assert mp.too_large(plan.slot, "detail", plan) is None
    message = mp.too_large(5 * GIB, "golden phase 5.0 GiB", plan)
    assert message is not None
    assert "needs at least 5.0 GiB (golden phase 5.0 GiB)" in message
    assert f"over the {plan.slot / GIB:.1f} GiB one case may use" in message and "/ 2 worker(s)" in message


def test_estimate_of_the_fixture_cases() -> None:
    task = load_operator(FIXTURE / "level2" / "wide_add", FIXTURE)
    small, huge = (estimate(task.spec, case) for case in task.cases)
    assert small is not None and small.peak < 1 << 20
    numel = 16384 * 16384
    # golden phase: 2 native inputs, their fp64 copies, the fp64 output and the native reference output
    # candidate phase: the region (inputs, output), the judge's own inputs, its fp64 golden and native reference,
    # and the comparison's dozen fp64 temporaries of one 1 Mi-element chunk (a floating output is compared in chunks)
    # kept: the first reference (fp64 golden, native output) the judge holds through a second pass and the timing
    assert huge == MemoryNeed(golden=2 * 4 * numel + 2 * 8 * numel + 8 * numel + 4 * numel,
                              candidate=2 * 4 * numel + 4 * numel + 2 * 4 * numel + 8 * numel + 4 * numel
                              + 12 * 8 * (1 << 20),
                              kept=8 * numel + 4 * numel)
    assert huge.peak == 12 * GIB and huge.without_kept().peak == 9 * GIB
    assert huge.describe() == "golden phase 9.0 GiB, candidate phase 8.1 GiB, first reference kept 3.0 GiB"
    assert huge.without_kept().describe() == "golden phase 9.0 GiB, candidate phase 8.1 GiB"
    broken = type(task.cases[0])(index=9, case_id=9, raw={"input_shape": "nonsense", "dtype": ["float32"]})
    assert estimate(task.spec, broken) is None  # the case fails with its own format error


def test_too_large_cases_neither_count_for_nor_against_the_operator() -> None:
    passed, failed, big = CaseScore("passed", None), CaseScore("failed", "precision_mismatch"), \
        CaseScore("too_large", "too_large")
    with_big = operator_score([passed, failed, big])
    assert with_big.score == pytest.approx(operator_score([passed, failed]).score) == pytest.approx(20 + 15)
    assert (with_big.cases_total, with_big.cases_not_graded, len(with_big.haps)) == (3, 1, 3)
    only_big = operator_score([big, big])
    assert (only_big.score, only_big.score_error, only_big.cases_not_graded) == (0.0, "too_large", 2)


def test_resume_never_keeps_a_too_large_case(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    lines = [{"run": "r", "outcome": {"key": "level2/a_1", "status": "passed"}},
             {"run": "r", "outcome": {"key": "level2/a_2", "status": "too_large"}}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert set(recorded(path, "r")) == {"level2/a_1"}


class _Golden:
    def __init__(self, memory_bytes: int) -> None:
        self.memory_bytes, self.budgets = memory_bytes, []

    def budget(self, memory_bytes: int) -> None:
        self.budgets.append(memory_bytes)
        self.memory_bytes = memory_bytes


class _State:
    """What core.memory.admit reads of a judge."""

    def __init__(self, plan: mp.MemoryPlan) -> None:
        from pytest_cannbench.workers.memory_pool import MemoryPool

        self.memory_plan, self.golden = plan, _Golden(plan.golden)
        self.pool = MemoryPool(Path(plan.pool_file) if plan.pool_file else None, plan.workers * plan.slot)

    def memory_pool(self):
        return self.pool

    def golden_service(self):
        return type("Service", (), {"worker": self.golden})()


def _held(path: Path) -> list:
    """What the pool's ledger says is held: (pid, bytes held) per admitted ticket, None for the whole pool."""
    import json

    text = path.read_text()
    return [(t["pid"], t["held"]) for t in json.loads(text)["tickets"] if t["admitted"]] if text.strip() else []


def test_a_case_over_its_slot_runs_alone_with_the_whole_sessions_budgets(tmp_path: Path) -> None:
    import contextlib
    import os
    from dataclasses import replace

    from pytest_cannbench.core.memory import admit

    lock = tmp_path / "memory.pool"
    lock.touch()
    plan = replace(mp.make_plan(machine(), None, 2, 3, asked_total=16 * GIB), pool_file=str(lock))
    assert plan.slot < plan.whole < plan.usable and plan.largest == plan.whole
    st, candidate = _State(plan), type("Worker", (), {"memory_bytes": plan.candidate})()
    small, alone = MemoryNeed(GIB, GIB), MemoryNeed(plan.slot + GIB, plan.slot)
    with contextlib.ExitStack() as hold:
        assert admit(st, small, [candidate], hold) is None  # type: ignore[arg-type]
        assert _held(lock) == [(os.getpid(), GIB)]  # its estimate, beside others
        assert st.golden.budgets == [] and candidate.memory_bytes == plan.candidate
    with contextlib.ExitStack() as hold:
        assert admit(st, alone, [candidate], hold) is None  # type: ignore[arg-type]
        assert _held(lock) == [(os.getpid(), None)]  # the whole pool: every other judge waits
        assert st.golden.memory_bytes == plan.whole + mp.ADDRESS_SPACE_SLACK
        assert candidate.memory_bytes == plan.whole
    assert _held(lock) == []
    assert (st.golden.memory_bytes, candidate.memory_bytes) == (plan.golden, plan.candidate)  # restored
    with contextlib.ExitStack() as hold:
        message = admit(st, MemoryNeed(plan.whole + 1, 0), [candidate], hold)  # type: ignore[arg-type]
        assert message is not None and f"over the {plan.whole / GIB:.1f} GiB" in message
    assert "up to" in plan.describe() and "alone (the other workers wait)" in plan.describe()
    single = mp.make_plan(machine(), None, 1, 3, asked_total=16 * GIB)  # one judge: no pool, no ledger
    assert single.largest == single.slot and not single.alone(single.slot + 1)


def test_a_case_running_alone_is_too_large_when_the_machine_has_since_filled(tmp_path: Path, monkeypatch) -> None:
    """The plan saw MemAvailable at the start; another user took most of it since: too_large, not an OOM kill."""
    import contextlib
    from dataclasses import replace

    from pytest_cannbench.core import memory

    lock = tmp_path / "memory.pool"
    lock.touch()
    plan = replace(mp.make_plan(machine(), 20 * GIB, 2, 3), pool_file=str(lock))
    st, candidate = _State(plan), type("Worker", (), {"memory_bytes": plan.candidate})()
    need = MemoryNeed(plan.slot + GIB, 0)
    monkeypatch.setattr(memory, "available", lambda: 4 * GIB)
    with contextlib.ExitStack() as hold:
        message = memory.admit(st, need, [candidate], hold)  # type: ignore[arg-type]
        assert message is not None and "3.6 GiB available now" in message and "over the 3.6 GiB" in message
        assert _held(lock) == []  # let go at once: the case is not run
    assert st.golden.budgets == [] and candidate.memory_bytes == plan.candidate
    monkeypatch.setattr(memory, "available", lambda: 30 * GIB)
    with contextlib.ExitStack() as hold:
        assert memory.admit(st, need, [candidate], hold) is None  # type: ignore[arg-type]
    assert memory.room_now(replace(plan, bound="--cann-session-memory"), GIB) == plan.whole  # asked: trusted

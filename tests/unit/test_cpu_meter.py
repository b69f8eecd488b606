"""The judge's CPU meter and the timing thread budget, on real child processes.

A child runs its work on a thread it creates and joins (the blind spot of the threads alive at a reading); each
meter that opens here must see that thread's CPU time, ``schedstat`` must not. The budget: a child spawned under
:func:`cpu_budget.pinned` runs on those CPUs only, the judge sees a thread that widens its affinity, and the
containment filter refuses ``sched_setaffinity`` once installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from pytest_cannbench.workers import cpu_budget, cpu_meter
from pytest_cannbench.workers.cpu_meter import CpuMeter

BURNER = textwrap.dedent("""
    import sys, threading, time
    def burn(seconds):
        t = time.thread_time()
        while time.thread_time() - t < seconds:
            pass
    for line in sys.stdin:
        worker = threading.Thread(target=burn, args=(float(line),))
        worker.start()
        worker.join()
        print("done", flush=True)
""")


def burner() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def burn(child: subprocess.Popen, seconds: float) -> None:
    """``seconds`` of CPU on a thread the child creates and joins; returns once that thread is gone from /proc
    (Python's join returns a moment before the thread itself has exited)."""
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(f"{seconds}\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "done"
    deadline = time.monotonic() + 10
    while len(os.listdir(f"/proc/{child.pid}/task")) > 1 and time.monotonic() < deadline:
        time.sleep(0.005)


def stop(child: subprocess.Popen) -> None:
    assert child.stdin is not None
    child.stdin.close()
    child.wait(timeout=30)


def opened(kind: str, pid: int) -> CpuMeter:
    meter = CpuMeter.open(pid, kinds=(kind,))
    if meter.kind != kind:
        meter.close()
        pytest.skip(f"{kind} cannot be opened here: {meter.note}")
    return meter


@pytest.mark.parametrize("kind", ["perf_task_clock", "cgroup_v1", "cgroup_v2"])
def test_meter_keeps_a_thread_that_exited(kind: str) -> None:
    child = burner()
    try:
        meter = opened(kind, child.pid)
        try:
            before = meter.read()
            burn(child, 0.3)
            after = meter.read()
            all_s, busiest_s = cpu_meter.used(before, after)
            assert all_s is not None and all_s >= 0.27, (kind, all_s)  # the joined thread's 0.3 s
            assert busiest_s is not None and busiest_s < 0.1  # the living threads never ran it
            # a second one: the counts of exited threads keep adding up
            burn(child, 0.2)
            assert (meter.total() or 0) - (after.total or 0) >= 0.18
        finally:
            directory = meter.cgroup
            meter.close()
        stop(child)
        if directory is not None:
            assert not directory.exists(), "the worker's cgroup outlived it"
    finally:
        child.kill()
        child.wait()


def test_schedstat_fallback_misses_it_and_says_so() -> None:
    child = burner()
    try:
        meter = CpuMeter.open(child.pid, kinds=("schedstat",))
        assert meter.kind == "schedstat" and not meter.keeps_exited
        assert "threads that exit inside a batch" in meter.note
        before = meter.read()
        burn(child, 0.2)
        all_s, _ = cpu_meter.used(before, meter.read())
        assert all_s is not None and all_s < 0.1  # the blind spot the other meters close
        stop(child)
    finally:
        child.kill()
        child.wait()


def test_meter_of_a_gone_worker_reads_nothing_and_closes() -> None:
    child = burner()
    meter = CpuMeter.open(child.pid)
    stop(child)
    assert meter.read().threads == {}
    meter.close()
    meter.close()


def test_budget_cpus_are_blocks_per_judge() -> None:
    cpus = list(range(8))
    assert cpu_budget.budget_cpus(1, 0, cpus) == (0,)
    assert cpu_budget.budget_cpus(1, 1, cpus) == (1,)
    assert cpu_budget.budget_cpus(2, 1, cpus) == (2, 3)
    assert cpu_budget.budget_cpus(3, 2, cpus) == (0, 6, 7)  # wraps around: judges share only when they must
    assert cpu_budget.budget_cpus(8, 0, cpus) == tuple(cpus) == cpu_budget.budget_cpus(0, 5, cpus)
    assert cpu_budget.budget_cpus(1, 2, [4, 6, 9]) == (9,)
    assert cpu_budget.format_list((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    assert cpu_budget.parse_list("0-2,5,7-8\n") == {0, 1, 2, 5, 7, 8}
    shared = cpu_budget.describe(1, 4, [0, 1])
    assert shared["enforced_by"] == "cpu_affinity" and "share" in str(shared["weak"])
    assert "every CPU" in str(cpu_budget.describe(2, 1, [0, 1])["weak"])


@pytest.mark.skipif(len(cpu_budget.allowed_cpus()) < 2, reason="needs two CPUs to narrow to one")
def test_spawned_worker_keeps_the_budget_and_a_widening_is_seen() -> None:
    allowed = cpu_budget.allowed_cpus()
    budget = (allowed[-1],)
    widen = f"import os, sys; os.sched_setaffinity(0, {allowed!r}); print('ok', flush=True); sys.stdin.read()"
    with cpu_budget.pinned(budget) as why:
        assert why == ""
        child = subprocess.Popen([sys.executable, "-c", "import sys; print('ok', flush=True); sys.stdin.read()"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        wide = subprocess.Popen([sys.executable, "-c", widen], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
    assert sorted(os.sched_getaffinity(0)) == allowed  # the judge's own thread got its CPUs back
    try:
        for proc in (child, wide):
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ok"
        affinities = cpu_budget.thread_affinities(child.pid)
        assert affinities and all(a == set(budget) for a in affinities.values()), affinities
        assert cpu_budget.widened(child.pid, budget) == ""
        found = cpu_budget.widened(wide.pid, budget)
        assert "outside the timing thread budget" in found and f"CPUs {budget[0]}" in found, found
    finally:
        for proc in (child, wide):
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("npu, expect", [(False, "refused"), (True, "allowed")])
def test_containment_refuses_sched_setaffinity(npu: bool, expect: str) -> None:
    """Refused where the budget is set; on NPUs (processes allowed) the runtime places its threads itself."""
    code = textwrap.dedent(f"""
        import os
        from pytest_cannbench.guard.containment import install_filter
        status = install_filter(allow_processes={npu})
        if not status.startswith("on"):
            print("unavailable", status)
            raise SystemExit(0)
        try:
            os.sched_setaffinity(0, os.sched_getaffinity(0))
            print("allowed")
        except PermissionError:
            print("refused")
        print("read", len(os.sched_getaffinity(0)) > 0)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    if done.stdout.startswith("unavailable"):
        pytest.skip(done.stdout)
    assert done.stdout.split() == [expect, "read", "True"], (done.stdout, done.stderr[-2000:])



def test_watch_of_each_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_cannbench.workers.cpu_watch import for_judge

    cpus = cpu_budget.allowed_cpus()
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert for_judge(1, "gw1").cpus == cpu_budget.budget_cpus(1, 1, cpus)
    assert for_judge(1, "main").cpus == cpu_budget.budget_cpus(1, 0, cpus)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")  # an inline session inside an xdist worker takes its index
    assert for_judge(1, "main").cpus == cpu_budget.budget_cpus(1, 1, cpus)
    npu = for_judge(1, "gw0", "npu:0")
    assert npu.cpus == () and "NPU" in npu.budget_note and npu.marks()["budget_note"] == npu.budget_note


def test_judge_slots_are_handed_out_lowest_free_first_and_freed_with_their_process(tmp_path) -> None:
    """A service's judges claim their index on the host (their workers' CPU block): two live claims never share
    one, a closed claim (an ended process) frees its index, and a claim held by another process is skipped."""
    first, held_first = cpu_budget.claim_slot(tmp_path)
    second, held_second = cpu_budget.claim_slot(tmp_path)
    assert (first, second) == (0, 1)
    held_first.close()
    again, held_again = cpu_budget.claim_slot(tmp_path)
    assert again == 0
    code = ("import sys, time; from pathlib import Path; from pytest_cannbench.workers import cpu_budget; "
            "i, h = cpu_budget.claim_slot(Path(sys.argv[1])); print(i, flush=True); time.sleep(60)")
    other = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "2"
        held_again.close()
        held_second.close()
        mine = [cpu_budget.claim_slot(tmp_path) for _ in range(3)]
        assert [index for index, _ in mine] == [0, 1, 3]  # 2 is the other process's
    finally:
        other.kill()
        other.wait()
    assert cpu_budget.claim_slot(tmp_path)[0] == 2  # freed by the kernel when that process ended
    assert cpu_budget.budget_cpus(1, 1, [0, 1]) == (1,) and cpu_budget.budget_cpus(1, 3, [0, 1]) == (1,)

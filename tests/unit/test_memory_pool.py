"""Issue 22: the session's memory pool. Cases reserve their estimated need from one ledger file; what cannot fit
waits in arrival order; a dead judge's reservation is dropped. Real files, real flock, real threads and processes."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_cannbench.workers.memory_pool import MemoryPool, PoolSize, size_pool

GIB = 1 << 30
ROOT = Path(__file__).resolve().parents[2]


def test_auto_is_the_largest_case_and_a_third_quartile_one_per_other_worker() -> None:
    needs = [1, 2, 3, 100, 2 * GIB, 5 * GIB, 7, 8]  # sorted: 1 2 3 7 8 100 | 2 GiB 5 GiB; 6th of 8 is the quartile
    size = size_pool(needs, workers=2, slots=20 * GIB, mode="auto")
    assert (size.bytes, size.rule, size.largest, size.quartile) == (5 * GIB + 100, "auto", 5 * GIB, 100)
    assert "the largest case, 5.00 GiB, + 1 x a case at the third quartile, 0.00 GiB" in size.describe()
    assert size_pool(needs, workers=4, slots=20 * GIB, mode="auto").bytes == 5 * GIB + 3 * 100
    assert size_pool([3, 1, 2, 4], workers=2, slots=GIB, mode="auto").quartile == 3
    # small cases: never less than 1 GiB per worker (holding them apart would save less than it costs)
    small = size_pool([5, 300 << 20], workers=2, slots=20 * GIB, mode="auto")
    assert small.bytes == 2 * GIB and "1 GiB per worker: every case is small" in small.describe()
    assert size_pool([5], workers=2, slots=GIB, mode="auto").bytes == GIB  # the slots still bound it
    # equal cases all run at once: n of them fit
    assert size_pool([2 * GIB] * 10, workers=4, slots=20 * GIB, mode="auto").bytes == 8 * GIB
    # never more than the judges' slots together (the memory plan's bound)
    assert size_pool([2 * GIB] * 10, workers=4, slots=3 * GIB, mode="auto").bytes == 3 * GIB


def test_machine_asked_and_no_estimates() -> None:
    assert size_pool([GIB], 2, 9 * GIB, "machine") == PoolSize(9 * GIB, "machine", workers=2)
    assert size_pool([], 2, 9 * GIB, "auto").rule == "machine"  # nothing estimated: nothing to size by
    asked = size_pool([GIB], 2, 9 * GIB, 2.5)
    assert (asked.bytes, asked.rule) == (int(2.5 * GIB), "asked") and "cann_memory_pool" in asked.describe()
    assert size_pool([GIB], 2, 9 * GIB, 50.0).bytes == 9 * GIB


def test_one_judge_never_waits() -> None:
    pool = MemoryPool(None, 1)
    with pool.reserve(10 * GIB) as waited, pool.reserve(None) as again:
        assert waited == again == 0.0


def _ledger(path: Path) -> list[tuple[int, int | None, bool]]:
    """(ticket, bytes held, admitted) per ticket, read under the ledger's lock (a writer rewrites it in place:
    unlocked, a read can land between its truncate and its write)."""
    with open(path) as fh:
        fcntl.flock(fh, fcntl.LOCK_SH)
        try:
            text = fh.read()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    return [(t["ticket"], t["held"], t["admitted"]) for t in json.loads(text)["tickets"]]


class _Case(threading.Thread):
    """One case of another judge: reserves ``nbytes``, records when it got them, holds until told to go."""

    def __init__(self, path: Path, capacity: int, nbytes: int | None, log: list[str], name: str,
                 first: int | None = None) -> None:
        super().__init__(daemon=True)
        self.pool, self.nbytes, self.first, self.log, self.tag = MemoryPool(path, capacity), nbytes, first, log, name
        self.admitted, self.go = threading.Event(), threading.Event()

    def run(self) -> None:
        with self.pool.reserve(self.nbytes, self.first):
            self.log.append(self.tag)
            self.admitted.set()
            self.go.wait(10)


def test_a_case_waits_for_room_and_later_cases_queue_behind_it(tmp_path: Path) -> None:
    path, log = tmp_path / "memory.pool", []
    a = _Case(path, 4 * GIB, 3 * GIB, log, "a")
    a.start()
    assert a.admitted.wait(5)
    b = _Case(path, 4 * GIB, 2 * GIB, log, "b")  # does not fit beside a
    b.start()
    time.sleep(0.1)
    c = _Case(path, 4 * GIB, 1 * GIB, log, "c")  # would fit beside a, but b came first: no overtaking
    c.start()
    time.sleep(0.3)
    assert log == ["a"] and not b.admitted.is_set() and not c.admitted.is_set()
    assert [admitted for _, _, admitted in _ledger(path)] == [True, False, False]
    a.go.set()
    assert b.admitted.wait(5) and c.admitted.wait(5)  # 2 + 1 GiB fit together once a let go
    assert log[0] == "a" and sorted(log[1:]) == ["b", "c"]
    b.go.set()
    c.go.set()
    for t in (a, b, c):
        t.join(5)
    assert _ledger(path) == []


def test_the_whole_pool_waits_for_everyone_and_keeps_everyone_out(tmp_path: Path) -> None:
    path, log = tmp_path / "memory.pool", []
    small = _Case(path, 4 * GIB, 0, log, "small")  # a case with no estimate still takes a ticket
    small.start()
    assert small.admitted.wait(5)
    alone = _Case(path, 4 * GIB, None, log, "alone")
    alone.start()
    time.sleep(0.2)
    assert not alone.admitted.is_set()
    small.go.set()
    assert alone.admitted.wait(5)
    after = _Case(path, 4 * GIB, 0, log, "after")
    after.start()
    time.sleep(0.2)
    assert not after.admitted.is_set()  # nothing runs beside a case that runs alone
    alone.go.set()
    assert after.admitted.wait(5)
    after.go.set()
    assert log == ["small", "alone", "after"]


def test_a_case_over_the_pool_runs_once_nothing_else_holds_any(tmp_path: Path) -> None:
    pool = MemoryPool(tmp_path / "memory.pool", GIB)
    with pool.reserve(3 * GIB) as waited:
        assert waited < 1.0


HOLDER = """
import sys, time
from pathlib import Path
from pytest_cannbench.workers.memory_pool import MemoryPool
with MemoryPool(Path(sys.argv[1]), 4 << 30).reserve(3 << 30):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
def test_a_dead_judges_reservation_is_dropped(tmp_path: Path, reaped: bool) -> None:
    """An xdist worker killed mid-case (OOM, a crash) must not keep its bytes for the rest of the session, also
    while its parent has not reaped it yet."""
    path = tmp_path / "memory.pool"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        log: list[str] = []
        other = _Case(path, 4 * GIB, 2 * GIB, log, "other")
        other.start()
        time.sleep(0.3)
        assert not other.admitted.is_set()  # another process holds 3 of 4 GiB
        os.kill(holder.pid, signal.SIGKILL)
        if reaped:
            holder.wait(5)
        else:  # dead, not reaped: /proc still lists it, in state Z
            deadline = time.monotonic() + 5
            while Path(f"/proc/{holder.pid}/stat").read_text().split(") ")[1][0] != "Z":
                assert time.monotonic() < deadline
                time.sleep(0.01)
        assert other.admitted.wait(5)
        other.go.set()
        other.join(5)
    finally:
        holder.kill()
        holder.wait(5)
    assert _ledger(path) == []


@pytest.mark.parametrize("nbytes", [GIB, None])
def test_a_reservation_is_returned_when_the_case_raises(tmp_path: Path, nbytes: int | None) -> None:
    path = tmp_path / "memory.pool"
    pool = MemoryPool(path, 4 * GIB)
    with pytest.raises(RuntimeError), pool.reserve(nbytes):
        raise RuntimeError("the golden failed")
    assert _ledger(path) == []


def _in_thread(work) -> tuple[threading.Thread, threading.Event]:
    done = threading.Event()

    def run() -> None:
        work()
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done


def test_a_case_between_goldens_makes_room_and_grows_back_first(tmp_path: Path) -> None:
    """A large golden's case holds its candidate phase's need between its goldens: another case runs then; its
    second golden waits for that case, and a newcomer cannot take the room it waits for."""
    path, log = tmp_path / "memory.pool", []
    a = MemoryPool(path, 4 * GIB)
    with a.reserve(3 * GIB):
        b = _Case(path, 4 * GIB, 2 * GIB, log, "b")
        b.start()
        time.sleep(0.2)
        assert not b.admitted.is_set()  # 3 + 2 GiB
        assert a.hold(GIB) < 0.5  # the candidate phase: less at once
        assert b.admitted.wait(5)
        grow, grown = _in_thread(lambda: a.hold(3 * GIB))  # the second pass's golden
        time.sleep(0.2)
        assert not grown.is_set()
        c = _Case(path, 4 * GIB, GIB, log, "c")  # would fit beside a's 1 and b's 2, not beside a's 3
        c.start()
        time.sleep(0.2)
        assert not c.admitted.is_set()
        b.go.set()
        assert grown.wait(5) and c.admitted.wait(5)  # a's 3 + c's 1
        assert [held for _, held, _ in _ledger(path)] == [3 * GIB, GIB]
        c.go.set()
        grow.join(5)


def test_a_newcomer_that_could_leave_two_cases_stuck_waits(tmp_path: Path) -> None:
    """The banker's test: a holds 1 of its 4 GiB claim; b asks 2 now, 4 later. Both fit now, but then neither
    could grow until the other ended: b waits until a is done."""
    path, log = tmp_path / "memory.pool", []
    a = MemoryPool(path, 4 * GIB)
    with a.reserve(4 * GIB, GIB):
        b = _Case(path, 4 * GIB, 4 * GIB, log, "b", first=2 * GIB)
        b.start()
        time.sleep(0.3)
        assert not b.admitted.is_set()
        assert a.hold(4 * GIB) == pytest.approx(0.0, abs=0.5)  # a can still grow: nothing else holds any
    assert b.admitted.wait(5)
    b.go.set()
    b.join(5)


def test_growth_never_passes_the_claim_and_the_whole_pool_ignores_holds(tmp_path: Path) -> None:
    path = tmp_path / "memory.pool"
    pool = MemoryPool(path, 4 * GIB)
    with pool.reserve(2 * GIB, GIB):
        pool.hold(10 * GIB)
        assert _ledger(path)[0][1] == 2 * GIB
    with pool.reserve(None):
        assert pool.hold(GIB) < 0.5 and _ledger(path)[0][1] is None
    with pytest.raises(RuntimeError), pool.reserve(GIB), pool.reserve(GIB):
        pass
    assert MemoryPool(path, GIB).hold(GIB) == 0.0  # no reservation: nothing to hold

"""One case through the run's memory plan: refused, run beside the others, or run alone.

- its estimated need is over what one case may ever have (``MemoryPlan.largest``): ``too_large``, never started;
- it fits a slot: it reserves its estimated need from the session's memory pool (:mod:`..workers.memory_pool`)
  from setup to teardown, waiting while the pool cannot hold it beside the cases in flight. It holds its golden
  phase's need while a golden runs (setup, the second pass, timing) and its candidate phase's between them
  (:func:`hold_phase`), so a large golden's case makes room for another case while its candidate runs;
- it fits only the whole session's memory (under xdist): it reserves the whole pool, so the other judges finish
  their case and wait; if the machine's other users have since taken that memory (MemAvailable now), it is
  ``too_large`` after all, rather than a case for the OOM killer; else its golden and candidate workers get the
  budgets of the whole session for this case (the golden worker is restarted with them, and again after it,
  since RLIMIT_AS cannot be raised from outside).

The pool's size comes from the needs of every case the session will run (:func:`size_session_pool`, at the end of
collection: every xdist worker collects the same cases, so every judge sizes the same pool).

Lock order: the memory pool before the timing fence, never the other way round; a case that must wait to grow
again inside accuracy work (its second pass's golden, under the fence's shared hold) lets waiting windows pass
while it waits.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from pytest_cannbench.workers.memory_plan import HEADROOM, mem_available, too_large
from pytest_cannbench.workers.memory_pool import size_pool as sized

if TYPE_CHECKING:
    from pytest_cannbench.core.judge import Judge
    from pytest_cannbench.phases import PhaseClock
    from pytest_cannbench.taskformat.memory_need import MemoryNeed
    from pytest_cannbench.workers.candidate_client import CandidateWorker
    from pytest_cannbench.workers.memory_plan import MemoryPlan
    from pytest_cannbench.workers.memory_pool import PoolSize


GIB = 1 << 30


def available() -> int | None:
    return mem_available()


def room_now(plan: MemoryPlan, available_now: int | None) -> int:
    """What a case running alone may have at this moment: the plan's whole room, less what the machine's other
    users took since the plan was made (MemAvailable now, while this session's other processes idle)."""
    if available_now is None or plan.bound == "--cann-session-memory":  # asked: the user vouches for it
        return plan.whole
    return min(plan.whole, int(available_now * (1 - HEADROOM)))


def runs_alone(judge: Judge, need: MemoryNeed | None) -> bool:
    """Whether :func:`admit` gives the case the whole session (its estimated need is over a slot)."""
    return judge.memory_plan.alone(need.peak if need is not None else 0)


def more_alone(judge: Judge) -> bool:
    """Whether running alone gives a golden more memory than its slot (several workers, no budget asked)."""
    plan = judge.memory_plan
    return plan.golden_whole > plan.golden


def size_pool(judge: Judge, peaks: dict[str, int]) -> PoolSize:
    """Size the judge's memory pool from the estimated peaks of the cases it will run (too_large ones will not:
    pass only those within ``plan.largest``); kept on the judge for its pool."""
    plan = judge.memory_plan
    judge.pool_size = sized(list(peaks.values()), plan.workers, plan.workers * plan.slot, judge.settings.memory_pool)
    return judge.pool_size


def claims(judge: Judge, peaks: dict[str, int]) -> dict[str, int]:
    """Each case's claim on the pool for a scheduler that orders cases by need: a case that runs alone claims
    the whole pool."""
    plan = judge.memory_plan
    pool = judge.pool_size.bytes if judge.pool_size is not None else plan.workers * plan.slot
    return {name: pool if plan.alone(peak) else min(peak, pool) for name, peak in peaks.items()}


def hold_phase(judge: Judge, need: MemoryNeed | None, phase: str, clock: PhaseClock) -> None:
    """Hold what the case's next ``phase`` needs of its reservation: ``golden`` or ``candidate`` in the first
    pass, ``golden_kept`` or ``candidate_kept`` beside the first reference (the second pass), ``peak`` (the
    timing); a wait for more is its ``memory_wait``."""
    if need is None:
        return
    nbytes = {
        "golden": need.golden,
        "candidate": need.candidate,
        "golden_kept": need.golden + need.kept,
        "candidate_kept": need.candidate + need.kept,
        "peak": need.peak,
    }[phase]
    waited = judge.memory_pool().hold(nbytes, judge.fence().let_windows_pass)
    if waited >= 0.001:
        clock.add("memory_wait", waited)


def admit(
    judge: Judge,
    need: MemoryNeed | None,
    workers: list[CandidateWorker],
    hold: contextlib.ExitStack,
    clock: PhaseClock | None = None,
    alone: bool = False,
) -> str | None:
    """The ``too_large`` message, or None with the case's hold entered on ``hold`` (closed at teardown).

    ``workers`` are the candidate-side workers the case will call (their watchdog limits are raised when it
    runs alone). ``clock`` gets the wait as ``memory_wait``. ``alone``: whatever its estimate, the case runs alone
    (a golden that ran out of its slot's memory, which the estimate from the case's tensors cannot see, gets one
    more try with the whole session)."""
    plan = judge.memory_plan
    peak = need.peak if need is not None else 0
    if need is not None:
        message = too_large(peak, need.describe(), plan)
        if message is not None:
            return message
    pool = judge.memory_pool()
    alone = alone or plan.alone(peak)
    waited = hold.enter_context(pool.reserve(None if alone else peak, need.golden if need is not None else None))
    if clock is not None and pool.path is not None:
        clock.add("memory_wait", waited)
    if not alone:
        return None
    room = room_now(plan, available())
    if need is not None and peak > room:  # the machine's other users took what the plan saw at the start
        hold.close()
        return too_large(peak, need.describe() + f"; {room / GIB:.1f} GiB available now", plan, room)
    golden = judge.golden_service().worker
    golden.budget(plan.golden_whole)
    hold.callback(golden.budget, plan.golden)
    for worker in workers:
        before = worker.memory_bytes
        worker.memory_bytes = plan.candidate_whole
        hold.callback(setattr, worker, "memory_bytes", before)
    return None

"""Between the HTTP front and the judges: a bounded queue, one runner per judge, deadlines, retries, the drain.

- **Bounded**: at most ``capacity`` candidates wait; a request that does not fit is refused whole
  (:class:`QueueFull`, the front's 429 with ``Retry-After``), never half-queued.
- **Deadlines**: a job's deadline counts from its arrival. A job still queued at its deadline is answered
  ``timeout`` then and there; a running one is answered at its deadline with the cases graded so far (the rest
  ``deadline_exceeded``), while its judge finishes the call it is in (a hanging call ends at the profile's case
  timeout, inside the grader). A judge still in one call past ``stuck_s`` is killed and restarted by Ray.
- **Idle judges help**: a judge with nothing queued joins a running accuracy-only job whose cases left to start
  would take longer than opening the submission again (its own build and worker) costs, and takes the next case
  from it: a hanging or slow candidate, or one request of many cases, is not graded one case at a time while
  judges wait. The estimate is the job's graded cases' mean time, or how long its case in flight has run. A timed
  job keeps one judge: two judges of one host timing at once have no quiet windows between them.
- **Nothing lost**: a judge that dies (its process or its node) fails its in-flight call with a Ray actor error;
  its case goes back to the job; a job no other judge is working on goes back to the head of the queue for any
  judge. A second loss (``attempts``) answers the job ``harness_error`` (``judge_lost``). The dead judge's runner
  waits until Ray has it back.
- **Drain**: :meth:`Dispatcher.drain` refuses new jobs (:class:`Draining`, a 503) and waits until the queue is
  empty and nothing runs.

Every job ends in exactly one answer (``Job.finish``), whichever of these comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pytest_cannbench import outcome as oc
from pytest_cannbench.serve.answer import grade_answer, placeholder
from pytest_cannbench.serve.catalog import CaseInfo
from pytest_cannbench.serve.hints import DEADLINE, JUDGE_LOST, NOT_GRADED_YET
from pytest_cannbench.serve.intake import Payload
from pytest_cannbench.serve.metrics import Metrics
from pytest_cannbench.serve.rotation import Epoch

MAX_ATTEMPTS = 2
HELP_MIN_S = 0.5  # a job's work left to start below this is not worth a second judge's open
HELP_OPENS = 2.0  # ... nor below this many of its first open's time
HELP_POLL_S = 0.25  # how often an idle judge looks again at the running jobs
KEEP_DONE = 10000  # answered jobs kept for GET /v1/jobs/{id}, oldest forgotten first


class QueueFull(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the queue is full; retry after {retry_after} s")
        self.retry_after = retry_after


class Draining(Exception):
    pass


class JudgeLost(Exception):
    pass


@dataclass
class Job:
    id: str
    cases: list[CaseInfo]
    payload: Payload
    overrides: dict[str, Any] = field(repr=False)  # settings overrides: the epoch's secret is in them
    perf: bool
    provenance: dict[str, Any]
    deadline: float  # time.monotonic()
    stuck_s: float  # past this in one call, the judge is killed
    epoch: Epoch | None = None
    name: str | None = None
    arrived: float = field(default_factory=time.monotonic)
    started: float | None = None
    state: str = "queued"
    attempts: int = 0
    losses: int = 0  # judges lost while grading it
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    claimed: dict[str, float] = field(default_factory=dict)  # case key -> when a judge started it
    judges_on: int = 0  # judges attached (opening it or taking its cases)
    opened_s: float | None = None  # its first judge's open: what a helper would pay again
    opened_ok: bool | None = None  # its first judge's build and install worked
    open_message: str = ""  # why its build failed, if it did
    graded_s: float = 0.0  # its graded cases' seconds, summed
    answer: dict[str, Any] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    on_finish: list[Callable[[Job], None]] = field(default_factory=list)

    def _unstarted(self) -> Iterator[CaseInfo]:
        return (c for c in self.cases if c.key not in self.outcomes and c.key not in self.claimed)

    def next_case(self) -> CaseInfo | None:
        return next(self._unstarted(), None)

    def complete(self) -> bool:
        return len(self.outcomes) >= len(self.cases)

    def work_left(self, now: float) -> float:
        """Seconds its unstarted cases would take one after another: their count times the mean graded case, or
        times the longest its cases in flight have run (a lower bound, before any is graded)."""
        left = sum(1 for _ in self._unstarted())
        if not left:
            return 0.0
        per_case = self.graded_s / len(self.outcomes) if self.outcomes else 0.0
        running = max((now - t for t in self.claimed.values()), default=0.0)
        return left * max(per_case, running)

    def finish(self, code: str | None = None, message: str = "") -> bool:
        """Answer once: every selected case without an outcome gets ``code`` (the deadline's, a lost judge's)."""
        if self.answer is not None:
            return False
        cases = []
        for case in self.cases:
            got = self.outcomes.get(case.key)
            if got is None:
                got = placeholder(case.plain(), code or NOT_GRADED_YET, message or "no verdict")
            cases.append(got)
        now = time.monotonic()
        queued = (self.started or now) - self.arrived
        seconds = {
            "queued": round(queued, 3),
            "graded": round(now - (self.started or now), 3),
            "total": round(now - self.arrived, 3),
        }
        self.answer = grade_answer(
            cases,
            perf=self.perf,
            provenance=self.provenance,
            job_id=self.id,
            name=self.name,
            message=message,
            seconds=seconds,
            attempts=max(self.attempts, 1),
        )
        self.state = "done"
        # an answered job keeps its answer only: not its files (up to the submission limit) nor the secret
        self.payload, self.overrides = Payload(), {}
        self.done.set()
        for callback in self.on_finish:
            callback(self)
        return True


@dataclass
class JudgeHandle:
    name: str
    actor: Any  # a Ray actor handle of serve.judge.JudgeCore
    state: str = "starting"  # starting, ready, busy, restarting
    info: dict[str, Any] = field(default_factory=dict)
    busy_s: float = 0.0
    graded: int = 0


def _lost_errors() -> tuple[type[BaseException], ...]:
    from ray import exceptions as rx

    return (rx.RayActorError, rx.WorkerCrashedError, rx.NodeDiedError, rx.ObjectLostError, rx.OutOfMemoryError)


class Dispatcher:
    def __init__(self, judges: list[JudgeHandle], capacity: int, metrics: Metrics) -> None:
        self.judges, self.capacity, self.metrics = judges, capacity, metrics
        self.pending: deque[Job] = deque()
        self.jobs: OrderedDict[str, Job] = OrderedDict()
        self.running: set[str] = set()
        self.draining = False
        self.wake = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []
        self.mean_job_s = 5.0
        self.lost = _lost_errors()
        metrics.bind(lambda: float(len(self.pending)), lambda: float(len(self.running)))

    # ------------------------------------------------------------------------------------------ the front's side

    def start(self) -> None:
        self.tasks = [asyncio.get_running_loop().create_task(self._runner(j)) for j in self.judges]

    def retry_after(self, extra: int = 0) -> int:
        ready = max(1, sum(1 for j in self.judges if j.state in ("ready", "busy")))
        return int(max(1, min(600, round((len(self.pending) + extra) * self.mean_job_s / ready))))

    def submit(self, jobs: list[Job]) -> None:
        """Queue every job of a request, or none (:class:`QueueFull`, :class:`Draining`)."""
        if self.draining:
            raise Draining()
        if len(self.pending) + len(jobs) > self.capacity:
            raise QueueFull(self.retry_after(len(jobs)))
        loop = asyncio.get_running_loop()
        for job in jobs:
            job.id = job.id or secrets.token_hex(16)
            self.jobs[job.id] = job
            self.pending.append(job)
            loop.call_at(loop.time() + max(0.0, job.deadline - time.monotonic()), self._expire, job)
        while len(self.jobs) > KEEP_DONE + self.capacity:
            oldest = next(iter(self.jobs.values()))
            if oldest.state != "done":
                break
            self.jobs.popitem(last=False)
        self.wake.set()

    def _help_target(self) -> Job | None:
        """The running job an idle judge gains most by joining, if any pays for a second open."""
        now, best, gain = time.monotonic(), None, 0.0
        for job_id in self.running:
            job = self.jobs.get(job_id)
            if job is None or job.answer is not None or job.opened_s is None or job.judges_on == 0:
                continue
            if job.perf:  # two judges timing one candidate at once time each other's noise (no shared fence)
                continue
            left = job.work_left(now)
            if left >= max(HELP_MIN_S, HELP_OPENS * job.opened_s) and left > gain:
                best, gain = job, left
        return best

    def _may_help_soon(self) -> bool:
        return any(
            (job := self.jobs.get(i)) is not None and job.answer is None and job.next_case() is not None
            for i in self.running
        )

    def position(self, job: Job) -> int | None:
        if job.state != "queued":
            return 0 if job.state == "running" else None
        try:
            return self.pending.index(job)
        except ValueError:
            return None

    async def drain(self, timeout_s: float) -> bool:
        """Refuse new jobs and wait for the queued and running ones; False if ``timeout_s`` ran out first."""
        self.draining = True
        end = time.monotonic() + timeout_s
        while (self.pending or self.running) and time.monotonic() < end:
            await asyncio.sleep(0.2)
        return not (self.pending or self.running)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for job in list(self.pending) + [self.jobs[i] for i in self.running if i in self.jobs]:
            job.finish(NOT_GRADED_YET, "the service stopped before this candidate was graded")
        self.pending.clear()

    # ------------------------------------------------------------------------------------------ deadlines

    def _expire(self, job: Job) -> None:
        if job.state == "queued":
            with contextlib.suppress(ValueError):
                self.pending.remove(job)
            job.finish(
                NOT_GRADED_YET,
                f"the deadline passed after {time.monotonic() - job.arrived:.1f} s in the "
                "queue, before a judge was free",
            )

    # ------------------------------------------------------------------------------------------ the judges' side

    async def _runner(self, judge: JudgeHandle) -> None:
        while True:
            if judge.state in ("starting", "restarting"):
                await self._await_judge(judge)
                continue
            job, helping = await self._next()
            await self._run(judge, job, helping)

    async def _next(self) -> tuple[Job, bool]:
        """The next queued job, else a running one to help; (job, helping)."""
        while True:
            while self.pending:
                job = self.pending.popleft()
                if job.answer is None:
                    return job, False
            target = self._help_target()
            if target is not None:
                return target, True
            self.wake.clear()
            if self._may_help_soon():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), HELP_POLL_S)
            else:
                await self.wake.wait()

    async def _await_judge(self, judge: JudgeHandle) -> None:
        """Until the judge answers (a new one starting, or Ray restarting a lost one)."""
        delay = 0.5
        while True:
            try:
                judge.info = await asyncio.wait_for(self._ref(judge.actor.info.remote()), 30)
                judge.state = "ready"
                return
            except (asyncio.TimeoutError, *self.lost):  # type: ignore[misc]
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    @staticmethod
    async def _ref(ref: Any) -> Any:
        return await ref

    async def _call(self, judge: JudgeHandle, job: Job, ref: Any) -> tuple[bool, Any]:
        """Await one call of a job on its judge: (True, result), or (False, None) when the job's deadline came
        first (the job is answered then; the call is still awaited, the judge killed past ``stuck_s``).
        Raises :class:`JudgeLost` when the judge died."""
        task = asyncio.ensure_future(self._ref(ref))
        t0 = time.monotonic()
        try:
            try:
                return True, await asyncio.wait_for(asyncio.shield(task), max(0.0, job.deadline - time.monotonic()))
            except asyncio.TimeoutError:
                job.finish(
                    DEADLINE,
                    f"the deadline passed after {time.monotonic() - job.arrived:.1f} s; "
                    f"{len(job.outcomes)} of {len(job.cases)} cases were graded",
                )
            try:
                await asyncio.wait_for(asyncio.shield(task), max(1.0, job.stuck_s - (time.monotonic() - t0)))
            except asyncio.TimeoutError:
                import ray

                ray.kill(judge.actor, no_restart=False)  # stuck in one call: Ray starts it afresh
                judge.state = "restarting"
                self.metrics.judge_restarts.labels(judge.name).inc()
                with contextlib.suppress(BaseException):
                    await task
            return False, None
        except self.lost as exc:
            raise JudgeLost(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
        finally:
            spent = time.monotonic() - t0
            judge.busy_s += spent
            self.metrics.judge_busy.labels(judge.name).inc(spent)

    async def _run(self, judge: JudgeHandle, job: Job, helping: bool = False) -> None:
        if not helping:
            job.state, job.started = "running", job.started or time.monotonic()
            job.attempts += 1
            self.running.add(job.id)
            self.metrics.job_queue.observe(job.started - job.arrived)
        job.judges_on += 1
        judge.state = "busy"
        t0 = time.monotonic()
        try:
            await self._grade(judge, job, helping)
        except JudgeLost as exc:
            judge.state = "restarting"
            self.metrics.judge_restarts.labels(judge.name).inc()
            job.losses += 1
            if job.judges_on > 1:
                job.attempts += 1  # its case is graded again by a judge still on it (a requeue counts when it starts)
            if job.answer is None and job.losses >= MAX_ATTEMPTS:
                job.finish(
                    JUDGE_LOST,
                    f"judge {judge.name} was lost ({exc}) on attempt {job.attempts}; not the candidate's doing",
                )
            elif job.answer is None:
                self.metrics.retries.inc()  # its case went back to the job, for the judges still on it or the next
        finally:
            job.judges_on -= 1
            if job.judges_on == 0:
                self.running.discard(job.id)
                if job.answer is None and job.state == "running":  # cases left, no judge on it: the queue's head
                    job.state, job.opened_s = "queued", None
                    self.pending.appendleft(job)
                    self.wake.set()
            if judge.state == "busy":
                judge.state = "ready"
            if not helping:
                spent = time.monotonic() - t0
                self.mean_job_s = 0.8 * self.mean_job_s + 0.2 * spent
                self.metrics.job_grade.observe(spent)

    async def _grade(self, judge: JudgeHandle, job: Job, helping: bool = False) -> None:
        from ray import exceptions as rx

        try:
            t_open = time.monotonic()
            try:
                ok, opened = await self._call(
                    judge, job, judge.actor.open.remote(job.id, job.payload, job.overrides, bool(self.pending))
                )
            except rx.RayTaskError as exc:
                if not helping:
                    job.finish(oc.HARNESS_ERROR, f"the judge could not open the submission: {_first_line(exc)}")
                return
            if not ok:
                return
            facts = _judge_facts(opened)
            if helping:
                # a helper grades only what its own open agrees with (same build verdict, same settings)
                if opened.get("ok") != job.opened_ok or facts["settings_hash"] != job.provenance.get("settings_hash"):
                    return
                job.provenance.setdefault("helpers", []).append(str(opened.get("name")))
            else:
                facts["flags"] = sorted(set(job.provenance.get("flags") or []) | set(facts["flags"]))
                job.provenance.update(facts)
                job.opened_ok = bool(opened.get("ok"))
                job.open_message = str(opened.get("message", "")) if not opened.get("ok") else ""
                job.opened_s = time.monotonic() - t_open
            while (case := job.next_case()) is not None:
                if job.answer is not None:
                    return
                if time.monotonic() >= job.deadline:  # never start a case whose verdict could not be used
                    job.finish(
                        DEADLINE,
                        f"the deadline passed after {time.monotonic() - job.arrived:.1f} s; "
                        f"{len(job.outcomes)} of {len(job.cases)} cases were graded",
                    )
                    return
                job.claimed[case.key] = started = time.monotonic()
                try:
                    ok, result = await self._call(
                        judge, job, judge.actor.grade.remote(job.id, case.rel_path, case.case_id)
                    )
                except rx.RayTaskError as exc:
                    ok, result = (
                        True,
                        {**placeholder(case.plain(), oc.HARNESS_ERROR, _first_line(exc)), "status": oc.ERROR},
                    )
                finally:
                    job.claimed.pop(case.key, None)  # a lost judge's case goes back to the job
                if not ok:
                    return
                job.outcomes[case.key] = result
                job.graded_s += time.monotonic() - started
                judge.graded += 1
            if job.complete():  # whichever judge records the last case answers
                job.finish(message=job.open_message)
        finally:
            if judge.state != "restarting":
                with contextlib.suppress(Exception):
                    judge.actor.close.remote(job.id)  # queued behind any call still running: ordered on the actor


def _first_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    text = f"{type(cause).__name__}: {cause}"
    return text.strip().splitlines()[0][:500] if text.strip() else type(cause).__name__


def _judge_facts(opened: dict[str, Any]) -> dict[str, Any]:
    return {
        "judge": opened.get("name"),
        "node": opened.get("node"),
        "torch": opened.get("torch"),
        "device": opened.get("device"),
        "settings_hash": opened.get("settings_hash"),
        "sandbox": opened.get("sandbox"),
        "guard": opened.get("guard"),
        "flags": sorted(set(opened.get("flags") or [])),
    }


async def wait_all(jobs: list[Job]) -> None:
    await asyncio.gather(*(job.done.wait() for job in jobs))

"""Judge side of the candidate worker: call operators and run timing batches on it, and survive whatever it does
(its process is :mod:`candidate_process`'s to start, freeze and end).

A crash, ``os._exit``, hang or memory blow-up in a submission ends in one :class:`CandidateResult` with a
status; the worker is killed (with its whole process group) and the next call starts a fresh one. Between calls
the worker is frozen with ``SIGSTOP``: it cannot change its outputs while the judge reads them, nor burn CPU the
judge's checks need.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench import procs
from pytest_cannbench.guard.policy import guard_problems, guard_verdict
from pytest_cannbench.phases import PhaseClock, peak_mib
from pytest_cannbench.workers.batch import BatchResult, StreamedBatch, WorkerStatus
from pytest_cannbench.workers.candidate_process import (
    ASYNC_ESCAPE,
    CRASHED,
    INPUT_MUTATED,
    OK,
    RAISED,
    TIMEOUT,
    CandidateProcess,
    WorkerGone,
)
from pytest_cannbench.workers.contract import Snapshot, escaped, mutated_inputs, process_snapshot
from pytest_cannbench.workers.evidence import profile_keys
from pytest_cannbench.workers.tensor_wire import decode_outputs, plan_batch, plan_call, write_inputs

CASE_LOG_BYTES = 1 << 20  # kept per case: the end of what the submission printed
EXIT_GRACE_POLLS, EXIT_GRACE_S = 4, 0.025  # how long a finished thread may take to disappear from /proc


@dataclass
class CandidateResult:
    status: WorkerStatus
    outputs: list[Any] | None = None  # tensors are views of the region: valid until the next call
    message: str = ""
    seconds: float | None = None
    log_tail: str = ""
    case_log: str | None = None
    flags: list[str] = field(default_factory=list)  # guard findings that did not decide the verdict (warn mode)
    phases: dict[str, float] = field(default_factory=dict)  # the judge's account of the call (phases.PhaseClock)


@dataclass
class CandidateWorker(CandidateProcess):
    """One long-lived worker per pytest process; ``mode`` is ``submission`` or ``golden`` (self-check)."""

    # ------------------------------------------------------------ requests

    def discover(self) -> object:
        """``[[name, source], ...]`` as the worker reports it (validate with interfaces.validate_names)."""
        self._ensure()
        reply = self._exchange({"op": "discover"}, self.startup_timeout_s)
        self._freeze()
        if not reply.get("ok"):
            raise WorkerGone(CRASHED, str(reply.get("error")))
        return reply.get("interfaces")

    def call(self, target: dict[str, Any], kwargs: dict[str, Any], *, expected_out_bytes: int, timeout: float,
             case_log: Path | None = None) -> CandidateResult:
        """Run one operator call; never raises for anything the candidate does."""
        clock = PhaseClock()
        result = self._call(target, kwargs, expected_out_bytes, timeout, case_log, clock)
        result.phases = clock.seconds
        return result

    def _call(self, target: dict[str, Any], kwargs: dict[str, Any], expected_out_bytes: int, timeout: float,
              case_log: Path | None, clock: PhaseClock) -> CandidateResult:
        layout, writes = plan_call(kwargs, expected_out_bytes)
        self.log_mark = procs.log_size(self.log_path)
        self.wipe_tmp(str(target.get("rel_path") or target.get("name")))
        try:
            with clock.phase("start") if self.proc is None or self.proc.poll() is not None else nullcontext():
                self._ensure()
            assert self.proc is not None and self.region is not None  # _ensure started both
            with clock.phase("transfer"):
                write_inputs(self.region, layout, writes)
            before = process_snapshot(self.pid)
            cpu0, t0 = self.watch.read(self.pid), time.perf_counter()
            self._mark("arm")
            reply = self._exchange({"op": "call", "target": target, "args": layout.args,
                                    "region_size": self.region.size, "out_offset": layout.out_offset,
                                    "out_capacity": layout.out_capacity}, timeout)
        except WorkerGone as exc:
            return self._finish(CandidateResult(exc.status, message=str(exc)), case_log)
        except BaseException:  # e.g. pytest-timeout interrupting the wait: the worker's state is unknown
            self.kill()
            raise
        self._freeze()
        clock.add("call", time.perf_counter() - t0, self.watch.used(cpu0, self.pid)[0],
                  peak_mib(self.pid, "VmRSS"))  # the frozen worker's resident memory after its call
        with clock.phase("contract"):
            return self._judged(target, kwargs, reply, layout, before, case_log)

    def _judged(self, target: dict[str, Any], kwargs: dict[str, Any], reply: dict[str, Any], layout: Any,
                before: Snapshot, case_log: Path | None) -> CandidateResult:
        assert self.region is not None  # the judge's checks of a finished call, from outside the frozen worker
        sampled = self._observed(profile_keys(target, case_log), 1, reply) + self.watch.tampering(self._pid, self.mode)
        problem = self._contract(before, layout.args, kwargs)
        if problem is not None:
            return self._finish(problem, case_log)
        verdict, why, flags = guard_verdict(self.import_problems + guard_problems(reply) + sampled, self.guard)
        if verdict is not None:
            return self._finish(CandidateResult(WorkerStatus(verdict), message=why, flags=flags), case_log)
        if not reply.get("ok"):
            return self._finish(CandidateResult(RAISED, message=f"candidate raised {reply.get('error')}"
                                                if reply.get("stage") == "call" else
                                                f"{reply.get('stage')}: {reply.get('error')}"), case_log)
        outputs = decode_outputs(reply.get("outputs"), self.region, layout, self.device)
        seconds = reply.get("seconds")
        return self._finish(CandidateResult(OK, outputs=outputs, flags=flags,
                                            seconds=float(seconds) if isinstance(seconds, (int, float)) else None),
                            case_log)

    def _contract(self, before: Snapshot, args: dict[str, Any],
                  kwargs: dict[str, Any]) -> CandidateResult | None:
        """What the judge checks itself once the worker is frozen: inputs untouched, nothing left running."""
        assert self.proc is not None and self.region is not None  # a call or batch has just run
        left = escaped(before, process_snapshot(self.pid))
        for _ in range(EXIT_GRACE_POLLS if left else 0):  # a joined thread may still be leaving the kernel:
            self._thaw()                                  # let it go (work left running would not)
            time.sleep(EXIT_GRACE_S)
            self._freeze()
            left = escaped(before, process_snapshot(self.pid))
            if not left:
                break
        if left:
            self.kill()  # the escaped work must not outlive the case
            return CandidateResult(ASYNC_ESCAPE, message=f"the call returned with work still running ({left})")
        changed = mutated_inputs(self.region, args, kwargs)
        if changed:
            return CandidateResult(INPUT_MUTATED, message=f"the call modified its input(s) {', '.join(changed)}")
        return None

    def time_batch(self, target: dict[str, Any], kwargs_sets: list[dict[str, Any]], call_sets: list[int], *,
                   warmup: int, expected_out_bytes: int, timeout: float, flush: bool = True, timer: str = "auto",
                   npu: dict[str, Any] | None = None, case_log: Path | None = None,
                   judge_flush: Callable[[], None] | None = None, graph: str = "off") -> BatchResult:
        """``warmup`` calls on set 0, then one timed call per entry of ``call_sets``, each set written only when
        its call is next, ``judge_flush`` (CPU) after each write; never raises for the candidate. The judge's
        clock brackets the exchange. :meth:`open_batch` and :meth:`run_call` interleave several workers'."""
        batch = self.open_batch(target, kwargs_sets, call_sets, warmup=warmup, expected_out_bytes=expected_out_bytes,
                                timeout=timeout, flush=flush, timer=timer, npu=npu, case_log=case_log,
                                judge_flushes=judge_flush is not None, graph=graph)
        while batch.waiting:
            self.run_call(batch, judge_flush)
        assert batch.result is not None
        return batch.result

    def make_room(self, kwargs_sets: list[dict[str, Any]], call_sets: list[int], expected_out_bytes: int,
                  timeout: float) -> None:
        """Grow the region and have the worker map and fault in the batch's part now, not in the window (0.3-0.5 s
        for some hundreds of MiB); pages released after a case again. A worker that fails is :meth:`open_batch`'s."""
        layout, _ = plan_batch(kwargs_sets, call_sets, expected_out_bytes)
        try:
            self._ensure()
            assert self.region is not None  # _ensure made it
            self.region.ensure(layout.size)
            request = {"op": "map", "region_size": self.region.size, "populate": layout.size}
            if self.region.unfaulted(self.pid, layout.size) and self._exchange(request, timeout).get("ok"):
                self.region.faulted(self.pid, layout.size)
        except WorkerGone:
            return
        except BaseException:
            self.kill()
            raise
        self._freeze()

    def open_batch(self, target: dict[str, Any], kwargs_sets: list[dict[str, Any]], call_sets: list[int], *,
                   warmup: int, expected_out_bytes: int, timeout: float, flush: bool = True, timer: str = "auto",
                   npu: dict[str, Any] | None = None, case_log: Path | None = None,
                   judge_flushes: bool = False, graph: str = "off", defer: bool = False) -> StreamedBatch:
        """Start a streamed batch: only the warm-up set is in the region; the worker warms up and waits, frozen,
        for timed call 0 (``batch.waiting``), or has already ended (``batch.result``). ``graph``: the CUDA-graph
        mode (``timing/cuda_graph.py``; ``off`` off CUDA). ``defer``: its final reply waits for :meth:`conclude`."""
        layout, _ = plan_batch(kwargs_sets, call_sets, expected_out_bytes)
        self.log_mark = procs.log_size(self.log_path)
        self.wipe_tmp(str(target.get("rel_path") or target.get("name")))
        batch = StreamedBatch(layout=layout, kwargs_sets=kwargs_sets, call_sets=call_sets, case_log=case_log,
                              deadline=time.perf_counter() + timeout, timeout=timeout,
                              keys=profile_keys(target, case_log), calls=warmup + len(call_sets), deferred=defer)
        try:
            self._ensure()
            assert self.proc is not None and self.region is not None  # _ensure started both
            self.region.ensure(layout.size)
            write_inputs(self.region, layout, layout.set_writes[0])
            batch.written.add(0)
            message = {"op": "time", "target": target, "region_size": self.region.size, "sets": layout.sets,
                       "calls": [{"set": i, "out_offset": c.out_offset, "out_capacity": c.out_capacity}
                                 for i, c in zip(call_sets, layout.calls)],
                       "warmup": warmup, "warmup_set": 0, "flush": flush, "timer": timer, "npu": npu,
                       "stream": True, "judge_flushes": judge_flushes,
                       "graph": graph if self.device.startswith("cuda") else "off"}
            batch.before = process_snapshot(self.pid)
            batch.cpu0 = self.watch.read(self.pid)
            self._mark("arm")
            batch.t0 = time.perf_counter()
            reply = self._exchange(message, timeout)
        except WorkerGone as exc:
            batch.result = self._finish(BatchResult(exc.status, message=str(exc)), case_log)
            return batch
        except BaseException:
            self.kill()
            raise
        self._frame(batch, reply)
        return batch

    def stage_call(self, batch: StreamedBatch) -> None:
        """Write the next timed call's set now (the frozen worker sees it only at its ``go``)."""
        assert batch.waiting and self.region is not None
        index = batch.call_sets[batch.next]
        if index not in batch.written:
            write_inputs(self.region, batch.layout, batch.layout.set_writes[index])
            batch.written.add(index)

    def run_call(self, batch: StreamedBatch, before_go: Callable[[], None] | None = None) -> None:
        """Write the next call's set unless :meth:`stage_call` did, run ``before_go`` (the judge's flush), then let
        the worker run that one call; afterwards it waits again, frozen, or has ended."""
        assert batch.waiting and self.region is not None
        try:
            self.stage_call(batch)
            if before_go is not None:
                before_go()
            remaining = batch.deadline - time.perf_counter()
            if remaining <= 0:
                self.kill()
                raise WorkerGone(TIMEOUT, f"no answer within {batch.timeout:g} s; the worker's process group "
                                          "was killed")
            if batch.ready_at is not None:
                batch.held += time.perf_counter() - batch.ready_at
                batch.ready_at = None
            self._mark("open_window")  # only the samples from here to the next frame judge the call
            reply = self._exchange({"op": "go", "call": batch.next}, remaining)
        except WorkerGone as exc:
            batch.result = self._finish(BatchResult(exc.status, message=str(exc)), batch.case_log)
            return
        except BaseException:
            self.kill()
            raise
        batch.next += 1
        self._frame(batch, reply)

    def stop_batch(self, batch: StreamedBatch) -> None:
        """End a waiting batch early (another worker's batch failed); the worker answers and stays usable."""
        if not batch.waiting:
            return
        try:
            self._exchange({"op": "stop"}, max(1.0, batch.deadline - time.perf_counter()))
            self._freeze()
        except WorkerGone:
            pass
        batch.result = BatchResult(RAISED, message="stopped by the judge")

    def _frame(self, batch: StreamedBatch, reply: dict[str, Any]) -> None:
        """A frame of a streamed batch: ``{"ready": next}`` (the worker waits, now frozen) or its final reply."""
        received = time.perf_counter()
        self._freeze()
        self._mark("close_window")
        ready = reply.get("ready")
        if set(reply) == {"ready"} and type(ready) is int and ready == batch.next < len(batch.call_sets):
            batch.ready_at = received
            return
        if "ready" in reply or "ok" not in reply:
            self.kill()
            batch.result = self._finish(BatchResult(CRASHED, message="the worker broke the timing handshake"),
                                        batch.case_log)
            return
        wall = time.perf_counter() - batch.t0
        batch.ended = (reply, wall, *self.watch.used(batch.cpu0, self.pid))  # CPU: all threads, the busiest
        if not batch.deferred:
            self.conclude(batch)

    def conclude(self, batch: StreamedBatch) -> None:
        """Judge a batch that ended (``open_batch(defer=True)``: after the window, the worker frozen, its region
        untouched), so that these checks do not hold the window."""
        if batch.result is None and batch.ended is not None:
            batch.result = self._conclude(batch, *batch.ended)

    def _conclude(self, batch: StreamedBatch, reply: dict[str, Any], wall: float, cpu_s: float | None,
                  busiest_s: float | None) -> BatchResult:
        """The judge's checks of a finished batch (the worker is frozen): contract, guard, a well-formed reply."""
        call_sets, case_log = batch.call_sets, batch.case_log
        sampled = self._observed(batch.keys, batch.calls, reply) + self.watch.tampering(self._pid, self.mode)
        if reply.get("ok") and batch.next == len(call_sets):  # every set was written: all can be compared
            for args, kwargs in zip(batch.layout.sets, batch.kwargs_sets):
                problem = self._contract(batch.before, args, kwargs)
                if problem is not None:
                    return self._finish(BatchResult(problem.status, message=problem.message, wall_s=wall),
                                        case_log)
        verdict, why, flags = guard_verdict(self.import_problems + guard_problems(reply) + sampled, self.guard)
        if verdict is not None:
            return self._finish(BatchResult(WorkerStatus(verdict), message=why, wall_s=wall, flags=flags), case_log)
        if not reply.get("ok"):
            text = (f"candidate raised {reply.get('error')}" if reply.get("stage") == "call"
                    else f"{reply.get('stage')}: {reply.get('error')}")
            return self._finish(BatchResult(RAISED, message=text, wall_s=wall), case_log)
        if batch.next != len(call_sets):
            self.kill()
            return self._finish(BatchResult(CRASHED, message=f"the worker ended the batch after {batch.next} of "
                                            f"{len(call_sets)} timed calls", wall_s=wall), case_log)
        seconds, outputs, phases = reply.get("seconds"), reply.get("outputs"), reply.get("phases")
        if (not isinstance(seconds, list) or len(seconds) != len(call_sets) or not isinstance(outputs, list)
                or len(outputs) != len(call_sets) or not isinstance(phases, dict)
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in seconds)
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in phases.values())):
            return self._finish(BatchResult(CRASHED, message="the worker sent a malformed timing reply",
                                            wall_s=wall), case_log)
        assert self.region is not None
        decoded = [decode_outputs(d, self.region, c, self.device) for d, c in zip(outputs, batch.layout.calls)]
        notes = [str(n)[:300] for n in reply.get("notes") or []][:10]
        notes += self.evidence.weaker() if self.evidence is not None else []  # its weaker modes are never silent
        return self._finish(BatchResult(OK, seconds=[float(v) for v in seconds], outputs=decoded,
                                        phases={str(k)[:20]: float(v) for k, v in phases.items()}, wall_s=wall,
                                        cpu_s=cpu_s, busiest_cpu_s=busiest_s, held_s=batch.held,
                                        timer=str(reply.get("timer"))[:40], notes=notes, flags=flags), case_log)

    def _finish(self, result: Any, case_log: Path | None) -> Any:
        segment = procs.read_log_since(self.log_path, self.log_mark, CASE_LOG_BYTES)
        if segment.strip():
            lines = [line for line in segment.decode("utf-8", errors="replace").splitlines()
                     if line.strip() and not line.startswith(("Extension modules:", "USDT:"))]  # faulthandler's
            # and the profiler's noise
            result.log_tail = "\n".join(lines[-8:])[-2000:]
            if case_log is not None:
                try:
                    case_log.parent.mkdir(parents=True, exist_ok=True)
                    case_log.write_bytes(segment)
                    result.case_log = str(case_log)
                except OSError:
                    pass
        return result

"""Judge side of the candidate worker: start it, call operators, and survive whatever it does.

A crash, ``os._exit``, hang or memory blow-up in a submission ends in one :class:`CandidateResult` with a
status; the worker is killed (with its whole process group) and the next call starts a fresh one. Between calls
the worker is frozen with ``SIGSTOP``: it cannot change its outputs while the judge reads them, nor burn CPU the
judge's checks need.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench import procs
from pytest_cannbench.guard import sandbox
from pytest_cannbench.guard.policy import guard_problems, guard_verdict
from pytest_cannbench.phases import PhaseClock, peak_mib
from pytest_cannbench.workers import wire
from pytest_cannbench.workers.batch import BatchResult, StreamedBatch
from pytest_cannbench.workers.client import WorkerClient
from pytest_cannbench.workers.contract import Snapshot, escaped, mutated_inputs, process_snapshot
from pytest_cannbench.workers.env_scrub import scrubbed_environment
from pytest_cannbench.workers.evidence import OutsideEvidence, profile_keys
from pytest_cannbench.workers.tensor_wire import Region, decode_outputs, plan_batch, plan_call, write_inputs

# glibc's allocator in a steady state: blocks up to 32 MiB (its largest mmap threshold) come from the heap, and freed
# heap is kept rather than returned to the kernel. With the defaults the dynamic thresholds made an output's memory
# sometimes reused and sometimes fresh, page-faulted and zeroed inside the timed call: the honest C++ clamp on 8 MiB
# timed 1.0-1.4 ms or 5-6.5 ms in one batch (a speed-up interval of +-118%), and the page faults in the kernel were
# sampled as foreign code (one builtin_compute). Candidate and baseline workers get the same setting.
STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}
CASE_LOG_BYTES = 1 << 20  # kept per case: the end of what the submission printed
POLL_S = 0.05  # memory watchdog period while a call runs
EXIT_GRACE_POLLS, EXIT_GRACE_S = 4, 0.025  # how long a finished thread may take to disappear from /proc

OK, RAISED, CRASHED, TIMEOUT, OOM_KILLED, IMPORT_FAILED = "ok", "raised", "crashed", "timeout", "oom_killed", \
    "import_failed"
INPUT_MUTATED, ASYNC_ESCAPE = "input_mutated", "async_escape"
# Guard findings are statuses of their own, named like their failure types (outcome.GUARD_FAILURES); the most
# serious decides when a call has several (guard.policy).


@dataclass
class CandidateResult:
    status: str  # one of the constants above
    outputs: list | None = None  # tensors are views of the region: valid until the next call
    message: str = ""
    seconds: float | None = None
    log_tail: str = ""
    case_log: str | None = None
    flags: list[str] = field(default_factory=list)  # guard findings that did not decide the verdict (warn mode)
    phases: dict[str, float] = field(default_factory=dict)  # the judge's account of the call (phases.PhaseClock)


class WorkerGone(Exception):
    """The worker cannot answer this request (``status``: crashed, timeout, oom_killed, import_failed)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class CandidateWorker(WorkerClient):
    """One long-lived worker per pytest process; ``mode`` is ``submission`` or ``golden`` (self-check)."""

    workdir: Path
    mode: str = "submission"
    site_dir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    threads: int = 1
    device: str = "cpu"
    memory_bytes: int = 0
    startup_timeout_s: float = 300.0
    guard: str = "block"  # submission mode only: off | warn | block
    protect: list[str] = field(default_factory=list)  # directories the submission may not touch
    contain: bool = True  # submission mode only: the seccomp filter
    sandbox: sandbox.SandboxChoice | None = None  # submission mode only: the OS sandbox (guard.sandbox)
    readable: list[str] = field(default_factory=list)  # what the sandbox shows read-only besides the system
    static_problems: list = field(default_factory=list)  # [kind, detail] found before any run (symbol scan)
    region: Region | None = None
    frozen: bool = False
    import_problems: list = field(default_factory=list)  # guard findings made while the submission was imported
    last_tmp: str | None = None  # the operator whose files the private TMPDIR holds
    _killed_for: str | None = None
    _pid: int | None = None  # the worker's pid in the judge's namespace (bwrap's child under the sandbox)
    evidence: OutsideEvidence | None = None  # what the judge samples and reads of the worker from outside
    coverage_floor: float | None = None  # KernelBench: the kernel coverage a call needs (guard.coverage)

    # ------------------------------------------------------------ lifecycle

    @property
    def sandboxed(self) -> bool:
        return self.mode != "golden" and self.sandbox is not None and self.sandbox.on

    def _start(self) -> subprocess.Popen:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.region is None:
            self.region = Region()
        judge_pid = 0 if self.sandboxed else os.getpid()  # inside a pid namespace the judge has no pid
        args = ["--region-fd", str(self.region.fd), "--threads", str(self.threads), "--device", self.device,
                "--workdir", str(self.workdir), "--judge-pid", str(judge_pid)]
        if self.site_dir:
            args += ["--site", self.site_dir]
        if self.mode != "golden":  # untrusted code (cann_bench or KernelBench ModelNew): scrubbed env, own TMPDIR
            args += ["--guard", self.guard] + [f"--protect={p}" for p in self.protect]
            forbid = self.mode == "submission" and self.guard == "block"  # builtin kernels closed: CANN's rule only
            args += ["--contain"] * self.contain + ["--forbid-builtins"] * forbid
            env = scrubbed_environment(os.environ)
            tmp = self.tmpdir
            tmp.mkdir(parents=True, exist_ok=True)
            env["TMPDIR"] = str(tmp)
            if self.sandboxed:  # the judge's home does not exist inside
                env["HOME"] = env["XDG_CACHE_HOME"] = str(tmp)
        else:  # goldens are task code, trusted like the golden worker's
            env = dict(os.environ)
        env.update(self.env)
        env["OMP_NUM_THREADS"] = str(self.threads)
        # idle OpenMP pool threads sleep instead of spinning: a spinning pool thread burns CPU while the worker
        # waits for its next set, which the judge's CPU-time floor reads as a slow clock (an honest serial run
        # with two threads failed as timing_implausible), and it steals cycles from the other worker's calls
        env["OMP_WAIT_POLICY"] = "PASSIVE"
        env.update(STEADY_MALLOC)
        module = "pytest_cannbench.workers.candidate_main"
        if not self.sandboxed:
            proc = self._spawn(module, args, env, pass_fds=(self.region.fd,), cwd=str(self.workdir))
            self._pid = proc.pid
        else:
            proc = self._spawn_sandboxed(module, args, env)
        self.frozen, self._killed_for = False, None
        self.watch.open(self.pid)  # the CPU meter, before the worker starts a thread: they all inherit it
        self._open_sampler()
        return proc

    def _open_sampler(self) -> None:
        """The judge's own evidence of submission code under an active guard (KernelBench's: its kernel coverage)."""
        self._close_sampler()
        if self.mode in ("submission", "kernelbench") and self.guard != "off" and self._pid is not None:
            self.evidence = OutsideEvidence.of_worker(self.site_dir, self.workdir, self.contain, self.device,
                                                      self.mode, self.coverage_floor)
            self.evidence.open(self._pid)

    def _close_sampler(self) -> None:
        evidence, self.evidence = self.evidence, None
        if evidence is not None:
            evidence.close()

    def _observed(self, keys: tuple[str, ...], calls: int, reply: dict) -> list[tuple[str, str]]:
        return [] if self.evidence is None or self._pid is None else \
            self.evidence.after_call(self._pid, keys, calls, reply)

    def _mark(self, edge: str) -> None:  # the sampler's edges (evidence.py): arm, open_window, close_window
        if self.evidence is not None:
            getattr(self.evidence, edge)()

    def _spawn_sandboxed(self, module: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        """The worker as pid 1 of its own bubblewrap sandbox; its pid out here comes on bwrap's info pipe."""
        assert self.sandbox is not None and self.sandbox.bwrap is not None and self.region is not None
        info_r, info_w = os.pipe()
        chosen = self.sandbox

        def wrap(argv: list[str]) -> list[str]:
            return sandbox.command(str(chosen.bwrap), argv, workdir=str(self.workdir),
                                   writable=[str(self.workdir), str(self.tmpdir)], readable=self.readable,
                                   hidden=self.protect, info_fd=info_w)

        try:
            proc = self._spawn(module, args, env, pass_fds=(self.region.fd, info_w), cwd=str(self.workdir),
                               wrap=wrap)
        finally:
            os.close(info_w)
        try:
            pid = sandbox.read_child_pid(info_r)
        finally:
            os.close(info_r)
        if pid is None:
            code = sandbox.exit_code(procs.reap(proc))
            self.proc = None
            tail = procs.read_log_since(self.log_path, self.log_mark, 4096).decode("utf-8", errors="replace")
            raise WorkerGone(CRASHED, f"the sandbox did not start (bwrap exit {code}): {tail.strip()[-800:]}")
        self._pid = pid
        return proc

    def _ensure(self) -> dict:
        """A running worker; returns its hello reply (raises WorkerGone when it cannot start)."""
        if self.proc is not None and self.proc.poll() is None:
            return {}
        self._start()
        try:
            reply = self._exchange({"op": "hello", "mode": self.mode}, self.startup_timeout_s)
        except WorkerGone as exc:
            raise WorkerGone(IMPORT_FAILED if exc.status == TIMEOUT else exc.status,
                              f"worker did not start: {exc}") from None
        self.import_problems = [(str(k), str(d)) for k, d in self.static_problems] + guard_problems(reply)
        if not reply.get("ok"):
            self.kill()
            trace = "\n".join(str(reply.get("traceback") or "").strip().splitlines()[-6:])
            found = "".join(f"\nguard: {kind}: {detail}" for kind, detail in self.import_problems)
            raise WorkerGone(IMPORT_FAILED, f"{reply.get('stage')}: {reply.get('error')}{found}\n{trace}"[:3000])
        return reply

    @property
    def pid(self) -> int:
        """The worker's own pid in the judge's pid namespace: what /proc probes and freezing address."""
        assert self.proc is not None and self._pid is not None
        return self._pid

    @property
    def tmpdir(self) -> Path:
        return self.workdir.parent / f"tmp-{self.workdir.name}"  # beside the cwd, which stays empty

    def wipe_tmp(self, owner: str) -> None:
        """A fresh private TMPDIR for each operator: nothing a submission leaves there reaches the next one.
        Called while the worker is frozen (or not running)."""
        if self.mode != "submission" or owner == self.last_tmp:
            return
        self.last_tmp = owner
        tmp = self.tmpdir
        if tmp.is_dir():
            for entry in tmp.iterdir():
                procs.remove_tree(entry)

    def start(self) -> float:
        """Start the worker now (it is started lazily otherwise); returns the seconds it took."""
        t0 = time.perf_counter()
        self._ensure()
        self._freeze()
        return time.perf_counter() - t0

    # ------------------------------------------------------------ requests

    def discover(self) -> object:
        """``[[name, source], ...]`` as the worker reports it (validate with interfaces.validate_names)."""
        self._ensure()
        reply = self._exchange({"op": "discover"}, self.startup_timeout_s)
        self._freeze()
        if not reply.get("ok"):
            raise WorkerGone(CRASHED, str(reply.get("error")))
        return reply.get("interfaces")

    def call(self, target: dict, kwargs: dict[str, Any], *, expected_out_bytes: int, timeout: float,
             case_log: Path | None = None) -> CandidateResult:
        """Run one operator call; never raises for anything the candidate does."""
        clock = PhaseClock()
        result = self._call(target, kwargs, expected_out_bytes, timeout, case_log, clock)
        result.phases = clock.seconds
        return result

    def _call(self, target: dict, kwargs: dict[str, Any], expected_out_bytes: int, timeout: float,
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

    def _judged(self, target: dict, kwargs: dict[str, Any], reply: dict, layout: Any, before: Snapshot,
                case_log: Path | None) -> CandidateResult:
        assert self.region is not None  # the judge's checks of a finished call, from outside the frozen worker
        sampled = self._observed(profile_keys(target, case_log), 1, reply) + self.watch.tampering(self._pid, self.mode)
        problem = self._contract(before, layout.args, kwargs)
        if problem is not None:
            return self._finish(problem, case_log)
        verdict, why, flags = guard_verdict(self.import_problems + guard_problems(reply) + sampled, self.guard)
        if verdict is not None:
            return self._finish(CandidateResult(verdict, message=why, flags=flags), case_log)
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

    def time_batch(self, target: dict, kwargs_sets: list[dict[str, Any]], call_sets: list[int], *, warmup: int,
                   expected_out_bytes: int, timeout: float, flush: bool = True, timer: str = "auto",
                   npu: dict | None = None, case_log: Path | None = None,
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

    def open_batch(self, target: dict, kwargs_sets: list[dict[str, Any]], call_sets: list[int], *, warmup: int,
                   expected_out_bytes: int, timeout: float, flush: bool = True, timer: str = "auto",
                   npu: dict | None = None, case_log: Path | None = None,
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

    def _frame(self, batch: StreamedBatch, reply: dict) -> None:
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

    def _conclude(self, batch: StreamedBatch, reply: dict, wall: float, cpu_s: float | None,
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
            return self._finish(BatchResult(verdict, message=why, wall_s=wall, flags=flags), case_log)
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

    # ------------------------------------------------------------ plumbing

    def _exchange(self, message: dict, timeout: float) -> dict:
        proc = self.proc
        assert proc is not None
        self._thaw()

        def watch_memory() -> None:
            used = procs.rss_bytes(self.pid)
            if self.memory_bytes and used > self.memory_bytes:
                self._killed_for = (f"the worker used {used / 2**30:.1f} GiB, over its limit of "
                                    f"{self.memory_bytes / 2**30:.1f} GiB (--cann-worker-memory)")
                raise self._gone(proc, kill=True)

        timed_out = WorkerGone(TIMEOUT, f"no answer within {timeout:g} s; the worker's process group was killed")
        return self._roundtrip(proc, message, timeout, timed_out, self._receive, POLL_S, watch_memory)

    def _receive(self, fd: int) -> dict:
        """A reply from untrusted code: JSON only, and a malformed frame ends the worker."""
        try:
            return wire.receive_json(fd)
        except wire.BadFrame as exc:
            self.kill()
            raise WorkerGone(CRASHED, f"the worker broke the protocol: {exc}") from None

    def _died(self, proc: subprocess.Popen) -> WorkerGone:
        return self._gone(proc)

    def _gone(self, proc: subprocess.Popen, kill: bool = False) -> WorkerGone:
        if kill:
            self._signal(signal.SIGKILL)
            procs.signal_group(proc, signal.SIGKILL)
        code = procs.reap(proc)
        if self.sandboxed:
            code = sandbox.exit_code(code)
        self.proc, self.frozen = None, False
        if self._killed_for:
            return WorkerGone(OOM_KILLED, self._killed_for)
        if code == -signal.SIGKILL:
            return WorkerGone(OOM_KILLED, "the worker was killed by SIGKILL, most likely by the kernel's "
                                          "out-of-memory killer")
        if code < 0:
            return WorkerGone(CRASHED, f"the worker died of {procs.how_it_ended(code)}")
        return WorkerGone(CRASHED, f"the worker exited with code {code} in the middle of a call")

    def _signal(self, sig: int) -> None:
        """Signal the worker's process group (under the sandbox, bwrap runs it in a session of its own)."""
        if self.proc is not None and self._pid is not None:
            procs.signal_pgid(self._pid, sig)

    def _freeze(self) -> None:
        if self.proc is not None and not self.frozen:
            self._signal(signal.SIGSTOP)
            self.frozen = True

    def _thaw(self) -> None:
        if self.proc is not None and self.frozen:
            self._signal(signal.SIGCONT)
            self.frozen = False

    def kill(self) -> None:
        self.frozen = False
        self._close_sampler()
        if self.proc is not None and self._pid is not None and self._pid != self.proc.pid:
            procs.signal_pgid(self._pid, signal.SIGKILL)  # the sandbox's session first, then bwrap's
        super().kill()

    def close(self) -> None:
        self._close_sampler()
        if self.proc is not None:
            self._thaw()  # not frozen any more
            super().close()
        self.watch.close()  # also after a death no request saw: the meter's events and cgroup go
        if self.region is not None:
            self.region.close()
            self.region = None

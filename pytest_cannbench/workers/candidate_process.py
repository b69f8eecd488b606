"""The candidate worker's process, judge side: start it (in the OS sandbox where there is one), freeze and thaw it
between requests, watch its memory, read its frames, and name how it died. The requests themselves (a call, a
timing batch) are :mod:`candidate_client`'s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench import procs
from pytest_cannbench.guard import sandbox
from pytest_cannbench.guard.policy import guard_problems
from pytest_cannbench.workers import wire
from pytest_cannbench.workers.batch import WorkerStatus
from pytest_cannbench.workers.client import WorkerClient
from pytest_cannbench.workers.env_scrub import scrubbed_environment
from pytest_cannbench.workers.evidence import OutsideEvidence
from pytest_cannbench.workers.tensor_wire import Region

# glibc's allocator in a steady state: blocks up to 32 MiB (its largest mmap threshold) come from the heap, and freed
# heap is kept rather than returned to the kernel. With the defaults the dynamic thresholds made an output's memory
# sometimes reused and sometimes fresh, page-faulted and zeroed inside the timed call: the honest C++ clamp on 8 MiB
# timed 1.0-1.4 ms or 5-6.5 ms in one batch (a speed-up interval of +-118%), and the page faults in the kernel were
# sampled as foreign code (one builtin_compute). Candidate and baseline workers get the same setting.
STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}
POLL_S = 0.05  # memory watchdog period while a call runs

# a call's or a batch's end (workers.batch.WorkerStatus), by their old names
OK, RAISED, CRASHED, TIMEOUT = WorkerStatus.OK, WorkerStatus.RAISED, WorkerStatus.CRASHED, WorkerStatus.TIMEOUT
OOM_KILLED, IMPORT_FAILED = WorkerStatus.OOM_KILLED, WorkerStatus.IMPORT_FAILED
INPUT_MUTATED, ASYNC_ESCAPE = WorkerStatus.INPUT_MUTATED, WorkerStatus.ASYNC_ESCAPE


class WorkerGone(Exception):
    """The worker cannot answer this request (``status``: crashed, timeout, oom_killed, import_failed)."""

    def __init__(self, status: WorkerStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class CandidateProcess(WorkerClient):
    """The process of a :class:`~pytest_cannbench.workers.candidate_client.CandidateWorker`: its start, its freezing
    and its end; ``mode`` is ``submission`` or ``golden`` (self-check)."""

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
    static_problems: list[Any] = field(default_factory=list)  # [kind, detail] found before any run (symbol scan)
    region: Region | None = None
    frozen: bool = False
    import_problems: list[Any] = field(default_factory=list)  # guard findings made while the submission was imported
    last_tmp: str | None = None  # the operator whose files the private TMPDIR holds
    _killed_for: str | None = None
    greeted: bool = True  # False: spawned ahead of its submission (spawn), hello not sent yet
    _pid: int | None = None  # the worker's pid in the judge's namespace (bwrap's child under the sandbox)
    evidence: OutsideEvidence | None = None  # what the judge samples and reads of the worker from outside
    coverage_floor: float | None = None  # KernelBench: the kernel coverage a call needs (guard.coverage)

    # ------------------------------------------------------------ lifecycle

    @property
    def sandboxed(self) -> bool:
        return self.mode != "golden" and self.sandbox is not None and self.sandbox.on

    def _start(self) -> subprocess.Popen[bytes]:
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

    def _observed(self, keys: tuple[str, ...], calls: int, reply: dict[str, Any]) -> list[tuple[str, str]]:
        return [] if self.evidence is None or self._pid is None else \
            self.evidence.after_call(self._pid, keys, calls, reply)

    def _mark(self, edge: str) -> None:  # the sampler's edges (evidence.py): arm, open_window, close_window
        if self.evidence is not None:
            getattr(self.evidence, edge)()

    def _spawn_sandboxed(self, module: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
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

    def spawn(self) -> None:
        """Start the process now and let it make itself ready (torch, its guard, its sandbox) without importing
        the submission: a spare for a candidate not yet installed into ``site_dir``. Its first request imports
        it, as a worker started with the submission in place does."""
        self._start()
        self.greeted = False

    def _ensure(self) -> dict[str, Any]:
        """A running worker; returns its hello reply (raises WorkerGone when it cannot start)."""
        if self.proc is not None and self.proc.poll() is None:
            if self.greeted:
                return {}
        else:
            self._start()
        self.greeted = True
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

    # ------------------------------------------------------------ plumbing

    def _exchange(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        proc = self.proc
        assert proc is not None
        self._thaw()

        def watch_memory() -> None:
            used = procs.rss_bytes(self.pid)
            if self.memory_bytes and used > self.memory_bytes:
                self._killed_for = (f"the worker used {used / 2**30:.1f} GiB, over its limit of "
                                    f"{self.memory_bytes / 2**30:.1f} GiB (cann_worker_memory)")
                raise self._gone(proc, kill=True)

        timed_out = WorkerGone(TIMEOUT, f"no answer within {timeout:g} s; the worker's process group was killed")
        return self._roundtrip(proc, message, timeout, timed_out, self._receive, POLL_S, watch_memory)

    def _receive(self, fd: int) -> dict[str, Any]:
        """A reply from untrusted code: JSON only, and a malformed frame ends the worker."""
        try:
            return wire.receive_json(fd)
        except wire.BadFrame as exc:
            self.kill()
            raise WorkerGone(CRASHED, f"the worker broke the protocol: {exc}") from None

    def _died(self, proc: subprocess.Popen[bytes]) -> WorkerGone:
        return self._gone(proc)

    def _gone(self, proc: subprocess.Popen[bytes], kill: bool = False) -> WorkerGone:
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

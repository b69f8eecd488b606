"""The judge's side of a multi-rank (MC2) case: one worker per rank, started, called and stopped together.

* :class:`GoldenRanks`: ``world_size`` golden workers (trusted task code, ``golden_main``'s ``mc2_prepare``), each
  joining a process group of its own for the request (gloo over the host's loopback; rendezvous in a file).
* :class:`RankGroup`: ``world_size`` candidate workers (:class:`RankWorker`: a :class:`CandidateWorker` as any,
  each in its own sandbox, under the guard and the containment filter, with its own region, log, memory watchdog
  and the judge's sampler), which join their group before the submission is imported (``--rank``). Under the
  sandbox each worker has a network namespace of its own; a rank group's workers share one instead, made for the
  group by :class:`PrivateNetwork` (an unprivileged user and network namespace holding only a loopback
  interface, which each rank's bubblewrap enters through ``nsenter``): the ranks reach each other and nothing else.
* The judge never joins a group. It sends each rank its request from a thread of its own and waits for all; a
  rank that crashes, runs out of memory or times out ends the call for the others at once (they are killed: they
  would wait in a collective for it), and a rank that hangs is found by the deadline while the others, stuck in a
  collective with it, fail first by the group's own timeout (a fraction of the call's).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench import procs
from pytest_cannbench.workers.batch import WorkerStatus
from pytest_cannbench.workers.candidate_client import CandidateResult, CandidateWorker
from pytest_cannbench.workers.candidate_process import CRASHED, IMPORT_FAILED, OOM_KILLED, TIMEOUT, WorkerGone
from pytest_cannbench.workers.golden_client import GoldenWorker, GoldenWorkerFailure

GROUP_TIMEOUT_SHARE = 0.8  # the group's collectives give up at this share of the call's timeout (see above)
FATAL = (CRASHED, TIMEOUT, OOM_KILLED, IMPORT_FAILED)  # a rank's end that leaves the others waiting forever
STOPPED = "stopped"  # a rank the judge killed because another one failed first (never the case's status)


def group_timeout(call_timeout: float) -> float:
    return max(2.0, GROUP_TIMEOUT_SHARE * call_timeout)


# ---------------------------------------------------------------- the ranks' private network


class PrivateNetwork:
    """A user and network namespace holding a loopback interface and nothing else, kept alive by a small process of
    ours (``python -m pytest_cannbench.workers.ranks_main``); :meth:`prefix` runs a command inside it."""

    def __init__(self, log_path: Path) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = log_path
        self.error = ""

    def start(self) -> bool:
        unshare, nsenter = shutil.which("unshare"), shutil.which("nsenter")
        if unshare is None or nsenter is None:
            self.error = "util-linux's unshare and nsenter are not on PATH"
            return False
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")) if p))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([unshare, "--user", "--map-root-user", "--net", sys.executable, "-m",
                                          "pytest_cannbench.workers.ranks_main", str(os.getpid())],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         start_new_session=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode(errors="replace").strip()
        if line != "ready":
            self.close()
            tail = procs.read_log_since(self.log_path, 0, 2000).decode(errors="replace").strip()
            self.error = f"the network namespace did not start ({line or 'no answer'}): {tail[-400:]}"
            return False
        return True

    def prefix(self) -> list[str]:
        assert self.proc is not None
        return [shutil.which("nsenter") or "nsenter", f"--target={self.proc.pid}", "--user", "--net",
                "--preserve-credentials", "--"]

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            procs.kill_group(proc)


def shared_network(bwrap_argv: list[str], shared: list[str]) -> list[str]:
    """A rank's bubblewrap command: the network namespace it is started in (the group's private one) instead of a
    new one of its own, and the group's rendezvous directory writable. Refuses a command it cannot read."""
    if "--unshare-net" not in bwrap_argv or "--" not in bwrap_argv:
        raise RuntimeError(f"unexpected sandbox command line: {bwrap_argv[:6]}")
    argv = [a for a in bwrap_argv if a != "--unshare-net"]
    at = argv.index("--")
    binds = [x for path in shared for x in ("--bind", path, path)]
    return argv[:at] + binds + argv[at:]


@dataclass
class RankWorker(CandidateWorker):
    """A candidate worker for one rank: started with ``--rank`` (its group), in the group's private network."""

    rank_spec: dict[str, Any] = field(default_factory=dict)  # rank, world_size, store, timeout_s
    network: PrivateNetwork | None = None
    shared: list[str] = field(default_factory=list)  # the rendezvous directory, writable for every rank

    def _spawn(self, module: str, args: list[str], env: dict[str, str],
               wrap: Callable[[list[str]], list[str]] | None = None, **popen: Any) -> subprocess.Popen[bytes]:
        args = [*args, "--rank", json.dumps(self.rank_spec)]
        env = {**env, "GLOO_SOCKET_IFNAME": "lo"}
        prefix = self.network.prefix() if self.network is not None and self.network.proc is not None else []
        if wrap is not None:
            inner = wrap
            shared = self.shared

            def wrapped(argv: list[str]) -> list[str]:
                return prefix + shared_network(inner(argv), shared)

            return super()._spawn(module, args, env, wrapped, **popen)
        return super()._spawn(module, args, env, (lambda argv: prefix + argv) if prefix else None, **popen)


# ---------------------------------------------------------------- candidate ranks


def kill_rank(worker: CandidateWorker) -> None:
    """SIGKILL a rank worker's process groups from another thread than the one waiting on it: that thread then
    reads the end of the pipe and reports the death itself (closing the pipe under it would fail its read)."""
    for pid in {worker._pid, worker.proc.pid if worker.proc is not None else None}:
        if pid:
            procs.signal_pgid(pid, signal.SIGKILL)


@dataclass
class RankAnswer:
    """One rank's call: the worker's result, or ``STOPPED`` (killed because another rank failed first)."""

    rank: int
    result: CandidateResult
    stopped: bool = False


class RankGroup:
    """``world_size`` rank workers of one case; :meth:`start` them together, :meth:`each` runs one request per rank
    concurrently, :meth:`close` ends them and their network."""

    def __init__(self, workers: list[RankWorker], network: PrivateNetwork | None, store_dir: Path,
                 note: str = "", scratch: Path | None = None) -> None:
        self.workers = workers
        self.network = network
        self.store_dir = store_dir
        self.scratch = scratch  # the group's own directory, around store_dir: removed with it
        self.note = note  # the group's weaker mode, if any (no private network)
        # One thread per rank for the group's life: a worker's parent-death signal follows the *thread* that
        # started it, so workers started from short-lived threads died with them.
        self.pool = ThreadPoolExecutor(max_workers=len(workers), thread_name_prefix="cannbench-rank")

    @classmethod
    def make(cls, template: Callable[[int], CandidateWorker], world_size: int, call_timeout: float,
             scratch: Path, log_dir: Path, private_network: bool) -> RankGroup:
        """The group's workers (not started): ``template(rank)`` makes each rank's worker as any candidate worker is
        made; they are given the group's rendezvous and, ``private_network``, its namespace."""
        store_dir = scratch / "rendezvous"
        store_dir.mkdir(parents=True, exist_ok=True)
        network, note = None, ""
        if private_network:
            network = PrivateNetwork(log_dir / "rank-network.log")
            if not network.start():
                note = (f"no private network for the ranks ({network.error}): they connect over the host's "
                        "loopback; the containment filter still refuses the submission every new socket")
                network = None
        spec = {"world_size": world_size, "store": str(store_dir / "store"), "timeout_s": group_timeout(call_timeout)}
        workers = []
        for rank in range(world_size):
            base = template(rank)
            values = {f.name: getattr(base, f.name) for f in dataclasses.fields(CandidateWorker) if f.init}
            kind = str(values["device"]).split(":", 1)[0]
            if kind in ("cuda", "npu"):  # NCCL and HCCL want a card per rank: the host needs world_size of them
                values["device"] = f"{kind}:{rank}"
            workers.append(RankWorker(**values, rank_spec={**spec, "rank": rank}, network=network,
                                      shared=[str(store_dir)]))
        return cls(workers, network, store_dir, note, scratch=scratch)

    def each(self, request: Callable[[RankWorker], CandidateResult]) -> list[RankAnswer]:
        """``request`` on every rank at once. The first rank to end fatally (crashed, timed out, out of memory, not
        started) stops the others; each answer says whether it was stopped."""
        answers: dict[int, RankAnswer] = {}
        stopped: set[int] = set()
        futures: dict[Future[CandidateResult], int] = {
            self.pool.submit(request, w): r for r, w in enumerate(self.workers)
        }
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            fatal = False
            for future in done:
                rank = futures[future]
                result = future.result()
                answers[rank] = RankAnswer(rank, result, stopped=rank in stopped)
                fatal = fatal or (rank not in stopped and result.status in FATAL)
            if fatal and pending:
                for future in pending:
                    rank = futures[future]
                    stopped.add(rank)
                    kill_rank(self.workers[rank])
        return [answers[r] for r in range(len(self.workers))]

    def map(self, fn: Callable[[int], Any]) -> list[Any]:
        """``fn(rank)`` for every rank at once, on the group's own threads."""
        return list(self.pool.map(fn, range(len(self.workers))))

    def start(self, timeout: float) -> list[RankAnswer]:
        """Start every rank (they meet in their group's rendezvous before any of them imports the submission)."""
        def one(worker: RankWorker) -> CandidateResult:
            try:
                seconds = worker.start()
            except WorkerGone as exc:
                return CandidateResult(exc.status, message=str(exc))
            return CandidateResult(WorkerStatus.OK, seconds=seconds)

        del timeout  # each worker's own startup timeout applies
        return self.each(one)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
            shutil.rmtree(worker.workdir.parent, ignore_errors=True)
        self.pool.shutdown(wait=True)
        if self.network is not None:
            self.network.close()
        shutil.rmtree(self.scratch or self.store_dir, ignore_errors=True)


# ---------------------------------------------------------------- golden ranks


class GoldenRankFailure(RuntimeError):
    """A golden rank failed; ``needs`` names a module the golden needs that this host lacks (torch_npu)."""

    def __init__(self, message: str, oom: bool = False, needs: str = "") -> None:
        super().__init__(message)
        self.oom, self.needs = oom, needs


class GoldenRanks:
    """``world_size`` golden workers; :meth:`prepare` runs one case's distributed golden on all of them."""

    def __init__(self, world_size: int, log_dir: Path, scratch: Path, memory_bytes: int, worker_id: str) -> None:
        self.scratch = scratch
        self.workers = [GoldenWorker(log_path=log_dir / f"golden-rank{r}-{worker_id}.log", memory_bytes=memory_bytes,
                                     threads=1) for r in range(world_size)]
        self.requests = 0
        self.pool = ThreadPoolExecutor(max_workers=world_size, thread_name_prefix="cannbench-golden-rank")

    def prepare(self, request: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
        """Each rank's reply (inputs, golden, native); raises :class:`GoldenRankFailure` naming the first rank that
        failed (the others are stopped: they would wait for it in a collective)."""
        self.requests += 1
        world_size = len(self.workers)
        store = self.scratch / f"golden-{self.requests}"
        store.mkdir(parents=True, exist_ok=True)
        group = {"world_size": world_size, "store": str(store / "store"), "timeout_s": group_timeout(timeout)}
        replies: dict[int, dict[str, Any]] = {}
        failures: list[tuple[int, str, bool, str]] = []

        def one(rank: int) -> None:
            message = {**request, "op": "mc2_prepare", "group": {**group, "rank": rank},
                       "reply_file": str(store / f"rank{rank}.pt"), "reply_keep": False}
            try:
                reply = self.workers[rank].request(message, timeout)
            except GoldenWorkerFailure as exc:
                failures.append((rank, str(exc), exc.kind == "oom", ""))
                for other in self.workers:  # they would wait for this one in a collective
                    if other.proc is not None:
                        procs.signal_pgid(other.proc.pid, signal.SIGKILL)
                return
            if not reply.get("ok"):
                failures.append((rank, str(reply.get("error")), bool(reply.get("oom")), str(reply.get("needs") or "")))
                return
            replies[rank] = reply

        list(self.pool.map(one, range(world_size)))
        shutil.rmtree(store, ignore_errors=True)
        if failures:
            rank, text, oom, needs = min(failures, key=lambda f: (not f[3], f[0]))
            raise GoldenRankFailure(f"rank {rank} of {world_size}: {text}", oom=oom, needs=needs)
        return [replies[r] for r in range(world_size)]

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.pool.shutdown(wait=True)
        shutil.rmtree(self.scratch, ignore_errors=True)

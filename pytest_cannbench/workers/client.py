"""The judge's handle on one worker process, shared by the golden and the candidate clients.

Spawning (log rotation, this package on ``PYTHONPATH``, a session of its own so its whole process group can be
killed), one request and its reply under a deadline, and killing or stopping the group. What a reply means, and
what a death or a timeout is called, is each client's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench import procs
from pytest_cannbench.workers import limits, wire
from pytest_cannbench.workers.cpu_watch import CpuWatch

LOG_ROTATE_BYTES = 8 << 20  # a chatty worker must not grow its log without bound
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding pytest_cannbench


def candidate_memory_bytes() -> int:
    """Half of the memory ceiling (RAM or the cgroup limit) for the candidate worker (workers.limits)."""
    return limits.candidate_memory_bytes()


def golden_memory_bytes() -> int:
    """80% of the memory ceiling for each golden worker, at most the inherited ``RLIMIT_AS`` (workers.limits)."""
    return limits.golden_memory_bytes()


@dataclass
class WorkerClient:
    """A long-lived child running ``python -m <module>``; subclasses say what its death and its silence mean."""

    log_path: Path
    _: KW_ONLY
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    log_mark: int = 0  # size of the log when the current request began: what follows is that request's
    watch: CpuWatch = field(default_factory=CpuWatch)  # CPU budget, meter and code check (timed workers only)

    def _spawn(self, module: str, args: list[str], env: dict[str, str],
               wrap: Callable[[list[str]], list[str]] | None = None, **popen: Any) -> subprocess.Popen[bytes]:
        """Start the child with ``env`` (this package put first on its ``PYTHONPATH``), stderr to the log;
        ``wrap`` turns the command line into the sandbox's."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        procs.rotate_log(self.log_path, LOG_ROTATE_BYTES)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")) if p)
        with open(self.log_path, "ab") as log:
            argv = [sys.executable, "-m", module, *args]
            with self.watch.spawning():  # the timing thread budget's CPUs, inherited from the fork on
                proc = subprocess.Popen(wrap(argv) if wrap else argv, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=log, start_new_session=True, env=env, **popen)
        self.proc = proc
        self.starts += 1
        return proc

    def _roundtrip(self, proc: subprocess.Popen[bytes], message: dict[str, Any], timeout: float,
                   timed_out: BaseException, receive: Callable[[int], Any] = wire.receive, poll_s: float = 1.0,
                   tick: Callable[[], None] | None = None) -> Any:
        """Send ``message`` and wait up to ``timeout`` for the reply; ``tick`` runs every ``poll_s`` meanwhile.
        A closed pipe raises :meth:`_died`'s exception; silence kills the group and raises ``timed_out``."""
        assert proc.stdin is not None and proc.stdout is not None
        try:
            wire.send(proc.stdin, message)
        except (BrokenPipeError, OSError):
            raise self._died(proc) from None
        fd = proc.stdout.fileno()
        try:
            if not procs.wait_readable(fd, timeout, poll_s, tick):
                self.kill()
                raise timed_out
            return receive(fd)
        except wire.PeerClosed:
            raise self._died(proc) from None
        except BaseException:
            # interrupted mid-request (pytest-timeout, Ctrl-C): its late reply would answer the next request
            if self.proc is proc:
                self.kill()
            raise

    def _died(self, proc: subprocess.Popen[bytes]) -> BaseException:
        """The exception for a child whose pipe closed mid-request (it has to be reaped)."""
        raise NotImplementedError

    def kill(self) -> None:
        """SIGKILL the child's whole process group now."""
        proc, self.proc = self.proc, None
        if proc is not None:
            procs.kill_group(proc)
        self.watch.close()  # after the reaping: a meter's cgroup is removed once its worker left it

    def close(self) -> None:
        """Ask the child to exit, then kill its group whatever it did."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stdin = proc.stdin
            assert stdin is not None  # every child comes from _spawn, with stdin=PIPE
            procs.stop(proc, lambda: wire.send(stdin, {"op": "exit"}))
        self.watch.close()

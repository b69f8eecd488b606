"""Judge side of the golden worker: start it lazily, send requests, enforce time, survive its death."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

from pytest_cannbench import procs
from pytest_cannbench.phases import PhaseClock
from pytest_cannbench.workers import huge_pages
from pytest_cannbench.workers.client import WorkerClient

STARTUP_TIMEOUT_S = 300.0  # python + torch import of a fresh worker, on a loaded machine


class GoldenWorkerFailure(RuntimeError):
    """The worker timed out or died; ``kind`` is ``timeout``, ``oom`` or ``crashed``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class GoldenWorker(WorkerClient):
    """One long-lived worker per pytest process, restarted after a timeout or a crash."""

    memory_bytes: int = 0
    threads: int = 1

    def _start(self) -> subprocess.Popen[bytes]:
        proc = self._spawn("pytest_cannbench.workers.golden_main",
                           ["--memory-bytes", str(self.memory_bytes), "--threads", str(self.threads),
                            "--judge-pid", str(os.getpid())],
                           huge_pages.worker_env(dict(os.environ, OMP_NUM_THREADS=str(self.threads))))
        # The worker imports torch before it reads a request. That start-up is not the golden's time:
        # wait for it here, under its own limit, so --cann-golden-timeout counts the golden alone
        # (a short timeout would otherwise fail the first case after every (re)start).
        self._exchange(proc, {"op": "ping"}, STARTUP_TIMEOUT_S,
                       f"golden worker did not start within {STARTUP_TIMEOUT_S:g} s; it was killed")
        return proc

    def budget(self, memory_bytes: int) -> None:
        """Another address-space budget from the next request on (a case running alone gets the
        session's memory). A running worker is closed: its RLIMIT_AS cannot be raised from outside."""
        if memory_bytes != self.memory_bytes:
            self.close()
            self.memory_bytes = memory_bytes

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request; a reply written to ``message["reply_file"]`` is mapped back from disk.

        With ``reply_keep`` false the file is removed once loaded (the mapping stays valid).
        """
        clock = PhaseClock()
        if self.proc and self.proc.poll() is None:
            proc = self.proc
        else:
            with clock.phase("start"):
                proc = self._start()
        response = self._exchange(proc, message, timeout, f"golden did not finish within {timeout:g} s "
                                                          "(cann_golden_timeout); its worker was killed")
        path = response.get("reply_file")
        if path is None:
            _add_seconds(response, clock)
            return response
        import torch

        clock.merge(response.get("seconds") or {})  # the worker's write
        try:
            with clock.phase("reply"):
                loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        finally:
            if not message.get("reply_keep"):
                try:
                    os.unlink(path)
                except OSError:
                    pass
        loaded["reply_file"] = path if message.get("reply_keep") else None
        _add_seconds(loaded, clock)
        return loaded

    def _exchange(self, proc: subprocess.Popen[bytes], message: dict[str, Any], timeout: float,
                  timeout_message: str) -> dict[str, Any]:
        self.log_mark = procs.log_size(self.log_path)
        return self._roundtrip(proc, message, timeout, GoldenWorkerFailure("timeout", timeout_message))

    def _died(self, proc: subprocess.Popen[bytes]) -> GoldenWorkerFailure:
        code = procs.reap(proc)
        self.proc = None
        tail = self.log_tail()
        if code == -signal.SIGKILL:
            return GoldenWorkerFailure("oom", f"golden worker was killed by SIGKILL (likely out of memory); "
                                              f"log {self.log_path}{tail}")
        how = procs.how_it_ended(code)
        return GoldenWorkerFailure("crashed", f"golden worker died ({how}); log {self.log_path}{tail}")

    def log_tail(self, lines: int = 8, chars: int = 2000) -> str:
        """The end of what the worker logged since the last request was sent (not an earlier golden's
        output), at most ``lines`` lines and ``chars`` characters: it goes into a one-line verdict."""
        data = procs.read_log_since(self.log_path, self.log_mark, 16 * chars)
        text = "\n".join(data.decode("utf-8", errors="replace").splitlines()[-lines:])[-chars:]
        return ("\n" + text) if text.strip() else ""


def _add_seconds(response: dict[str, Any], clock: PhaseClock) -> None:
    """The judge's own phases of a request (a start, the reply's map) beside the worker's."""
    if response.get("ok") and isinstance(response.get("seconds"), dict):
        clock.merge(response["seconds"])
        response["seconds"] = clock.seconds

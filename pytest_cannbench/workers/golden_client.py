"""Judge side of the golden worker: start it lazily, send requests, enforce time, survive its death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pytest_cannbench.workers import procs

from pytest_cannbench.workers import wire


LOG_ROTATE_BYTES = 8 << 20  # a chatty golden must not grow the log without bound
STARTUP_TIMEOUT_S = 300.0  # python + torch import of a fresh worker, on a loaded machine


class GoldenWorkerFailure(RuntimeError):
    """The worker timed out or died; ``kind`` is ``timeout``, ``oom`` or ``crashed``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def default_memory_bytes() -> int:
    """80% of physical memory for each golden worker.

    Not divided by the number of pytest processes: heavy goldens rarely peak together, and the
    official tree has goldens needing well over half of a 24 GiB machine. If they do collide,
    the kernel's OOM killer takes a golden worker (``oom_score_adj`` 1000), never the judge,
    and that case reports a golden_error.
    """
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0
    return int(total * 0.8)


@dataclass
class GoldenWorker:
    """One long-lived worker per pytest process, restarted after a timeout or a crash."""

    log_path: Path
    memory_bytes: int = 0
    threads: int = 1
    proc: Optional[subprocess.Popen] = None
    starts: int = 0
    log_mark: int = 0  # size of the log when the last request was sent: what follows is that golden's

    def _start(self) -> subprocess.Popen:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        procs.rotate_log(self.log_path, LOG_ROTATE_BYTES)
        log = open(self.log_path, "ab")
        cmd = [sys.executable, "-m", "pytest_cannbench.workers.golden_main", "--memory-bytes", str(self.memory_bytes),
               "--threads", str(self.threads)]
        env = dict(os.environ, OMP_NUM_THREADS=str(self.threads))
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         start_new_session=True, env=env)
        finally:
            log.close()
        self.starts += 1
        # The worker imports torch before it reads a request. That start-up is not the golden's time:
        # wait for it here, under its own limit, so --cann-golden-timeout counts the golden alone
        # (a short timeout would otherwise fail the first case after every (re)start).
        self._exchange(self.proc, {"op": "ping"}, STARTUP_TIMEOUT_S,
                       f"golden worker did not start within {STARTUP_TIMEOUT_S:g} s; it was killed")
        return self.proc

    def request(self, message: dict, timeout: float) -> dict:
        """Send one request; a reply written to ``message["reply_file"]`` is mapped back from disk.

        With ``reply_keep`` false the file is removed once loaded (the mapping stays valid).
        """
        proc = self.proc if self.proc and self.proc.poll() is None else self._start()
        response = self._exchange(proc, message, timeout, f"golden did not finish within {timeout:g} s "
                                                          "(--cann-golden-timeout); its worker was killed")
        path = response.get("reply_file")
        if path is None:
            return response
        import torch

        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        finally:
            if not message.get("reply_keep"):
                try:
                    os.unlink(path)
                except OSError:
                    pass
        loaded["reply_file"] = path if message.get("reply_keep") else None
        return loaded

    def _exchange(self, proc: subprocess.Popen, message: dict, timeout: float, timeout_message: str) -> dict:
        self.log_mark = procs.log_size(self.log_path)
        try:
            wire.send(proc.stdin, message)
        except (BrokenPipeError, OSError):
            raise self._died(proc) from None
        fd = proc.stdout.fileno()
        if not procs.wait_readable(fd, timeout):
            self.kill()
            raise GoldenWorkerFailure("timeout", timeout_message)
        try:
            return wire.receive(fd)
        except wire.PeerClosed:
            raise self._died(proc) from None

    def _died(self, proc: subprocess.Popen) -> GoldenWorkerFailure:
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

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            procs.kill_group(proc)

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            procs.stop(proc, lambda: wire.send(proc.stdin, {"op": "exit"}))

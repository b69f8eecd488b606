"""Judge side of the golden worker: start it lazily, send requests, enforce time, survive its death."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from . import wire


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
        if self.log_path.is_file() and self.log_path.stat().st_size > LOG_ROTATE_BYTES:
            os.replace(self.log_path, self.log_path.with_suffix(".log.1"))  # keep one old generation
        log = open(self.log_path, "ab")
        cmd = [sys.executable, "-m", "pytest_cannbench.golden_worker", "--memory-bytes", str(self.memory_bytes),
               "--threads", str(self.threads)]
        env = dict(os.environ, OMP_NUM_THREADS=str(self.threads))
        package_root = str(Path(__file__).resolve().parent.parent)
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
        try:
            self.log_mark = self.log_path.stat().st_size
        except OSError:
            self.log_mark = 0
        try:
            wire.send(proc.stdin, message)
        except (BrokenPipeError, OSError):
            raise self._died(proc) from None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise GoldenWorkerFailure("timeout", timeout_message)
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                break
        try:
            return wire.receive(fd)
        except wire.PeerClosed:
            raise self._died(proc) from None

    def _died(self, proc: subprocess.Popen) -> GoldenWorkerFailure:
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = proc.returncode
        self.proc = None
        tail = self.log_tail()
        if code is not None and code < 0 and -code == signal.SIGKILL:
            return GoldenWorkerFailure("oom", f"golden worker was killed by SIGKILL (likely out of memory); "
                                              f"log {self.log_path}{tail}")
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return GoldenWorkerFailure("crashed", f"golden worker died ({how}); log {self.log_path}{tail}")

    def log_tail(self, lines: int = 8, chars: int = 2000) -> str:
        """The end of what the worker logged since the last request was sent (not an earlier golden's
        output), at most ``lines`` lines and ``chars`` characters: it goes into a one-line verdict."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(max(self.log_mark, fh.seek(0, os.SEEK_END) - 16 * chars))
                data = fh.read()
        except OSError:
            return ""
        text = "\n".join(data.decode("utf-8", errors="replace").splitlines()[-lines:])[-chars:]
        return ("\n" + text) if text.strip() else ""

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                wire.send(proc.stdin, {"op": "exit"})
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

"""Process plumbing shared by the child processes (the golden and candidate workers, the calibration child) and
what starts them (the judge's clients, the submission's build).

Judge side: wait for a worker's frame under a deadline, kill a worker's whole
process group, read its memory use, describe how it ended, read what it logged
since a request.
Worker side: offer itself to the OOM killer first, and keep stdout for frames.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, NoReturn


def wait_readable(fd: int, timeout: float, poll_s: float = 1.0, tick: Callable[[], None] | None = None) -> bool:
    """True once ``fd`` has data, False when ``timeout`` passed first; ``tick`` runs every ``poll_s`` meanwhile.

    Short select() steps keep pytest-timeout's signal and Ctrl-C responsive.
    """
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([fd], [], [], min(left, poll_s))
        if ready:
            return True
        if tick is not None:
            tick()


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    signal_pgid(proc.pid, sig)


def signal_pgid(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker and everything it started in its session, reap it, close our pipe ends."""
    signal_group(proc, signal.SIGKILL)
    proc.wait()
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


def stop(proc: subprocess.Popen[bytes], send_exit: Callable[[], None], grace_s: float = 5.0) -> None:
    """Ask a worker to exit (``send_exit``), give it ``grace_s``, then kill its group whatever happened."""
    if proc.poll() is None:
        try:
            send_exit()
            proc.wait(timeout=grace_s)
        except (OSError, subprocess.TimeoutExpired):
            pass
    kill_group(proc)


def reap(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> int:
    """The exit code of a worker whose pipe closed (killing its group if it lingers)."""
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    kill_group(proc)
    return proc.returncode


def rss_bytes(pid: int) -> int:
    """Resident memory of a process, from /proc (0 when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def how_it_ended(code: int) -> str:
    """``SIGSEGV`` for a signal, ``exit code 3`` otherwise."""
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_log_since(path: Path, mark: int, limit: int) -> bytes:
    """What was logged after byte ``mark`` (the end of it, at most ``limit`` bytes; all of it if rotated)."""
    try:
        with open(path, "rb") as fh:
            end = fh.seek(0, os.SEEK_END)
            fh.seek(max(mark if mark <= end else 0, end - limit))
            return fh.read()
    except OSError:
        return b""


def rotate_log(path: Path, limit: int) -> None:
    """Keep one old generation once the log passes ``limit`` bytes: a chatty worker must not fill the disk."""
    if log_size(path) > limit:
        os.replace(path, path.with_suffix(".log.1"))


# ---------------------------------------------------------------- worker side


def die_with_parent(judge_pid: int) -> None:
    """If the judge dies (SIGKILL included, even while it holds this process stopped), the kernel kills this one:
    no worker of ours computes on, orphaned, after its pytest is gone."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if judge_pid and os.getppid() != judge_pid:  # the judge died before the line above took effect
        os._exit(1)


def exit_now(code: int = 0) -> NoReturn:
    """End a worker at once, its streams flushed: a worker has nothing to finalize, and interpreter shutdown
    with torch loaded took 0.6 s, which the judge waited for at every restart and at the end of a session (and
    a submission's atexit handlers, run by a normal exit, are not its to run)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def become_expendable() -> None:
    """If memory runs out machine-wide, the kernel kills a worker, never the judge."""
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        pass


def give_back_freed_memory() -> None:
    """Return the C heap's free pages to the kernel (glibc ``malloc_trim``; elsewhere nothing). An idle worker
    otherwise keeps a large case's freed memory resident, and the memory plan counts it as idle."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def take_stdout_for_frames() -> BinaryIO:
    """The original stdout, for frames only; fd 1 and ``sys.stdout`` now go to stderr (the judge's log file)."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def remove_tree(path: Path) -> None:
    """Delete a file or directory without following symlinks out of it (a submission may have planted them)."""
    import shutil

    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink()
        else:
            shutil.rmtree(path, ignore_errors=True)
    except OSError:
        pass

"""A shard graded on its node: the body of the Ray task, run where Ray placed it.

It checks what it needs is there (the plugin at the driver's version, the task tree, its operators and the
submission at the driver's paths: a shared filesystem, ``docs/cluster.md``), claims its judge's cores on a CPU
host, runs a real pytest session of the plugin in a subprocess (through :mod:`launch_main`, so the session dies
with the Ray worker), and returns the session's report directory as bytes: the results travel through Ray's
object store, never through a shared filesystem. Every way it can fail becomes a :class:`ShardResult` with an
``error`` and the log's tail, never an exception: Ray retries the task only when its worker or node is lost.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pytest_cannbench import __version__
from pytest_cannbench.scratch import make_dir

PYTEST_LOG = "pytest.log"
JUNIT = "junit.xml"
FIRST = ("leaderboard.json", "results.jsonl", JUNIT, "report.html", PYTEST_LOG)  # shipped before any log
SHIP_LIMIT = 64 * 2**20  # bytes of a shard's report directory shipped back; logs beyond it are cut to their tails
LOG_LIMIT = 4 * 2**20  # one log file's share at most (its tail)
TAIL_LINES = 30
TERM_GRACE_S = 30.0  # after SIGTERM (the shard's timeout) the session writes its board of interrupted cases
SHARED_FS = 'docs/cluster.md, "The shared filesystem"'


@dataclass
class ShardSpec:
    """What the driver sends a shard task (plain data: it is pickled into the task)."""

    index: int
    label: str  # "2/3"
    tree: str
    source: str
    operators: list[str]  # the shard's operator directories (checked for, not passed: --ignore names the others)
    ignore: list[str]  # --ignore=<dir> for every other shard's operator
    extra: list[str]  # the user's pytest options
    cwd: str  # the driver's working directory: the session's rootdir where the node sees it
    omp_threads: str | None  # the driver's OMP_NUM_THREADS (Ray sets its own in workers)
    version: str  # the driver's pytest-cannbench
    kind: str  # cpu, gpu or npu
    cpus_per_judge: float
    timeout_s: float | None
    attempt: int = 1  # the driver's attempt (Ray's own retries after a lost node reuse it)
    progress: Any = None  # the driver's Progress actor: told when the session starts


@dataclass
class ShardResult:
    """What came back from one attempt at a shard."""

    index: int
    attempt: int
    node_id: str = ""
    host: str = ""
    rc: int | None = None  # pytest's exit status; None when it did not run or was killed
    seconds: float = 0.0
    error: str = ""  # why the session did not run or did not finish ("" when it ran to its end)
    log_tail: str = ""
    cores: list[int] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)  # the report directory, relative paths
    cut: list[str] = field(default_factory=list)  # files shipped as their tails (or left out) to fit SHIP_LIMIT


def command(spec: ShardSpec, report_dir: Path) -> list[str]:
    """The pytest session of a shard: the whole tree under --cann-tasks, the other shards' operators ignored."""
    return [
        sys.executable,
        "-m",
        "pytest",
        f"--cann-tasks={spec.tree}",
        f"--cann-source={spec.source}",
        f"--cann-report-dir={report_dir}",
        f"--junitxml={report_dir / JUNIT}",
        "-p",
        "no:cacheprovider",
        *spec.ignore,
        *spec.extra,
    ]


def unreachable(spec: ShardSpec) -> str:
    """Why this node cannot grade the shard ("" when it can)."""
    host = socket.gethostname()
    if __version__ != spec.version:
        return (
            f"node {host} has pytest-cannbench {__version__}, the driver {spec.version}: install the same "
            "version on every node (boards of different versions are not graded alike)"
        )
    wanted = [(spec.tree, "the task tree"), (spec.source, "the submission")]
    wanted += [(op, "an operator directory of this shard") for op in spec.operators]
    for path, what in wanted:
        if not os.path.exists(path):
            return (
                f"node {host} cannot see {what} at {path}: cluster-grade reads the task tree and the "
                f"submission at the same paths on every node; mount them there ({SHARED_FS}) or leave this "
                "node out of the cluster"
            )
    return ""


@contextlib.contextmanager
def judge_cores(spec: ShardSpec) -> Iterator[list[int]]:
    """A CPU judge's cores on this host: share ``j`` of ``cpus_per_judge`` cores, held by a lock file for the
    session's life (released when this worker ends, however it ends). Empty (no pinning) for card judges, for a
    judge of the whole host, and when every share is taken (more sessions than shares: then they share)."""
    per = int(spec.cpus_per_judge)
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if spec.kind != "cpu" or per < 1 or per >= len(allowed):
        yield []
        return
    locks = Path(tempfile.gettempdir()) / f"cannbench-cluster-{os.getuid()}"
    locks.mkdir(mode=0o700, exist_ok=True)
    for share in range(len(allowed) // per):
        handle: IO[str] = open(locks / f"cores-{per}-{share}.lock", "w")  # noqa: SIM115 (held while it runs)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        try:
            yield allowed[share * per : (share + 1) * per]
        finally:
            handle.close()
        return
    yield []


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def ship(report_dir: Path) -> tuple[dict[str, bytes], list[str]]:
    """The report directory as ``{relative path: bytes}``: the board, journal, junit, page and log first, then
    the session's logs, each at most :data:`LOG_LIMIT` (its tail), all within :data:`SHIP_LIMIT`."""
    paths = sorted(
        (p for p in report_dir.rglob("*") if p.is_file() and not p.is_symlink()),
        key=lambda p: (p.relative_to(report_dir).as_posix() not in FIRST, p.as_posix()),
    )
    files: dict[str, bytes] = {}
    cut: list[str] = []
    left = SHIP_LIMIT
    for path in paths:
        rel = path.relative_to(report_dir).as_posix()
        try:
            size = path.stat().st_size
            essential = rel in FIRST and rel != PYTEST_LOG
            limit = size if essential else min(LOG_LIMIT, max(0, left))
            with open(path, "rb") as fh:
                if size > limit:
                    fh.seek(size - limit)
                    cut.append(rel)
                files[rel] = fh.read(limit)
        except OSError:
            cut.append(rel)
            continue
        left -= len(files[rel])
    return files, cut


def _environment(spec: ShardSpec) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)  # Ray's, for its own workers; the session sets its workers' threads
    if spec.omp_threads is not None:
        env["OMP_NUM_THREADS"] = spec.omp_threads
    return env


def _run(spec: ShardSpec, report_dir: Path, cores: list[int], result: ShardResult) -> None:
    log = report_dir.parent / PYTEST_LOG
    launcher = [
        sys.executable,
        "-m",
        "pytest_cannbench.cluster.launch_main",
        str(os.getpid()),
        ",".join(map(str, cores)) or "-",
        "--",
    ]
    cwd = spec.cwd if os.path.isdir(spec.cwd) else str(report_dir.parent)
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*launcher, *command(spec, report_dir)],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_environment(spec),
            start_new_session=True,
        )
        try:
            result.rc = proc.wait(timeout=spec.timeout_s)
        except subprocess.TimeoutExpired:
            result.error = (
                f"the session did not finish within --shard-timeout {spec.timeout_s:g} s and was "
                "stopped (SIGTERM: its finished cases are kept)"
            )
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        except BaseException:  # the task cancelled: take the session down with it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
    result.seconds = round(time.monotonic() - t0, 3)
    shutil.copyfile(log, report_dir / PYTEST_LOG)
    result.log_tail = _tail(log)


def grade_shard(spec: ShardSpec) -> ShardResult:
    """Run one shard here and return its report directory (the Ray task's body)."""
    import ray

    result = ShardResult(spec.index, spec.attempt, host=socket.gethostname())
    try:
        result.node_id = str(ray.get_runtime_context().get_node_id())
    except Exception:  # noqa: BLE001 (outside a Ray worker: a direct call)
        result.node_id = ""
    why = unreachable(spec)
    if why:
        result.error = why
        return result
    work = make_dir("shard")  # named for its process: a later session reaps it if this one dies (a lost node)
    try:
        report_dir = work / "report"
        report_dir.mkdir()
        with judge_cores(spec) as cores:
            result.cores = cores
            if spec.progress is not None:
                with contextlib.suppress(Exception):
                    spec.progress.post.remote(
                        {
                            "event": "started",
                            "index": spec.index,
                            "attempt": spec.attempt,
                            "node_id": result.node_id,
                            "host": result.host,
                            "cores": cores,
                        }
                    )
            _run(spec, report_dir, cores, result)
        result.files, result.cut = ship(report_dir)
    except OSError as exc:
        result.error = result.error or f"the shard could not run on {result.host}: {exc}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result

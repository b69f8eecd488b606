"""Golden cache speed-up: the same self-check run twice, cold cache then warm cache.

Usage: python benchmarks/golden_cache.py [TASKS] [-k EXPR]

Each run is an in-process pytest session over TASKS (default: the bundled tasks/) with a fresh
temporary cache directory for the pair. Item setup is where golden data is fetched (computed by
the golden worker on a miss, loaded from disk on a hit), so the summed setup time is the golden
cost; the wall time includes the candidate and the comparison, which the cache does not touch.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

import pytest


class _Setup:
    def __init__(self) -> None:
        self.seconds = 0.0
        self.cases = 0
        self.cached = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup":
            self.seconds += report.duration
        data = getattr(report, "cann", None)
        if report.when == "call" and isinstance(data, dict):
            self.cases += 1
            self.cached += bool(data.get("golden_cached"))


def _run(tasks: Path, cache: Path, keyword: str | None) -> tuple[float, _Setup, int]:
    probe = _Setup()
    args = ["-q", "-p", "no:cacheprovider", "-W", "ignore", f"--cann-tasks={tasks}", "--cann-source=@golden",
            f"--cann-golden-cache={cache}", "--rootdir", str(tasks)]
    if keyword:
        args += ["-k", keyword]
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = pytest.main(args, plugins=[probe])
    return time.perf_counter() - t0, probe, int(code)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="?", type=Path, default=Path(__file__).resolve().parent.parent / "tasks")
    parser.add_argument("-k", dest="keyword")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cannbench-cache-") as tmp:
        cold_wall, cold, code1 = _run(args.tasks.resolve(), Path(tmp), args.keyword)
        warm_wall, warm, code2 = _run(args.tasks.resolve(), Path(tmp), args.keyword)
    print(f"tasks             {args.tasks}  ({cold.cases} cases graded, exit codes {code1}/{code2})")
    print(f"cold: golden {cold.seconds:8.2f} s  wall {cold_wall:8.2f} s  cached {cold.cached}/{cold.cases}")
    print(f"warm: golden {warm.seconds:8.2f} s  wall {warm_wall:8.2f} s  cached {warm.cached}/{warm.cases}")
    speedup = cold.seconds / warm.seconds if warm.seconds else float("inf")
    print(f"golden stage speed-up {speedup:6.1f}x; whole run {cold_wall / warm_wall:5.2f}x")
    return 0 if warm.cached == warm.cases else 1


if __name__ == "__main__":
    sys.exit(main())

"""Collection speed of a task tree: the plugin's collection next to the YAML-parsing floor.

Usage: python benchmarks/collect.py PATH/TO/tasks [--repeat 3]

Prints, from one run on the same machine:
  * plugin collection (pytest --collect-only, in-process) in seconds, items and operators;
  * the floor: reading every proto.yaml + cases.yaml with PyYAML's C loader, and with the
    pure-Python SafeLoader that naive code uses;
  * the ratios between them, the 5 s target, and whether any golden.py was imported
    (collection must import none).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
from pathlib import Path


def _collect(tasks: Path) -> tuple[float, int, bool]:
    import pytest

    class Counter:
        items = 0

        def pytest_collection_finish(self, session: pytest.Session) -> None:
            Counter.items = len(session.items)

    before = set(sys.modules)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-W", "ignore", f"--cann-tasks={tasks}",
                     "--rootdir", str(tasks)], plugins=[Counter()])
    elapsed = time.perf_counter() - t0
    imported_golden = any(name.startswith("_cannbench_golden") for name in set(sys.modules) - before)
    return elapsed, Counter.items, imported_golden


def _parse_all(tasks: Path, loader_name: str) -> float:
    import yaml

    loader = getattr(yaml, loader_name)
    files = [p for p in sorted(tasks.rglob("proto.yaml"))] + [p for p in sorted(tasks.rglob("cases.yaml"))]
    t0 = time.perf_counter()
    for path in files:
        yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    tasks = args.tasks.resolve()
    operators = sum(1 for p in tasks.rglob("proto.yaml") if (p.parent / "cases.yaml").exists())

    runs = [_collect(tasks) for _ in range(args.repeat)]
    collect_s = statistics.median(r[0] for r in runs)
    items, golden_imported = runs[0][1], any(r[2] for r in runs)
    c_floor = statistics.median(_parse_all(tasks, "CSafeLoader") for _ in range(args.repeat))
    py_floor = statistics.median(_parse_all(tasks, "SafeLoader") for _ in range(args.repeat))

    print(f"task tree           {tasks}")
    print(f"operators / items   {operators} / {items}")
    print(f"plugin collection   {collect_s:7.3f} s  (median of {args.repeat}; target < 5 s: "
          f"{'met' if collect_s < 5 else 'MISSED'})")
    print(f"YAML floor, C       {c_floor:7.3f} s  -> collection / floor = {collect_s / c_floor:5.2f}x")
    print(f"YAML floor, Python  {py_floor:7.3f} s  -> collection / floor = {collect_s / py_floor:5.2f}x")
    print(f"golden.py imported  {'YES (bug)' if golden_imported else 'no'}")
    return 0 if collect_s < 5 and not golden_imported else 1


if __name__ == "__main__":
    sys.exit(main())

"""The warm grading service against cold pytest sessions, side by side on one machine.

Usage: python benchmarks/serve.py [--parts a,b,c] [--modes accuracy,timed] [--judges N] [--judge-cpus C]
       [--requests 200] [--select EXPR] [--json OUT]

(a) one operator's cases (default ``gelu``: the bundled C++ example's 20) through a warm ``cannbench serve``
    against a cold ``pytest`` session, accuracy only and then timed (profile ``standard``, the session's own
    defaults): the service is started and warmed once (a first request computes the goldens), then the same
    request is timed end to end through the HTTP client; the session is a real ``python -m pytest`` process from
    start to exit.
(b) a group of 16 candidates for that operator (8 correct: the C++ example; 4 wrong; 2 that do not compile; 1
    that hangs; 1 that crashes) through one ``/v1/batch`` (after a warm-up request per judge on the same cases)
    against 16 cold sessions one after the other,
    accuracy only, with the same case timeout (``--case-timeout``) on both sides; every candidate's status is
    checked on both sides.
(c) ``--requests`` small concurrent requests (one case each, a prebuilt wheel) through the asyncio client:
    p50/p99 latency from send to answer, and how many were answered (none may be lost).

The service is a real ``cannbench serve`` process on a free port (an embedded Ray cluster; ``--judges``, default
the server's own choice); every submission is a prebuilt wheel or inline files, so no kernel build is measured
except the two that fail to compile (both sides build those).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from serve_helpers import CRASH, HANG, NO_COMPILE, WRONG, Server, wheel_submission  # noqa: E402

from conftest import prebuilt_submission  # noqa: E402
from pytest_cannbench.serve.client import AsyncClient, Client, archive_of  # noqa: E402

GROUP = [("correct", 8), ("wrong", 4), ("no_compile", 2), ("hang", 1), ("crash", 1)]
EXPECTED = {"correct": "passed", "wrong": "failed", "no_compile": "compile_failed", "hang": "timeout",
            "crash": "crashed"}
# a cold session's board read back as the service's candidate status (the worst case decides, as serve.answer)
ORDER = ("compile_failed", "timeout", "crashed", "failed", "passed")


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))


def cold_session(source: Path, select: str, *, perf: bool, case_timeout: float, work: Path) -> tuple[float, str]:
    """One cold ``pytest`` session grading ``source``: its wall and the candidate's status (as the service says)."""
    work.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--cann-tasks={ROOT / 'tasks'}",
            f"--cann-source={source}", "--cann-golden-cache=off", f"--cann-case-timeout={case_timeout:g}",
            f"--cann-report-dir={work / 'reports'}", "-k", select, *([] if perf else ["--cann-no-perf"])]
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=work, env=_env(), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    statuses = set()
    results = work / "reports" / "results.jsonl"
    if results.is_file():
        for line in results.read_text().splitlines():
            outcome = json.loads(line).get("outcome") or {}
            statuses.add({"oom_killed": "crashed", "error": "failed"}.get(outcome.get("status"),
                                                                          outcome.get("status")))
    status = next((s for s in ORDER if s in statuses), f"rc={proc.returncode}")
    if status.startswith("rc="):
        print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
    return wall, status


def candidates(work: Path, correct: Path) -> dict[str, tuple[dict[str, Any], Path]]:
    """Each kind of candidate: its request submission and a directory a cold session grades."""
    kinds: dict[str, tuple[dict[str, Any], Path]] = {"correct": (archive_of(correct), correct)}
    for kind, module in (("wrong", WRONG), ("hang", HANG), ("crash", CRASH)):
        wheel_submission(work / kind, module)
        kinds[kind] = (archive_of(work / kind), work / kind)
    broken = work / "no_compile"
    for name, text in NO_COMPILE.items():
        (broken / name).parent.mkdir(parents=True, exist_ok=True)
        (broken / name).write_text(text)
    kinds["no_compile"] = ({"files": NO_COMPILE}, broken)
    return kinds


def warm_up(url: str, submission: dict[str, Any], options: dict[str, Any], idle_s: float = 3.0) -> None:
    """One request per judge at once (each judge's grader of this identity and its goldens), then the service
    left idle a moment, as a warm service is between requests: each judge starts its next candidate's worker."""
    with Client(url, timeout=7200) as probe:
        count = len(probe.health()["judges"])

    def one(_: int) -> None:
        with Client(url, timeout=7200) as own:
            own.grade(submission, **options)

    with ThreadPoolExecutor(count) as pool:
        list(pool.map(one, range(count)))
    time.sleep(idle_s)


def part_a(client: Client, correct: Path, select: str, work: Path, modes: list[str]) -> list[dict[str, Any]]:
    rows = []
    for perf in [m == "timed" for m in modes]:
        options = {"select": select, "profile": "standard", "perf": perf, "deadline_s": 3600}
        warm_up(str(client.http.base_url), archive_of(correct), options)
        t0 = time.perf_counter()
        answer = client.grade(archive_of(correct), **options)
        warm = time.perf_counter() - t0
        cold, status = cold_session(correct, select, perf=perf, case_timeout=300, work=work / f"a-{perf}")
        rows.append({"part": "a", "mode": "timed" if perf else "accuracy only", "cases": len(answer["cases"]),
                     "cold_s": round(cold, 2), "warm_s": round(warm, 2), "ratio": round(cold / warm, 2),
                     "status_warm": answer["status"], "status_cold": status})
    return rows


def part_b(client: Client, kinds: dict[str, tuple[dict[str, Any], Path]], select: str, case_timeout: float,
           work: Path) -> list[dict[str, Any]]:
    names = [f"{kind}-{i}" for kind, count in GROUP for i in range(count)]
    submissions = [kinds[name.rsplit("-", 1)[0]][0] for name in names]
    # after warm-up, as in (a): an earlier group on these cases left their goldens on every judge
    warm_up(str(client.http.base_url), kinds["correct"][0], {"select": select, "profile": "quick", "perf": False})
    t0 = time.perf_counter()
    batch = client.batch(submissions, names=names, select=select, profile="quick", perf=False, deadline_s=3600)
    warm = time.perf_counter() - t0
    warm_status = {a["name"]: a["status"] for a in batch["candidates"]}
    cold_total, cold_status = 0.0, {}
    for name in names:
        wall, status = cold_session(kinds[name.rsplit("-", 1)[0]][1], select, perf=False,
                                    case_timeout=case_timeout, work=work / f"b-{name}")
        cold_total += wall
        cold_status[name] = status
    wrong = {n: (warm_status.get(n), cold_status[n]) for n in names
             if warm_status.get(n) != EXPECTED[n.rsplit("-", 1)[0]] or cold_status[n] != EXPECTED[n.rsplit("-", 1)[0]]}
    return [{"part": "b", "candidates": len(names), "cold_s": round(cold_total, 2), "warm_s": round(warm, 2),
             "ratio": round(cold_total / warm, 2), "statuses_right": not wrong, "mismatches": wrong,
             "pass_at_k": batch["pass_at_k"], "goldens_computed": batch["goldens_computed"]}]


async def _concurrent(url: str, submission: dict[str, Any], count: int, select: str) -> list[float | None]:
    async with AsyncClient(url, max_connections=count, retries=0) as client:
        async def one() -> float | None:
            t0 = time.perf_counter()
            try:
                answer = await client.grade(submission, select=select, profile="quick", perf=False, deadline_s=3600)
            except Exception as exc:  # noqa: BLE001 - a lost or refused request is counted, not raised
                print(f"request failed: {exc}", file=sys.stderr)
                return None
            return time.perf_counter() - t0 if answer.get("status") else None

        return list(await asyncio.gather(*(one() for _ in range(count))))


def part_c(url: str, submission: dict[str, Any], count: int, select: str) -> list[dict[str, Any]]:
    t0 = time.perf_counter()
    latencies = asyncio.run(_concurrent(url, submission, count, select))
    wall = time.perf_counter() - t0
    done = sorted(x for x in latencies if x is not None)
    q = statistics.quantiles(done, n=100) if len(done) >= 2 else done * 99
    return [{"part": "c", "requests": count, "answered": len(done), "lost": count - len(done),
             "p50_s": round(statistics.median(done), 2) if done else None, "p99_s": round(q[98], 2) if done else None,
             "wall_s": round(wall, 2), "per_s": round(len(done) / wall, 2)}]


def table(rows: list[dict[str, Any]]) -> str:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(row.get(k, "")) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="a,b,c")
    parser.add_argument("--select", default="gelu", help="the operator's cases (a -k expression; default gelu)")
    parser.add_argument("--judges", type=int, default=None)
    parser.add_argument("--judge-cpus", type=float, default=None, help="Ray CPUs per judge (server default: 1 on CPU)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--small-select", default="gelu and 01", help="part c's one case")
    parser.add_argument(
        "--group-select",
        default="gelu and (01 or 02)",
        help="part b's cases (the hanging candidate costs the case timeout on every case, on both sides)",
    )
    parser.add_argument("--case-timeout", type=float, default=5.0, help="part b's case timeout, both sides")
    parser.add_argument("--source", type=Path, default=ROOT / "examples" / "cpp_cpu")
    parser.add_argument("--modes", default="accuracy,timed", help="part a's modes (accuracy, timed)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    work = Path(tempfile.mkdtemp(prefix="cannbench-bench-serve-"))
    correct = prebuilt_submission(args.source)
    kinds = candidates(work / "candidates", correct)
    extra = ["--judges", str(args.judges)] if args.judges else []
    extra += ["--judge-cpus", f"{args.judge_cpus:g}"] if args.judge_cpus else []
    server = Server("--tasks", str(ROOT / "tasks"), "--case-timeout", f"{args.case_timeout:g}", "--queue-size",
                    str(max(64, args.requests)), "--warm", "standard:accuracy", "--warm", "quick:accuracy", *extra)
    rows: list[dict[str, Any]] = []
    try:
        print(f"service: {server.url}; {len(Client(server.url).health()['judges'])} judges", file=sys.stderr)
        with Client(server.url, timeout=7200) as client:
            if "a" in parts:
                rows += part_a(client, correct, args.select, work, args.modes.split(","))
                print(table(rows), file=sys.stderr)
            if "b" in parts:
                rows += part_b(client, kinds, args.group_select, args.case_timeout, work)
        if "c" in parts:
            rows += part_c(server.url, kinds["wrong"][0], args.requests, args.small_select)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    for part in "abc":
        chosen = [r for r in rows if r["part"] == part]
        if chosen:
            print(f"\n({part})\n{table(chosen)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

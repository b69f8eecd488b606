"""Phase profile of one grading run, beside the irreducible work for the same cases.

Usage: python benchmarks/phases.py [--json OUT] [--no-floor] -- PYTEST_ARGS...
e.g.   python benchmarks/phases.py -- --cann-tasks=/path/to/tasks/level1 --cann-self-check --cann-no-perf \\
           --cann-golden-cache off -n 2

The pytest session runs as a child process (its report directory is a fresh temporary one unless the arguments
name one). Every ~0.2 s the summed PSS of the whole process tree is sampled
(:mod:`tree_memory`: PSS read only where a new peak is possible, and its own CPU reported), so the peak counts shared
pages once, not once per process. Afterwards ``results.jsonl`` gives each case's phases
(:mod:`pytest_cannbench.phases`: wall, CPU and peak resident memory, measured where the work happens), which are
summed per phase; what the cases do not account for (process starts of pytest and xdist, collection, reporting)
is the session's wall times its processes minus their sum.

The irreducible work (the floor) is measured for the same cases in a separate, single-threaded process: inputs
generated once, the fp64 golden once, a candidate once (the golden in the case's own dtypes, as under
``--cann-self-check``), and one MERE/MARE comparison streamed in chunks, nothing else: no workers, no transfer,
no second pass. For a timed run the floor also holds, per timed case, what verifying each of its timed sets needs
(inputs, fp64 golden, one comparison), the timed calls themselves as the run measured them (sets x the median
candidate and baseline calls) and the submission's build: the README main job's irreducible work (issue 22).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tree_memory import PeakSampler  # noqa: E402  (benchmarks/ is on sys.path as the script's directory)

from pytest_cannbench.phases import PHASES, TIMING_PARTS  # noqa: E402  (the checkout's package, also when not installed)


def run_session(pytest_args: list[str], report_dir: Path) -> dict[str, Any]:
    # --noconftest: run from the checkout (so that its package is the one measured), pytest would otherwise load
    # the test suite's conftest (torch and every module imported up front), which no user's session has
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--noconftest", "-q", *pytest_args]
    if not any(a.startswith("--cann-report-dir") for a in pytest_args):
        args.append(f"--cann-report-dir={report_dir}")
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = PeakSampler(proc.pid)
    sampler.start()
    assert proc.stdout is not None
    tail = proc.stdout.read()[-3000:]
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    sampler.finish()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": wall, "user_s": usage.ru_utime, "sys_s": usage.ru_stime,
            "peak_pss_gib": sampler.peak / 2**30, "pss_samples": sampler.samples,
            "pss_read": sampler.read, "sampler_cpu_s": sampler.cpu_s, "exit": proc.returncode,
            "peak_at_s": sampler.peak_at, "at_peak": [[b / 2**30, label] for b, label in sampler.at_peak],
            "tail": tail}


def read_cases(results: Path) -> list[dict[str, Any]]:
    cases = []
    for line in results.read_text().splitlines():
        data = json.loads(line).get("outcome")  # journal lines: {"run": ..., "outcome": CaseOutcome}
        if isinstance(data, dict) and "status" in data and "key" in data:
            cases.append(data)
    return cases


def phase_totals(cases: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    totals: dict[str, dict[str, float]] = {}
    for case in cases:
        seconds = case.get("seconds") or {}
        for name in [*PHASES, *TIMING_PARTS, "candidate"]:
            if name not in seconds:
                continue
            row = totals.setdefault(name, {"wall_s": 0.0, "cpu_s": 0.0, "peak_mib": 0.0})
            row["wall_s"] += seconds[name]
            row["cpu_s"] += seconds.get(f"{name}_cpu", 0.0)
            row["peak_mib"] = max(row["peak_mib"], seconds.get(f"{name}_peak_mib", 0.0))
    return totals


def floor_cases(tasks: str, cases: list[dict[str, Any]]) -> list[list[Any]]:
    """``[op_dir, case_id, timed sets]`` of every graded case, for the floor process."""
    from pytest_cannbench.taskformat.dirs import find_bench_root

    root = find_bench_root(Path(tasks).resolve()) if (Path(tasks) / "proto.yaml").is_file() else None
    if root is None:
        probe = next(Path(tasks).resolve().rglob("proto.yaml"), None)
        root = find_bench_root(probe.parent) if probe else Path(tasks).resolve()
    return [[str(root / c["rel_path"]), c["case_id"], (c.get("timing") or {}).get("input_sets") or 0] for c in cases
            if c.get("case_id") is not None and c["status"] in ("passed", "failed")]


def timed_calls_s(cases: list[dict[str, Any]]) -> float:
    """The timed calls themselves, as the run measured them: per timed case, its sets times the candidate's and
    every live baseline's median call (a floor for any grader that times this many verified calls)."""
    total = 0.0
    for c in cases:
        t = c.get("timing") or {}
        if not t.get("measured"):
            continue
        medians = [(t.get(k) or {}).get("median_us") for k in ("cand", "baseline")]
        medians += [v.get("median_us") for k, v in t.items() if k.endswith("_baseline") and isinstance(v, dict)]
        total += (t.get("input_sets") or 0) * sum(m for m in medians if isinstance(m, (int, float))) / 1e6
    return total


def build_s(report_dir: Path) -> float:
    """The submission's build, install and discovery (the leaderboard's ``submission.seconds``): work the floor
    has too, since a grader must compile what it grades."""
    try:
        board = json.loads((report_dir / "leaderboard.json").read_text())
    except (OSError, ValueError):
        return 0.0
    seconds = (board.get("submission") or {}).get("seconds") or {}
    return float(sum(v for v in seconds.values() if isinstance(v, (int, float))))


def measure_floor(todo: list[list[Any]]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(todo, fh)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "floor_work.py"), fh.name],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    wall = time.perf_counter() - t0
    os.unlink(fh.name)
    data = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    return {"wall_s": wall, "user_s": usage.ru_utime, "sys_s": usage.ru_stime, **data}


def xdist_workers(args: list[str]) -> int:
    """The judge processes a session runs (``-n N``, ``-nN``, ``--numprocesses=N``; 1 without xdist)."""
    for i, arg in enumerate(args):
        value = None
        if arg in ("-n", "--numprocesses") and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--numprocesses="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-n") and arg[2:].isdigit():
            value = arg[2:]
        if value is not None and value.isdigit():
            return max(1, int(value))
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--no-floor", action="store_true", help="skip the irreducible-work measurement")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    pytest_args = [a for a in args.pytest_args if a != "--"]
    with tempfile.TemporaryDirectory(prefix="cannbench-phases-") as tmp:
        session = run_session(pytest_args, Path(tmp))
        named = [a.split("=", 1)[1] for a in pytest_args if a.startswith("--cann-report-dir=")]
        results = Path(named[0] if named else tmp) / "results.jsonl"
        cases = read_cases(results) if results.is_file() else []
        built = build_s(results.parent)
    if not cases:
        print(session["tail"])
        return 1
    totals = phase_totals(cases)
    processes = xdist_workers(pytest_args)
    in_cases = sum(c.get("seconds", {}).get(p, 0.0) for c in cases for p in PHASES)
    statuses: dict[str, int] = {}
    for c in cases:
        statuses[c["status"]] = statuses.get(c["status"], 0) + 1
    report: dict[str, Any] = {"session": {k: v for k, v in session.items() if k != "tail"}, "cases": len(cases),
                              "statuses": statuses, "phases": totals,
                              "outside_cases_s": session["wall_s"] * processes - in_cases, "processes": processes}
    print(f"session: {len(cases)} cases {statuses}, wall {session['wall_s']:.1f} s, tree CPU user "
          f"{session['user_s']:.1f} s + sys {session['sys_s']:.1f} s, peak summed PSS "
          f"{session['peak_pss_gib']:.2f} GiB ({session['pss_samples']} samples, {session['pss_read']} read PSS; the "
          f"sampler's own CPU {session['sampler_cpu_s']:.1f} s), exit {session['exit']}")
    if session.get("at_peak"):
        print(f"at the peak ({session['peak_at_s']:.0f} s in), the largest processes: "
              + ", ".join(f"{label} {gib:.2f}" for gib, label in session["at_peak"]) + " GiB")
    print(f"{'phase':14} {'wall s':>9} {'CPU s':>9} {'peak MiB':>9}  what")
    for name, what in [*PHASES.items(), ("candidate", "the candidate call as the worker reports it (untrusted)")]:
        row = totals.get(name)
        if row:
            print(f"{name:14} {row['wall_s']:9.1f} {row['cpu_s']:9.1f} {row['peak_mib']:9.0f}  {what}")
        if name == "timing":  # its parts, indented: already inside it
            for part, about in TIMING_PARTS.items():
                sub = totals.get(part)
                if sub:
                    print(f"  {part:12} {sub['wall_s']:9.1f} {sub['cpu_s']:9.1f} {'':>9}  {about}")
    print(f"{'outside cases':14} {report['outside_cases_s']:9.1f} {'':>9} {'':>9}  wall x {processes} process(es) "
          "minus the phases: pytest/xdist starts, collection, per-item overhead, reporting")
    if not args.no_floor:
        tasks = next((a.split("=", 1)[1] for a in pytest_args if a.startswith("--cann-tasks=")), str(ROOT / "tasks"))
        floor = report["floor"] = measure_floor(floor_cases(tasks, cases))
        calls = floor["timed_calls_s"] = timed_calls_s(cases)
        floor["build_s"] = built
        whole = floor["wall_s"] + floor.get("timed_sets_s", 0.0) + calls + built  # the sets are extrapolated
        print(f"irreducible work for the same {floor.get('cases', 0)} cases (one process, one thread): wall "
              f"{floor['wall_s']:.1f} s (inputs {floor.get('inputs_s', 0):.1f}, golden {floor.get('golden_s', 0):.1f}, "
              f"candidate {floor.get('candidate_s', 0):.1f}, compare {floor.get('compare_s', 0):.1f}, torch import "
              f"{floor.get('import_s', 0):.1f}), CPU user {floor['user_s']:.1f} s + sys {floor['sys_s']:.1f} s, peak "
              f"RSS {floor.get('peak_gib', 0):.2f} GiB; run/floor: wall "
              f"{session['wall_s'] / max(floor['wall_s'], 1e-9):.2f}x, CPU "
              f"{(session['user_s'] + session['sys_s']) / max(floor['user_s'] + floor['sys_s'], 1e-9):.2f}x")
        if calls or built:
            print(f"  plus verifying {floor.get('timed_sets', 0)} timed sets (inputs, golden, comparison each, from "
                  f"the case's own figures) {floor.get('timed_sets_s', 0):.1f} s, the timed calls as measured "
                  f"{calls:.1f} s and the submission's build {built:.1f} s: floor {whole:.1f} s, run/floor wall "
                  f"{session['wall_s'] / max(whole, 1e-9):.2f}x")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

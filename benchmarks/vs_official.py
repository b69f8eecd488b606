"""Our accuracy-only run beside the official CANN Bench harness's CPU path: same cases, same machine, one run.

Usage (run with the project's Python; the official side gets its own throwaway venv)::

    nice -n 19 .venv/bin/python benchmarks/vs_official.py --official /path/to/cann-bench \\
        --tasks /path/to/cann-bench/tasks/level1 --work-dir ~/.cache/cannbench-vs-official [-n 2] [--json out.json]
    # a quick trial: two operators, five cases each
    ... --operators exp,mish --cases 1,6,7,12,15

What runs, each as a child process started from a fresh temporary directory:

(a) ours: ``python -m pytest -p no:cacheprovider --cann-tasks=<copy> --cann-source=@golden --cann-no-perf
    --cann-golden-cache=off -n N -q --cann-report-dir=<tmp>`` (the goldens graded as the candidate, no timing).

(b) the official harness (``--official``, a checked-out hicann/cann-bench tree) on the CPU, in accuracy-only mode,
    grading the goldens as the candidate, which is how its docs/guide/quick_start.md "golden self-check" works:
    its own ``scripts/utils/build_golden_wheel.py --task-dir <copy> --install`` packs the selected goldens into a
    ``cann_bench`` wheel and installs it into a throwaway venv under ``--work-dir`` (the project's venv is never
    touched), then ``PYTHONPATH=<official>/src python -m kernel_eval.cli eval --bench-name cann --task-dir <copy>
    --device cpu --no-perf --reports-dir <tmp>`` grades it. ``--device cpu`` is the harness's own CPU path
    (``kernel_eval.simulation.simulate``): one process, cases in series, in-process, for each case the inputs
    generated from the case seed, the golden in float64 on the CPU, the candidate (the installed golden on the
    case's own dtypes), a same-precision reference run, the MERE/MARE check, then its JSON/Markdown/HTML reports.
    The venv gets ``torch==2.13.0`` (the CPU build; the official pin is torch 2.10.0 + torch_npu, NPU-only) and
    the rest of its requirements.txt except torch_npu, torchvision, en_dtypes and the dev tools. It is made once
    and reused on later runs with the same ``--work-dir``; the wheel build + install is timed as setup, apart.

Not measured on the official side: its NPU path (``scripts/run_evaluation.sh``, which insists on the NPU-built
cann_bench_utils; the per-card ``eval-child`` process pool; staged compile/accuracy/perf evaluation; torch_npu and
the profiler), building a submission from source, and its anti-cheat checks (APIGuard finds no torch_npu and only
prints a [SECURITY] line). Its CPU path ignores a level filter under a bench root, so both sides read one copy of
the selected operators (``--operators``, ``--cases`` trim cases.yaml) made under the work directory; relative
paths (``level1/exp``) and case ids are kept, so case seeds are those of the original tree.

How to read it: for each side, wall time; CPU time (user+sys) of the whole process tree (this script makes itself
a child subreaper, so orphaned grandchildren are reaped here and counted too); the peak of the tree's summed PSS,
sampled every 0.2 s (shared pages counted once; ``tree_memory.py``: PSS read only where a new peak is possible, so
the sampler takes little CPU from the side that keeps both cores busy, and what it took is printed); the process
count at that peak; verdicts, and whether they agree case by case. The last column is ours/official (below 1:
we are cheaper). Both sides inherit this environment (thread counts included): ours runs N pytest workers plus
their golden workers, the official one process. Order effects: the two sides load different torch installs, so
the first run of each pays a cold page cache; ``--repeat`` runs them alternately and reports medians.

Also: each side generates its own inputs (ours with the default ``--cann-input-compat=fixed``), so the work is the
same cases, not bit-identical tensors; the official run uses torch 2.13.0, not its pinned 2.10.0. Exit status 0
when both sides graded every selected case and agree on every verdict, else 1.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from phases import read_cases  # noqa: E402  (results.jsonl reader)
from tree_memory import PeakSampler, children_map  # noqa: E402  (tree walk and peak PSS, shared with phases)

TORCH = "torch==2.13.0"  # a CPU build; an unpinned torch pulls a multi-GB CUDA build
# The official requirements.txt, less torch/torch_npu (NPU only), torchvision/en_dtypes (a few level-3+ goldens),
# and the dev tools; plus what its golden-wheel builder needs (build --no-isolation: setuptools, wheel).
OFFICIAL_DEPS = ["build", "setuptools", "wheel", "numpy>=1.21.0", "pyyaml>=6.0", "scipy", "pandas", "decorator",
                 "attrs", "cloudpickle", "ml-dtypes", "psutil", "tornado", "expecttest", "protobuf",
                 "ruamel.yaml>=0.18"]
REQUIRED = ("proto.yaml", "cases.yaml", "golden.py")


def log(msg: str) -> None:
    print(f"vs_official: {msg}", file=sys.stderr, flush=True)


# ---- the case selection: one copy both sides read ------------------------------------------------------------

def bench_root_of(tasks: Path) -> Path:
    """The directory relative paths are taken from: an ancestor named ``tasks`` or holding ``metadata/``."""
    for d in [tasks, *tasks.parents]:
        if d.name == "tasks" or (d / "metadata").is_dir():
            return d
    return tasks.parent


def operator_name(op_dir: Path) -> str:
    import yaml

    data = yaml.safe_load((op_dir / "proto.yaml").read_text(encoding="utf-8")) or {}
    return str((data.get("operator") or {}).get("name", ""))


def select(tasks: Path, operators: list[str] | None) -> list[Path]:
    found = sorted(p.parent for p in tasks.rglob("proto.yaml")
                   if "metadata" not in p.parts and all((p.parent / f).is_file() for f in REQUIRED))
    if not operators:
        return found
    wanted = {o.lower() for o in operators}
    chosen = [d for d in found if d.name.lower() in wanted or operator_name(d).lower() in wanted]
    missing = wanted - {d.name.lower() for d in chosen} - {operator_name(d).lower() for d in chosen}
    if missing:
        raise SystemExit(f"vs_official: no operator {', '.join(sorted(missing))} under {tasks}")
    return chosen


def make_subset(tasks: Path, op_dirs: list[Path], case_ids: set[int] | None, dest: Path) -> tuple[int, list[str]]:
    """Copy the operators into ``dest`` (a bench root named tasks/), trimming cases.yaml to ``case_ids``."""
    import yaml

    root = bench_root_of(tasks)
    if (root / "metadata").is_dir():
        shutil.copytree(root / "metadata", dest / "metadata")
    cases, rels = 0, []
    for op_dir in op_dirs:
        rel = op_dir.relative_to(root)
        target = dest / rel
        shutil.copytree(op_dir, target, ignore=shutil.ignore_patterns("__pycache__"))
        data = yaml.safe_load((target / "cases.yaml").read_text(encoding="utf-8")) or {}
        if case_ids is not None:
            data["cases"] = [c for c in data.get("cases") or [] if c.get("case_id") in case_ids]
            if 0 < len(data["cases"]) < len(case_ids):
                log(f"{rel}: {len(data['cases'])} of the {len(case_ids)} case ids given exist")
            if not data["cases"]:
                log(f"{rel}: none of the cases {sorted(case_ids)}; left out")
                shutil.rmtree(target)
                continue
            (target / "cases.yaml").write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True),
                                               encoding="utf-8")
            (target / "cases.csv").unlink(missing_ok=True)  # the CSV mirror would no longer match
        cases += len(data.get("cases") or [])
        rels.append(str(rel))
    return cases, rels


# ---- the official harness's throwaway environment ------------------------------------------------------------

def official_venv(work: Path, base_python: str, official: Path) -> Path:
    venv = work / "venv-official"
    py = venv / "bin" / "python"
    wanted = " ".join([TORCH, *OFFICIAL_DEPS])
    marker = venv / ".vs_official_deps"
    if not py.exists():
        log(f"creating the official harness's venv at {venv}")
        subprocess.run([base_python, "-m", "venv", str(venv)], check=True)
    if not marker.exists() or marker.read_text() != wanted:
        log(f"installing into it: {wanted}")
        subprocess.run([str(py), "-m", "pip", "install", "-q", TORCH, *OFFICIAL_DEPS], check=True,
                       stdout=sys.stderr)
        marker.write_text(wanted)
    probe = subprocess.run([str(py), "-c", "import kernel_eval.cli"], env=official_env(official),
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise SystemExit(f"vs_official: the official harness does not import in {venv}:\n{probe.stderr[-2000:]}")
    return py


def official_env(official: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(official / "src"), env.get("PYTHONPATH", "")] if p)
    env.pop("VIRTUAL_ENV", None)
    return env


def install_goldens(py: Path, official: Path, subset: Path, run_dir: Path) -> float:
    """The official golden self-check setup: its build_golden_wheel.py packs and installs the selected goldens."""
    t0 = time.perf_counter()
    out = subprocess.run([str(py), str(official / "scripts" / "utils" / "build_golden_wheel.py"), "--task-dir",
                          str(subset), "--output-dir", str(run_dir / "golden_wheel"), "--install"],
                         cwd=run_dir, env=official_env(official), capture_output=True, text=True)
    (run_dir / "golden_wheel.log").write_text(out.stdout + out.stderr)
    if out.returncode != 0:
        raise SystemExit(f"vs_official: build_golden_wheel.py failed:\n{(out.stdout + out.stderr)[-3000:]}")
    return time.perf_counter() - t0


# ---- measuring a process tree ---------------------------------------------------------------------------------

def become_subreaper() -> None:
    """Orphaned descendants are reparented to this process, so their CPU time reaches RUSAGE_CHILDREN here."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        log("could not become a child subreaper; orphaned grandchildren's CPU time may be missed")


def reap_leftovers(grace_s: float = 60.0) -> int:
    """Wait for descendants still alive after the main child (now our children); kill them after ``grace_s``."""
    deadline, killed = time.monotonic() + grace_s, 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return killed
        if pid:
            continue
        if time.monotonic() > deadline:
            for child in children_map().get(os.getpid(), []):
                try:
                    os.kill(child, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            deadline = float("inf")
        time.sleep(0.1)


def measure(label: str, argv: list[str], cwd: Path, env: dict[str, str] | None, logfile: Path,
            echo: bool) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    sampler = PeakSampler(os.getpid(), include_root=False)  # every descendant of this process, orphans included
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace")
    sampler.start()
    assert proc.stdout is not None
    with logfile.open("w") as fh:
        for line in proc.stdout:
            fh.write(line)
            if echo:
                print(f"  {label}| {line.rstrip()}", file=sys.stderr, flush=True)
    _, status = os.waitpid(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    killed = reap_leftovers()
    sampler.finish()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for b, what in sampler.at_peak:
        log(f"{label} at its peak: {b / 2**20:7.0f} MiB  {what}")
    return {"wall_s": wall, "user_s": after.ru_utime - before.ru_utime, "sys_s": after.ru_stime - before.ru_stime,
            "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "peak_pss_gib": sampler.peak / 2**30, "procs_at_peak": sampler.peak_procs,
            "at_peak": [[round(b / 2**20), what] for b, what in sampler.at_peak], "pss_samples": sampler.samples,
            "pss_read": sampler.read, "sampler_cpu_s": sampler.cpu_s,
            "exit": proc.returncode, "leftovers_killed": killed}


# ---- the two sides --------------------------------------------------------------------------------------------

def run_ours(subset: Path, run_dir: Path, workers: int, index: int, echo: bool) -> dict[str, Any]:
    cwd, report = run_dir / f"ours-cwd-{index}", run_dir / f"ours-report-{index}"
    cwd.mkdir()
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--cann-tasks={subset}", "--cann-source=@golden",
            "--cann-no-perf", "--cann-golden-cache=off", "-n", str(workers), "-q", f"--cann-report-dir={report}"]
    result = measure("ours", argv, cwd, None, run_dir / f"ours-{index}.log", echo)
    results = report / "results.jsonl"
    result["verdicts"] = {c["key"]: c["status"] == "passed" for c in (read_cases(results) if results.is_file()
                                                                      else [])}
    result["statuses"] = _count(c["status"] for c in (read_cases(results) if results.is_file() else []))
    return result


def run_official(py: Path, official: Path, subset: Path, run_dir: Path, index: int, echo: bool) -> dict[str, Any]:
    cwd, report = run_dir / f"official-cwd-{index}", run_dir / f"official-reports-{index}"
    cwd.mkdir()
    argv = [str(py), "-m", "kernel_eval.cli", "eval", "--bench-name", "cann", "--task-dir", str(subset),
            "--device", "cpu", "--no-perf", "--reports-dir", str(report)]
    result = measure("official", argv, cwd, official_env(official), run_dir / f"official-{index}.log", echo)
    verdicts: dict[str, bool] = {}
    statuses: list[str] = []
    for path in sorted(report.glob("*.json")):
        data = json.loads(path.read_text())
        for op in data.get("operators") or []:
            for case in op.get("cases") or []:
                verdicts[case["case_id"]] = case.get("status") == "success"
                statuses.append(str(case.get("status")))
    result["verdicts"], result["statuses"] = verdicts, _count(statuses)
    return result


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def _tally(statuses: dict[str, int]) -> str:
    return ", ".join(f"{v} {k}" for k, v in sorted(statuses.items())) or "none"


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("wall_s", "user_s", "sys_s", "cpu_s", "peak_pss_gib", "sampler_cpu_s")
    return {**runs[-1], **{k: statistics.median(r[k] for r in runs) for k in keys},
            "procs_at_peak": statistics.median_low(r["procs_at_peak"] for r in runs),
            "exit": max((r["exit"] for r in runs), key=abs), "runs": len(runs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--official", type=Path, required=True, help="a checked-out hicann/cann-bench tree")
    parser.add_argument("--tasks", type=Path, required=True,
                        help="the cases: a level directory of that tree (or any directory of operators)")
    parser.add_argument("--work-dir", type=Path, required=True,
                        help="holds the official harness's throwaway venv (reused) and each run's temporary files")
    parser.add_argument("--operators", help="comma-separated operator directory or proto names (default: all)")
    parser.add_argument("--cases", help="comma-separated case ids kept in each operator (default: all)")
    parser.add_argument("-n", "--workers", type=int, default=2, help="our pytest-xdist workers (default 2)")
    parser.add_argument("--repeat", type=int, default=1, help="alternate runs of each side; medians are reported")
    parser.add_argument("--python", default=sys.executable, help="base interpreter of the official venv")
    parser.add_argument("--quiet", action="store_true", help="do not echo the children's output to stderr")
    parser.add_argument("--keep", action="store_true", help="keep the run directory (logs, reports, task copy)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args()

    official, tasks, work = args.official.resolve(), args.tasks.resolve(), args.work_dir.resolve()
    if not (official / "src" / "kernel_eval" / "cli.py").is_file():
        parser.error(f"{official} is not an official cann-bench tree (no src/kernel_eval/cli.py)")
    if not tasks.is_dir():
        parser.error(f"{tasks} is not a directory")
    work.mkdir(parents=True, exist_ok=True)
    become_subreaper()
    operators = [o.strip() for o in args.operators.split(",") if o.strip()] if args.operators else None
    case_ids = {int(c) for c in args.cases.split(",") if c.strip()} if args.cases else None

    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    try:
        subset = run_dir / "tasks"
        n_cases, rels = make_subset(tasks, select(tasks, operators), case_ids, subset)
        if not n_cases:
            log("no cases selected")
            return 1
        log(f"{len(rels)} operators, {n_cases} cases copied to {subset}")
        py = official_venv(work, args.python, official)
        log("official setup: build_golden_wheel.py --install")
        setup_s = install_goldens(py, official, subset, run_dir)
        ours_runs, official_runs = [], []
        for i in range(args.repeat):
            for side in (("ours", "official") if i % 2 == 0 else ("official", "ours")):
                log(f"run {i + 1}/{args.repeat}: {side}")
                if side == "ours":
                    ours_runs.append(run_ours(subset, run_dir, args.workers, i, not args.quiet))
                else:
                    official_runs.append(run_official(py, official, subset, run_dir, i, not args.quiet))
        if args.keep:
            log(f"kept {run_dir}")
    finally:
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)

    ours, theirs = median_run(ours_runs), median_run(official_runs)
    both = set(ours["verdicts"]) & set(theirs["verdicts"])
    disagree = sorted(k for k in both if ours["verdicts"][k] != theirs["verdicts"][k])
    only = sorted(set(ours["verdicts"]) ^ set(theirs["verdicts"]))

    def ratio(key: str) -> str:
        return f"{ours[key] / theirs[key]:.2f}x" if theirs[key] else "-"

    print(f"cases: {n_cases} in {len(rels)} operators ({', '.join(rels[:6])}{', ...' if len(rels) > 6 else ''}); "
          f"runs per side: {args.repeat} (medians)")
    print(f"{'':22} {f'ours (-n {args.workers})':>16} {'official (CPU)':>16} {'ours/official':>14}")
    print(f"{'wall s':22} {ours['wall_s']:16.1f} {theirs['wall_s']:16.1f} {ratio('wall_s'):>14}")
    print(f"{'CPU s (user+sys)':22} {ours['cpu_s']:16.1f} {theirs['cpu_s']:16.1f} {ratio('cpu_s'):>14}")
    print(f"{'  user / sys':22} {ours['user_s']:9.1f} / {ours['sys_s']:4.1f} {theirs['user_s']:9.1f} / "
          f"{theirs['sys_s']:4.1f}")
    print(f"{'peak summed PSS GiB':22} {ours['peak_pss_gib']:16.2f} {theirs['peak_pss_gib']:16.2f} "
          f"{ratio('peak_pss_gib'):>14}")
    print(f"{'processes at peak':22} {ours['procs_at_peak']:16d} {theirs['procs_at_peak']:16d}")
    print(f"{'sampler CPU s':22} {ours['sampler_cpu_s']:16.1f} {theirs['sampler_cpu_s']:16.1f}")
    print(f"{'verdicts':22} {_tally(ours['statuses']):>16} {_tally(theirs['statuses']):>16}")
    print(f"{'exit code':22} {ours['exit']:16d} {theirs['exit']:16d}")
    print(f"verdict agreement: {len(both) - len(disagree)}/{len(both)} cases agree"
          + (f"; differ: {', '.join(disagree[:10])}" if disagree else "")
          + (f"; graded by one side only: {', '.join(only[:10])}" if only else ""))
    print(f"official setup, not in the ratios: golden wheel build + install {setup_s:.1f} s")
    if args.json:
        drop = ("verdicts",)
        args.json.write_text(json.dumps({
            "cases": n_cases, "operators": rels, "workers": args.workers, "repeat": args.repeat,
            "ours": {k: v for k, v in ours.items() if k not in drop},
            "official": {k: v for k, v in theirs.items() if k not in drop},
            "ours_runs": [{k: v for k, v in r.items() if k not in drop} for r in ours_runs],
            "official_runs": [{k: v for k, v in r.items() if k not in drop} for r in official_runs],
            "ratios": {k: (ours[k] / theirs[k] if theirs[k] else None) for k in ("wall_s", "cpu_s", "peak_pss_gib")},
            "verdicts_agree": len(both) - len(disagree), "verdicts_differ": disagree, "graded_by_one_side": only,
            "official_setup_s": setup_s}, indent=1))
    return 0 if ours_runs and official_runs and not disagree and not only and len(both) == n_cases else 1


if __name__ == "__main__":
    sys.exit(main())

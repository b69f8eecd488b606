"""``cannbench cluster-grade``: one submission graded on a whole task tree across a Ray cluster's judges.

The CLI (:mod:`pytest_cannbench.cli`) adds this subcommand with :func:`add_parser` and calls :func:`run`;
:func:`grade_tree` is the same run for Python callers. Exit status: 0 when every shard was graded and no case
failed, 1 when cases failed (as pytest), 3 when a shard could not be graded (its operators are on the board as
interrupted), 5 when the options given selected no case, 2 on a usage or input error.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_cannbench.cluster.assemble import assemble, summary_lines
from pytest_cannbench.cluster.connect import connected
from pytest_cannbench.cluster.grade import Runner
from pytest_cannbench.cluster.plan import refuse_problems, split, units_of
from pytest_cannbench.report.merge import InputError

SHARD_FAILED = 3
# pytest options a shard's session gets from the run itself: each names what to use instead
OWN_OPTIONS = {
    "--cann-tasks": "--tasks",
    "--cann-source": "--source",
    "--cann-report-dir": "--report-dir",
    "--cann-leaderboard": "--report-dir (the board is <report dir>/leaderboard.json)",
    "--junitxml": "--report-dir (junit is <report dir>/junit.xml)",
    "--junit-xml": "--report-dir",
    "--cann-shard": "--shards",
    "--cann-resume": "a fresh run (shards start from empty report directories)",
    "--cann-markdown": "cannbench report <report dir>/leaderboard.json --markdown PATH",
    "--cann-eval-report": "cannbench report <report dir>/leaderboard.json --eval-report PATH",
    "--html": "<report dir>/report.html, written for every run",
    "--cann-reveal-secret": "a local run (each shard draws its own secret)",
}
SELECTING = (
    "-k",
    "-m",
    "--deselect",
    "--ignore",
    "--ignore-glob",
    "--lf",
    "--last-failed",
    "-x",
    "--exitfirst",
    "--maxfail",
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "cluster-grade",
        help="grade one submission on a task tree across a Ray cluster (one merged board)",
        prog="cannbench cluster-grade",
        description="Grade one submission on a whole task tree spread over the judges of a Ray cluster and write "
        "what a local pytest run writes: leaderboard.json, results.jsonl, junit.xml and report.html in "
        "the report directory (each shard's own files under shards/<k>/). The operators are split into "
        "shards balanced by case count; each shard is a real pytest session of the plugin on a node "
        "(one judge per NPU or GPU, or per --cpus-per-judge CPUs); the boards come back through Ray "
        "and are merged for you, every score recomputed. Without --address an embedded Ray instance "
        "runs on this machine. The task tree and the submission must be at the same paths on every "
        "node (a shared filesystem); the results need none. A shard whose node dies is rerun; one "
        "that still fails is named, and its operators are on the board as interrupted. Exit status: 0 "
        "all graded and passed, 1 cases failed, 3 a shard could not be graded, 5 nothing selected, 2 a "
        "usage error. docs/cluster.md.",
        epilog="Options after -- go to every shard's pytest session, e.g. -- --cann-no-perf -k gelu.",
    )
    parser.add_argument(
        "--tasks",
        required=True,
        type=Path,
        metavar="DIR",
        help="the task tree (a bench root, a level directory or one operator directory)",
    )
    parser.add_argument(
        "--source",
        required=True,
        type=Path,
        metavar="DIR",
        help="the submission (as --cann-source): every shard grades its prebuilt "
        "dist/cann_bench*.whl, or builds it from build.sh when there is none",
    )
    parser.add_argument(
        "--address",
        default=None,
        metavar="ADDR",
        help="join this Ray cluster (HOST:PORT of its head; default $RAY_ADDRESS, else an "
        "embedded instance on this machine)",
    )
    parser.add_argument(
        "--report-dir",
        type=Path,
        default=Path("reports"),
        metavar="DIR",
        help="where the merged files go (default reports/)",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=0,
        metavar="N",
        help="how many shards (default: one per judge slot, at most one per operator)",
    )
    parser.add_argument(
        "--cpus-per-judge",
        type=float,
        default=2.0,
        metavar="N",
        help="CPU hosts: CPUs each judge holds, its cores pinned (default 2; the host's count "
        "gives timing runs a host each)",
    )
    parser.add_argument(
        "--num-cpus", type=int, default=None, metavar="N", help="the embedded instance's CPUs (default: this machine's)"
    )
    parser.add_argument(
        "--shard-retries",
        type=int,
        default=1,
        metavar="N",
        help="submit a shard that produced no board again this many times (default 1); a shard "
        "whose node is lost is rerun by Ray besides",
    )
    parser.add_argument(
        "--shard-timeout",
        type=float,
        default=None,
        metavar="SEC",
        help="stop a shard's session after SEC seconds (SIGTERM: its finished cases are kept)",
    )
    parser.add_argument(
        "pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="options for every shard's pytest session"
    )
    return parser


def check_extra(extra: Sequence[str]) -> None:
    """Refuse the pytest options the run sets itself, each with what to use instead."""
    for arg in extra:
        name = arg.split("=", 1)[0]
        if name in OWN_OPTIONS:
            raise InputError(f"{name} after --: cluster-grade sets it for every shard; use {OWN_OPTIONS[name]}")


def _selects(extra: Sequence[str]) -> bool:
    return any(a.split("=", 1)[0] in SELECTING or (a.startswith("-k") and len(a) > 2) for a in extra)


def _builds_per_shard(source: Path) -> bool:
    return (source / "build.sh").is_file() and not list((source / "dist").glob("cann_bench*.whl"))


def grade_tree(
    tasks: Path,
    source: Path,
    *,
    report_dir: Path,
    address: str | None = None,
    shards: int = 0,
    extra: Sequence[str] = (),
    cpus_per_judge: float = 2.0,
    num_cpus: int | None = None,
    retries: int = 1,
    timeout_s: float | None = None,
    say: Callable[[str], None] | None = None,
    on_start: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[int, Mapping[str, Any]]:
    """Grade ``source`` on ``tasks`` across the cluster; the exit status and the merged board."""

    speak = say or (lambda line: print(f"cannbench cluster-grade: {line}", flush=True))
    check_extra(extra)
    if not source.is_dir():
        raise InputError(f"--source {source}: no such directory")
    if retries < 0 or shards < 0:
        raise InputError("--shards and --shard-retries take a count >= 0")
    tree, source = tasks.resolve(), source.resolve()
    refuse_problems(tree)
    units = units_of(tree)
    report_dir = report_dir.resolve()
    t0 = time.monotonic()
    with connected(address, cpus_per_judge=cpus_per_judge, num_cpus=num_cpus) as cluster:
        speak(f"cluster: {cluster.describe()}")
        for node in cluster.nodes:
            speak(f"  node {node.node_id[:8]} on {node.host}: {node.judges} judges")
        plan = split(units, shards or cluster.judges)
        speak(
            f"grading {source} on {tree}: {len(units)} operators, {sum(u.cases for u in units)} cases in "
            f"{len(plan)} shards (balanced by case count)"
        )
        if _builds_per_shard(source):
            speak(
                f"warning: {source} has build.sh but no prebuilt dist/cann_bench*.whl: every shard builds it "
                f"({len(plan)} builds, and the merge notes {len(plan)} different wheels); build it once and "
                "pass the directory holding dist/ to avoid that"
            )
        runner = Runner(cluster, units, str(tree), str(source), list(extra), timeout_s, retries, speak, on_start)
        records = runner.run(plan)
        wall = time.monotonic() - t0
        board = assemble(report_dir, records, cluster=cluster.to_dict(), wall_s=wall, selecting=_selects(extra))
    for line in _summary(board, report_dir, wall):
        speak(line)
    failed = [r for r in records if not r.complete]
    if failed:
        return SHARD_FAILED, board
    codes = {r.final.rc for r in records if r.final is not None}
    return (5 if codes == {5} else 1 if 1 in codes else 0), board


def _summary(board: Mapping[str, Any], report_dir: Path, wall: float) -> list[str]:
    cluster = board["cluster"]
    attempts = [a for shard in cluster["shards"] for a in shard["attempts"] if a["node_id"]]
    nodes = sorted({f"{a['host']}/{a['node_id'][:8]}" for a in attempts})
    lines = ["merged board:", *(f"  {line}" for line in summary_lines(board))]
    lines.append(
        f"{len(cluster['shards'])} shards ran on {len(nodes)} nodes ({', '.join(nodes) or 'none'}), wall {wall:.1f} s"
    )
    for entry in cluster["missing"]:
        lines.append(
            f"MISSING {entry['rel_path']} ({entry['cases']} of {entry['of']} cases, shard {entry['shard']}): "
            f"{entry['reason']}"
        )
    written = ", ".join(str(report_dir / n) for n in ("leaderboard.json", "results.jsonl", "junit.xml", "report.html"))
    lines.append(f"written: {written} (each shard's files under {report_dir / 'shards'})")
    return lines


def run(args: argparse.Namespace) -> int:
    """The CLI's handler."""
    extra = list(args.pytest_args or [])
    if extra and extra[0] == "--":
        extra = extra[1:]
    code, _ = grade_tree(
        args.tasks,
        args.source,
        report_dir=args.report_dir,
        address=args.address,
        shards=args.shards,
        extra=extra,
        cpus_per_judge=args.cpus_per_judge,
        num_cpus=args.num_cpus,
        retries=args.shard_retries,
        timeout_s=args.shard_timeout,
    )
    return code

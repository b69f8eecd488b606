"""The ``cannbench`` command: the plugin's tools outside a pytest run.

``cannbench merge OUT.json INPUT...`` joins leaderboards and ``results.jsonl`` files (scores recomputed);
``cannbench roofline`` measures the machine's bandwidth and fp32 peak (what live T_HW anchors use);
``cannbench check TREE`` runs the task-quality gate (null candidates on every case). Exit status: 0 on
success, 1 when ``check`` finds weak cases, 2 on a usage or input error (with a message naming the file).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_cannbench import __version__
from pytest_cannbench.report import leaderboard
from pytest_cannbench.report.merge import InputError, merge, warn


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cannbench", description="pytest-cannbench command-line tools.")
    parser.add_argument("--version", action="version", version=f"pytest-cannbench {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    merge_cmd = commands.add_parser(
        "merge", help="merge leaderboards and results.jsonl files into one leaderboard (scores recomputed)",
        description="Merge the leaderboard JSON and results.jsonl files of several runs (e.g. the shards of "
                    "--cann-shard K/N) into one leaderboard. A case present in several inputs is taken from the "
                    "later input. Every score is recomputed from the case outcomes.")
    merge_cmd.add_argument("out", metavar="OUT.json", help="merged leaderboard to write (atomically)")
    merge_cmd.add_argument("inputs", metavar="INPUT", nargs="+", help="leaderboard JSON or results.jsonl files")
    merge_cmd.add_argument("--markdown", metavar="PATH", help="also write the Markdown summary")
    merge_cmd.add_argument("--eval-report", metavar="PATH", help="also write the official EvalReport JSON shape")
    cap = merge_cmd.add_mutually_exclusive_group()
    cap.add_argument("--hap-cap", dest="cap", action="store_true", default=None,
                     help="clip each case's HAP at 1 (default: as the first leaderboard input)")
    cap.add_argument("--no-hap-cap", dest="cap", action="store_false", help="the official, uncapped HAP")
    for name, text in (("roofline", "measure memory bandwidth and fp32 peak; print JSON"),
                       ("check", "the task-quality gate: judge null candidates on every case of a task tree")):
        sub = commands.add_parser(name, help=text, description=text + " (arguments: cannbench " + name + " -h)",
                                  add_help=False)
        sub.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def _merge(args: argparse.Namespace) -> int:
    try:
        board = merge(args.inputs, cap=args.cap)
    except InputError as exc:
        warn(f"error: {exc}")
        return 2
    try:
        leaderboard.write(Path(args.out), board)
        written = [args.out]
        if args.markdown:
            from pytest_cannbench.report.markdown import render

            leaderboard.write_atomic(Path(args.markdown), render(board))
            written.append(args.markdown)
        if args.eval_report:
            from pytest_cannbench.report.eval_report import to_eval_report

            leaderboard.write_atomic(Path(args.eval_report), leaderboard.dumps(to_eval_report(board), indent=1) + "\n")
            written.append(args.eval_report)
    except OSError as exc:
        warn(f"error: cannot write {exc.filename or ''}: {exc.strerror or exc}")
        return 2
    print(f"cannbench merge: {board['cases_total']} cases of {len(board['operators'])} operators from "
          f"{len(args.inputs)} inputs; total score {board['total_score']:.2f}; wrote {', '.join(written)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version (0) or a usage error (2)
        return int(exc.code or 0)
    if args.command == "merge":
        return _merge(args)
    if args.command == "roofline":
        from pytest_cannbench.timing.roofline import main as roofline_main

        return roofline_main(args.rest)
    if args.command == "check":
        from pytest_cannbench.judge.task_quality import main as check_main

        return check_main(args.rest)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

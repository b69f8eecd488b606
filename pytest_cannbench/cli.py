"""The ``cannbench`` command: the plugin's tools outside a pytest run (``docs/cli.md``).

One argparse subcommand per job, each with its own ``--help``: ``show`` and ``report`` read a leaderboard back
(the terminal tables, or any report file regenerated, like the official harness's ``gen_report.sh``),
``compare`` diffs two boards with a CI gate, ``list`` and ``info`` read task trees, ``roofline`` and ``check``
run the calibration and the task-quality gate, ``merge`` joins shards, ``secret`` checks a revealed session secret
against a board's commitment, ``cluster-grade`` grades a tree across a Ray cluster, ``serve`` runs the grading
service. This module only parses and dispatches;
the work is done by the rooms (``report``, ``taskformat``, ``timing``, ``judge``).

Exit status: 0 on success; 1 when ``compare --fail-on-regression`` finds a regression, ``check`` finds weak
cases or ``secret`` a secret the board was not graded under; 2 on a usage or input error (with a message naming
the file).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_cannbench import __version__
from pytest_cannbench.kernelbench.spec import is_problem, problem_of
from pytest_cannbench.options import DEFAULT_KB_TRIALS
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.report import leaderboard
from pytest_cannbench.report.compare import compare, markdown, terminal_lines
from pytest_cannbench.report.eval_report import to_eval_report
from pytest_cannbench.report.markdown import render
from pytest_cannbench.report.merge import InputError, merge, outcomes_from_board, read_input
from pytest_cannbench.report.secret import commitment, commitments_of, read_revealed
from pytest_cannbench.scratch import cache_dir
from pytest_cannbench.taskformat.dirs import looks_like_operator_dir
from pytest_cannbench.taskformat.errors import TaskFormatError
from pytest_cannbench.taskformat.listing import info_lines, list_lines, load, scan
from pytest_cannbench.timing.calibrate import CalibrationError
from pytest_cannbench.timing.roofline import cached_limits
from pytest_cannbench.vocab.registry import DEFAULT_CHECKER, checker_help, checker_names
from pytest_cannbench.workers.limits import usable_cores

Handler = Callable[[argparse.Namespace], int]


def say(command: str, message: str) -> None:
    """A message on stderr, prefixed with the subcommand that says it."""
    print(f"cannbench {command}: {message}", file=sys.stderr)


def _command(commands: Any, name: str, help_text: str, description: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(name, help=help_text, description=description,
                                                          prog=f"cannbench {name}")
    return parser


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cannbench", description="pytest-cannbench command-line tools: read, "
                                     "compare and regenerate leaderboards, inspect task trees, calibrate.")
    parser.add_argument("--version", action="version", version=f"pytest-cannbench {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    show = _command(commands, "show", "print a leaderboard's terminal tables again",
                    "Print the cannbench section of a graded run again from its leaderboard.json (or results.jsonl): "
                    "case counts, failures, timing, per-operator scores, levels and the total.")
    show.add_argument("board", metavar="BOARD", help="leaderboard JSON or results.jsonl")
    show.add_argument("-v", "--verbose", action="store_true", help="list every case and operator (no 30-row cut)")

    compare = _command(commands, "compare", "compare two leaderboards (scores, speed-ups, statuses, a CI gate)",
                       "Compare leaderboard B against A: per operator and per case, score and speed-up deltas, "
                       "status changes and new failures. With confidence intervals in the boards (speedup_ci), a "
                       "speed-up change is significant only when the intervals do not overlap. Partial boards "
                       "(a -k/-m selection, a shard, cases missing from the other board) are warned about.")
    compare.add_argument("a", metavar="A", help="the reference leaderboard (before)")
    compare.add_argument("b", metavar="B", help="the leaderboard to judge (after)")
    compare.add_argument("--markdown", action="store_true", help="print GitHub-flavoured Markdown, not terminal text")
    compare.add_argument("--html", metavar="PATH", help="also write a comparison page: both reports side by side")
    compare.add_argument("--fail-on-regression", metavar="PCT", type=float, default=None,
                         help="exit 1 when any operator's score or the total dropped by more than PCT percent")

    report = _command(commands, "report", "regenerate reports from a leaderboard",
                      "Write the reports of a run again from its leaderboard.json (or results.jsonl, scored "
                      "afresh): the standalone HTML page, the Markdown summary, the official EvalReport JSON.")
    report.add_argument("board", metavar="BOARD", help="leaderboard JSON or results.jsonl")
    report.add_argument("--html", metavar="PATH", help="the standalone HTML report")
    report.add_argument("--markdown", metavar="PATH", help="the Markdown summary")
    report.add_argument("--eval-report", metavar="PATH", help="the official EvalReport JSON shape")

    listing = _command(commands, "list", "list the operators of a task tree",
                       "List the operators of a task tree (or a level, or one operator): level, case count, "
                       "category and dtypes; broken operators say why.")
    listing.add_argument("tree", metavar="TREE", type=Path, help="a task tree, a level directory or an operator")
    listing.add_argument("-k", dest="keyword", default="", help="only operators whose path contains this")

    info = _command(commands, "info", "show one operator: its proto, attributes and case table",
                    "Show an operator directory: schema, inputs and outputs with their dtypes, attributes, "
                    "thresholds, the perf model, and every case (shapes, dtypes, attributes, range, note).")
    info.add_argument("op", metavar="OP", type=Path, help="an operator directory (proto.yaml, cases.yaml, golden.py)")

    roofline = _command(commands, "roofline", "calibrate the roofline (bandwidth, fp32 peak) and print it",
                        "Measure this machine's memory bandwidth and fp32 peak, what live T_HW anchors use, or "
                        "read the cached measurement a graded run would use.")
    roofline.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    roofline.add_argument("--threads", type=int, default=None,
                          help="CPU threads (default: the usable cores, as a run without xdist)")
    roofline.add_argument("--recalibrate", action="store_true", help="measure again even when a cached entry fits")
    roofline.add_argument("--cache-dir", type=Path, default=None,
                          help="where the calibration is cached (default: $CANNBENCH_CACHE_DIR, else "
                               "~/.cache/pytest-cannbench, as in a graded run)")
    roofline.add_argument("--json", action="store_true", help="print the full entry as JSON")

    check = _command(commands, "check", "the task-quality gate: null candidates on every case of a tree",
                     "Judge null candidates (zeros, passthrough, permuted, bfloat16 and ulp noise) on every case; "
                     "exit 1 when a case is weak (a wrong answer passes) or broken.")
    check.add_argument("root", metavar="TREE", help="a task tree, a level directory or one operator directory")
    check.add_argument("-k", dest="keyword", default="", help="only operators whose directory name contains this")
    check.add_argument("--checker", default=DEFAULT_CHECKER, choices=checker_names(), help=checker_help())
    check.add_argument("--threads", type=int, default=0, help="torch intra-op threads (default: torch's)")

    merge_cmd = _command(commands, "merge", "merge leaderboards and results.jsonl files (scores recomputed)",
                         "Merge the leaderboard JSON and results.jsonl files of several runs (e.g. the shards of "
                         "--cann-shard K/N) into one leaderboard. A case present in several inputs is taken from "
                         "the later input. Every score is recomputed from the case outcomes.")
    merge_cmd.add_argument("out", metavar="OUT.json", help="merged leaderboard to write (atomically)")
    merge_cmd.add_argument("inputs", metavar="INPUT", nargs="+", help="leaderboard JSON or results.jsonl files")
    merge_cmd.add_argument("--markdown", metavar="PATH", help="also write the Markdown summary")
    merge_cmd.add_argument("--eval-report", metavar="PATH", help="also write the official EvalReport JSON shape")
    merge_cmd.add_argument("--html", metavar="PATH", help="also write the standalone HTML report")
    cap = merge_cmd.add_mutually_exclusive_group()
    cap.add_argument("--hap-cap", dest="cap", action="store_true", default=None,
                     help="clip each case's HAP at 1 (default: as the first leaderboard input)")
    cap.add_argument("--no-hap-cap", dest="cap", action="store_false", help="the official, uncapped HAP")
    secret = _command(commands, "secret", "check a revealed session secret against a board's commitment",
                      "Check that SECRET_FILE (written by --cann-reveal-secret) holds the session secret BOARD "
                      "was graded under: sha256 of the tag 'pytest-cannbench/session-secret/v1\\0' and the "
                      "secret's 16 bytes must equal config.secret_commitment (or a merged input's). Exit 1 if not.")
    secret.add_argument("board", metavar="BOARD", help="leaderboard JSON or results.jsonl")
    secret.add_argument("secret_file", metavar="SECRET_FILE", help="the file --cann-reveal-secret wrote")
    from pytest_cannbench.cluster.command import add_parser as add_cluster_grade  # no Ray needed to parse

    add_cluster_grade(commands)
    # the subcommand's arguments only: the service's modules stay out of every other subcommand
    from pytest_cannbench.serve.server import add_arguments

    add_arguments(_command(commands, "serve", "a warm grading service: an HTTP JSON API over judges on Ray",
                           "Serve grading over HTTP (docs/serve.md): warm judges on an embedded Ray cluster (or "
                           "--address), one per card or share of the cores; grade, jobs, batch, health, metrics."))
    return parser


def load_board(path: str) -> Mapping[str, Any]:
    """A leaderboard, or a board scored afresh from a results.jsonl (raises :class:`InputError`)."""
    source = read_input(path)
    if source.board is not None:
        return source.board
    if not source.outcomes:
        raise InputError(f"{path}: no case outcomes in it")
    return leaderboard.build(source.outcomes, submission=None, environment={}, config={})


def write_reports(board: Mapping[str, Any], *, html: str | None = None, markdown: str | None = None,
                  eval_report: str | None = None) -> list[str]:
    """The optional report files of one board; the paths written, in order."""
    written = []
    if html:
        from pytest_cannbench.report import page  # brings jinja2

        page.write(Path(html), board)
        written.append(html)
    if markdown:
        leaderboard.write_atomic(Path(markdown), render(board))
        written.append(markdown)
    if eval_report:
        leaderboard.write_atomic(Path(eval_report), leaderboard.dumps(to_eval_report(board), indent=1) + "\n")
        written.append(eval_report)
    return written


def _show(args: argparse.Namespace) -> int:
    from pytest_cannbench.report.collector import ResultCollector  # brings pytest: merge and report run without it

    board = load_board(args.board)
    collector = ResultCollector(board=board)
    for data in outcomes_from_board(board, args.board):
        try:
            collector.outcomes[data["key"]] = CaseOutcome.from_dict(data)
        except ValueError as exc:  # a status or failure type this version does not know
            raise InputError(f"{args.board}: {exc}; show it with the version that wrote it") from None
    generated = board.get("generated_at") or "unknown time"
    print(f"cannbench show: {args.board} (pytest-cannbench {board.get('plugin_version', '?')}, {generated})")
    for line in collector.summary_lines(verbose=args.verbose) or ["no cases"]:
        print(line)
    return 0


def _compare(args: argparse.Namespace) -> int:
    a, b = load_board(args.a), load_board(args.b)
    comparison = compare(a, b, args.a, args.b)
    if args.fail_on_regression is not None and args.fail_on_regression < 0:
        say("compare", "error: --fail-on-regression takes a percentage >= 0")
        return 2
    if args.markdown:
        sys.stdout.write(markdown(comparison, regression_pct=args.fail_on_regression))
    else:
        print("\n".join(terminal_lines(comparison, regression_pct=args.fail_on_regression)))
    if args.html:
        from pytest_cannbench.report.page import render_comparison  # brings jinja2

        leaderboard.write_atomic(Path(args.html), render_comparison(a, b, comparison, args.fail_on_regression))
        print(f"wrote {args.html}", file=sys.stderr)
    if args.fail_on_regression is not None and comparison.regressions(args.fail_on_regression):
        return 1
    return 0


def _report(args: argparse.Namespace) -> int:
    if not (args.html or args.markdown or args.eval_report):
        say("report", "error: name at least one of --html PATH, --markdown PATH, --eval-report PATH")
        return 2
    board = load_board(args.board)
    written = write_reports(board, html=args.html, markdown=args.markdown, eval_report=args.eval_report)
    print(f"cannbench report: {len(board.get('operators') or [])} operators, total score "
          f"{leaderboard.clean(board.get('total_score'))}; wrote {', '.join(written)}")
    return 0


def _list(args: argparse.Namespace) -> int:
    if not args.tree.exists():
        raise InputError(f"{args.tree}: no such directory")
    entries = [e for e in scan(args.tree) if args.keyword in e.rel_path]
    problems = _problems(args.tree, args.keyword)
    if not entries and not problems:
        raise InputError(f"{args.tree}: no operator directory (proto.yaml and cases.yaml) and no KernelBench "
                         "problem below it" + (f" matching -k {args.keyword!r}" if args.keyword else ""))
    if entries:
        print("\n".join(list_lines(entries)))
    if problems:
        print("\n".join(problems))
    return 0


def _problems(tree: Path, keyword: str) -> list[str]:
    """The KernelBench problem files of a tree, one line each, as ``--cann-bench auto`` collects them."""
    files = [tree] if tree.is_file() else sorted(tree.rglob("*.py"))
    found = [problem_of(p) for p in files if is_problem(p, "auto")]
    found = [p for p in found if keyword in p.rel_path]
    if not found:
        return []
    cases = DEFAULT_KB_TRIALS + 1
    return ([f"{'KernelBench problem':<36} {'level':>5} {'cases':>5}"]
            + [f"{p.rel_path:<36} {p.level if p.level is not None else '-':>5} {cases:>5}" for p in found]
            + [f"{len(found)} KernelBench problems, {cases * len(found)} cases ({DEFAULT_KB_TRIALS} trials and a "
               "timed case each, --cann-kb-trials)"])


def _info(args: argparse.Namespace) -> int:
    if not looks_like_operator_dir(args.op):
        raise InputError(f"{args.op}: not an operator directory (it needs proto.yaml and cases.yaml)")
    try:
        task = load(args.op)
    except TaskFormatError as exc:
        raise InputError(f"{args.op}: cannot be graded: {exc}") from None
    print("\n".join(info_lines(task)))
    return 0


def _roofline(args: argparse.Namespace) -> int:
    threads = args.threads if args.threads is not None else usable_cores()
    directory = args.cache_dir if args.cache_dir is not None else cache_dir() / "roofline"
    try:
        limits = cached_limits(directory, args.device, threads, recalibrate=args.recalibrate)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    except CalibrationError as exc:
        say("roofline", f"error: calibration failed: {exc}")
        return 2
    print(json.dumps({**limits.to_json(), "cached": limits.cached}, indent=1) if args.json else limits.describe())
    return 0


def _check(args: argparse.Namespace) -> int:
    from pytest_cannbench.judge.task_quality import main as check_main  # cannbench check only: the judge room

    argv = [args.root, "--checker", args.checker, "--threads", str(args.threads)]
    return check_main(argv + (["-k", args.keyword] if args.keyword else []))


def _merge(args: argparse.Namespace) -> int:
    board = merge(args.inputs, cap=args.cap)
    leaderboard.write(Path(args.out), board)
    written = [args.out, *write_reports(board, html=args.html, markdown=args.markdown,
                                        eval_report=args.eval_report)]
    print(f"cannbench merge: {board['cases_total']} cases of {len(board['operators'])} operators from "
          f"{len(args.inputs)} inputs; total score {board['total_score']:.2f}; wrote {', '.join(written)}")
    return 0


def _secret(args: argparse.Namespace) -> int:
    source = read_input(args.board)
    committed = commitments_of(source.board) if source.board is not None else list(source.commitments)
    if not committed:
        raise InputError(f"{args.board}: records no session secret's commitment (a seeded run, or written before "
                         "commitments)")
    try:
        secret = read_revealed(args.secret_file)
    except (OSError, ValueError) as exc:
        raise InputError(str(exc)) from None
    if commitment(secret) in committed:
        print(f"cannbench secret: {args.secret_file} holds the secret of {args.board} (commitment sha256 "
              f"{commitment(secret)})")
        return 0
    say("secret", f"{args.secret_file} is not the secret of {args.board}: its commitment {commitment(secret)} is "
        f"not among {', '.join(committed)}")
    return 1


def _cluster_grade(args: argparse.Namespace) -> int:
    # cannbench cluster-grade only: the other subcommands never load the cluster's modules
    from pytest_cannbench.cluster.command import run

    return run(args)


def _serve(args: argparse.Namespace) -> int:
    missing = [m for m in ("fastapi", "uvicorn", "ray", "prometheus_client") if importlib.util.find_spec(m) is None]
    if missing:
        raise InputError(f"the service needs {', '.join(missing)}: pip install 'pytest-cannbench[serve]'")
    # once the serve extra is known to be installed (its modules import it when the service starts)
    from pytest_cannbench.serve.server import run

    return run(args)


HANDLERS: dict[str, Handler] = {"show": _show, "compare": _compare, "report": _report, "list": _list,
                                "info": _info, "roofline": _roofline, "check": _check, "merge": _merge,
                                "secret": _secret, "cluster-grade": _cluster_grade, "serve": _serve}


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version (0) or a usage error (2)
        return int(exc.code or 0)
    handler = HANDLERS.get(args.command or "")
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return handler(args)
    except InputError as exc:
        say(args.command, f"error: {exc}")
        return 2
    except OSError as exc:
        say(args.command, f"error: cannot write {exc.filename or ''}: {exc.strerror or exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())

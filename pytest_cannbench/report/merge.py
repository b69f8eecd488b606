"""``cannbench merge OUT.json INPUT...`` (:mod:`pytest_cannbench.cli`): one leaderboard from the boards and
``results.jsonl`` files of several runs.

Sharded CI jobs (``--cann-shard K/N``) each write a partial leaderboard; a resumed or killed run leaves its cases
in ``results.jsonl``. Merging takes the case outcomes back out of every input, keeps one per case key (the later
input wins, and each replacement is reported), and rebuilds the board with :func:`leaderboard.build`, so every
score is recomputed by :mod:`scoring` from the outcomes and never copied from an input. ``submission``,
``environment`` and the configuration come from the first leaderboard input; inputs that disagree on the wheel or
on an option that changes results are reported, because their cases were not graded alike. Each job grades under
its own session secret: inputs are compared by its commitment, never by the secret (a board before commitments
that still holds one has it replaced by its commitment), and ``merged_from`` names each input's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeGuard, cast, get_type_hints

from pytest_cannbench.options.table import compared_fields
from pytest_cannbench.report import leaderboard
from pytest_cannbench.report.board import Board
from pytest_cannbench.report.secret import commitment
from pytest_cannbench.vocab.casekey import candidate_of
from pytest_cannbench.vocab.records import CaseRecord, TimingRecord

SCHEMA_PREFIX = "pytest-cannbench/leaderboard/"
# Config entries the jobs of one run must share (settings declared neither per job nor unrecorded): every one that
# changes a result, and the per-session rest (timeouts, the HAP cap, the hidden gate). Paths, shard, resume
# bookkeeping, the machine's memory and each job's secret legitimately differ.
COMPARED_CONFIG = compared_fields()
# Timing fields that are numbers (vocab.records.TimingRecord's); a board written by leaderboard.dumps spells NaN and
# infinities as strings.
TIMING_NUMBERS = tuple(name for name, kind in get_type_hints(TimingRecord).items() if kind == float | None)
NON_FINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
LISTED = 20  # replacements named one by one on stderr before a count
BAD_LINES_LISTED = 5


class InputError(Exception):
    """An input that cannot be merged; the CLI reports it and exits 2."""


@dataclass
class Source:
    """One input file, read: its outcomes in file order, and the leaderboard around them when it is one."""

    path: str
    kind: str  # "leaderboard" or "results.jsonl"
    outcomes: list[CaseRecord] = field(default_factory=list)
    board: dict[str, Any] | None = None
    runs: dict[str, int] = field(default_factory=dict)  # results.jsonl: run identity -> lines
    commitments: dict[str, int] = field(default_factory=dict)  # session secrets' commitments -> cases
    skipped_lines: int = 0
    repeated: int = 0  # results.jsonl: cases recorded more than once (the last line wins)


def _restore_numbers(timing: Any) -> TimingRecord:
    """The timing record with "nan"/"inf" strings turned back into floats, so scoring sees what the run saw."""
    if not isinstance(timing, dict):
        return TimingRecord()
    out: dict[str, Any] = dict(timing)
    for name in TIMING_NUMBERS:
        if isinstance(out.get(name), str) and out[name] in NON_FINITE:
            out[name] = NON_FINITE[out[name]]
    for summary in ("cand", "baseline"):
        if isinstance(out.get(summary), dict):
            out[summary] = {k: NON_FINITE.get(v, v) if isinstance(v, str) else v for k, v in out[summary].items()}
    return cast(TimingRecord, out)  # a file's record, read as the run wrote it


def _valid_outcome(data: Any) -> TypeGuard[CaseRecord]:
    return (isinstance(data, dict) and isinstance(data.get("key"), str) and bool(data["key"])
            and isinstance(data.get("status"), str) and bool(data["status"]))


def outcomes_from_board(board: Mapping[str, Any], path: str = "<board>") -> list[CaseRecord]:
    """The case outcomes a leaderboard was built from (as ``CaseOutcome.to_dict`` has them, less what the board
    drops: per-phase seconds, the golden-cache flag and the timing lock windows, none of which scoring reads)."""
    operators = board.get("operators")
    if not isinstance(operators, list):
        raise InputError(f"{path}: a leaderboard without an 'operators' list")
    outcomes: list[CaseRecord] = []
    for index, op in enumerate(operators):
        if not isinstance(op, dict) or not isinstance(op.get("rel_path"), str) or not isinstance(op.get("cases"), list):
            raise InputError(f"{path}: operator #{index} has no rel_path or no cases list")
        for case in op["cases"]:
            if not _valid_outcome(case):
                raise InputError(f"{path}: {op['rel_path']}: a case without a key or status: {str(case)[:200]}")
            outcomes.append(CaseRecord(
                key=case["key"], rel_path=op["rel_path"], operator=op.get("name") or "",
                case_id=case.get("case_id"), status=case["status"], failure_type=case.get("failure_type"),
                message=case.get("message") or "", accuracy=case.get("accuracy") or [],
                warnings=case.get("warnings") or [], timing=_restore_numbers(case.get("timing")),
                candidate=candidate_of(case["key"]),  # a multi-candidate run's keys name it
                kernel_coverage=case.get("kernel_coverage") or {},
            ))
    return outcomes


def _read_board(path: str, data: dict[str, Any]) -> Source:
    schema = data.get("schema")
    if schema is None and "framework_version" in data:
        raise InputError(f"{path}: an official EvalReport, not a pytest-cannbench leaderboard (it lacks the times "
                         "scores are recomputed from); merge the leaderboard.json or results.jsonl of that run")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX):
        raise InputError(f"{path}: neither a results.jsonl nor a pytest-cannbench leaderboard (schema {schema!r}, "
                         f"expected {leaderboard.SCHEMA!r})")
    if schema != leaderboard.SCHEMA:
        warn(f"{path}: leaderboard schema {schema!r}, this version writes {leaderboard.SCHEMA!r}; reading it anyway")
    source = Source(path, "leaderboard", outcomes_from_board(data, path), board=data)
    config = data.get("config")
    if isinstance(config, dict) and isinstance(config.get("secret"), str):  # written before commitments
        legacy = config.pop("secret")
        try:
            config.setdefault("secret_commitment", commitment(legacy))
        except ValueError:
            pass
    committed = str(config.get("secret_commitment") or "") if isinstance(config, dict) else ""
    if committed:
        source.commitments[committed] = len(source.outcomes)
    return source


def _read_jsonl(path: str, text: str) -> Source:
    source = Source(path, "results.jsonl")
    latest: dict[str, CaseRecord] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            entry = None
        outcome = entry.get("outcome") if isinstance(entry, dict) else None
        if not _valid_outcome(outcome) or not isinstance(entry.get("run", ""), str):
            source.skipped_lines += 1
            if source.skipped_lines <= BAD_LINES_LISTED:
                what = "not JSON (cut short by a killed run?)" if entry is None else "not a {run, outcome} line"
                warn(f"{path}:{number}: {what}; ignored")
            continue
        run = entry.get("run") or "?"
        source.runs[run] = source.runs.get(run, 0) + 1
        committed = entry.get("secret_commitment")
        if isinstance(committed, str) and committed:
            source.commitments[committed] = source.commitments.get(committed, 0) + 1
        if outcome["key"] in latest:
            source.repeated += 1
            del latest[outcome["key"]]  # re-inserted below: file order follows the last line
        latest[outcome["key"]] = {**outcome, "timing": _restore_numbers(outcome.get("timing"))}
    source.outcomes = list(latest.values())
    if source.skipped_lines > BAD_LINES_LISTED:
        warn(f"{path}: {source.skipped_lines} lines ignored in all")
    if source.skipped_lines and not source.outcomes:
        raise InputError(f"{path}: neither a leaderboard nor a results.jsonl with any case outcome")
    return source


def read_input(path: str) -> Source:
    """A leaderboard JSON file or a results.jsonl file, told apart by content, not by name."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read it ({exc})") from None
    if not text.strip():
        warn(f"{path}: empty; no cases from it")
        return Source(path, "results.jsonl")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None  # several lines of JSON: results.jsonl
    if isinstance(data, dict) and "outcome" not in data:
        return _read_board(path, data)
    if data is not None and not isinstance(data, dict):
        raise InputError(f"{path}: JSON, but neither a leaderboard nor a results.jsonl line")
    return _read_jsonl(path, text)


def warn(message: str, stream: TextIO | None = None) -> None:
    print(f"cannbench merge: {message}", file=stream or sys.stderr)


def _comparable(config: Any) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k in COMPARED_CONFIG} if isinstance(config, dict) else {}


def _check_agreement(sources: list[Source]) -> None:
    """Warn when the inputs were not graded alike (a different wheel, options or run identity)."""
    warned = False
    boards = [s for s in sources if s.board is not None]
    if boards:
        first = boards[0]
        wheel = ((first.board or {}).get("submission") or {}).get("wheel_sha256")
        config = _comparable((first.board or {}).get("config"))
        for other in boards[1:]:
            other_wheel = ((other.board or {}).get("submission") or {}).get("wheel_sha256")
            if other_wheel != wheel:
                warned = True
                warn(f"warning: {other.path} graded a different wheel (sha256 {str(other_wheel)[:12]}) than "
                      f"{first.path} ({str(wheel)[:12]}); a rebuild of the same source differs too, so build the "
                      "wheel once and grade that (docs/ci.md)")
            other_config = _comparable((other.board or {}).get("config"))
            differing = sorted(k for k in set(config) | set(other_config) if config.get(k) != other_config.get(k))
            if differing:
                warned = True
                warn(f"warning: {other.path} ran with other options than {first.path}: "
                      + ", ".join(f"{k}={other_config.get(k)!r} (not {config.get(k)!r})" for k in differing))
        caps = {bool(((s.board or {}).get("weights") or {}).get("hap_cap")) for s in boards}
        if len(caps) > 1:
            warn(f"warning: inputs disagree on the HAP cap; merging as {first.path} did")
    runs: dict[str, int] = {}
    for s in sources:
        for run, n in s.runs.items():
            runs[run] = runs.get(run, 0) + n
        if s.board is not None and ((s.board.get("config") or {}).get("run_identity")):
            run = str(s.board["config"]["run_identity"])
            runs[run] = runs.get(run, 0) + len(s.outcomes)
    if len(runs) > 1 and not warned:  # the identity hashes the wheel and the options: said above already
        warn("warning: the inputs come from different runs (submission or options differ): "
              + ", ".join(f"{run} ({n} cases)" for run, n in sorted(runs.items())))
    secrets = {c for s in sources for c in s.commitments}
    if len(secrets) > 1:  # normal for shards (each job draws its own); said so that nobody expects one
        warn(f"note: the inputs were graded under {len(secrets)} session secrets (each job draws its own); "
             "merged_from names each input's commitment")


def partial_reasons(board: Mapping[str, Any], *, shard: bool = True) -> list[str]:
    """Why a board is not the whole tree's grade, from its ``config.selection``: ``-k``/``-m``,
    deselected or interrupted cases, and (unless ``shard`` is false, as when merging shards) ``--cann-shard``.
    Empty for a complete board and for boards written before selections were recorded. For merge and compare."""
    selection = (board.get("config") or {}).get("selection")
    if not isinstance(selection, dict):
        return []
    reasons = []
    if selection.get("keyword"):
        reasons.append(f"-k {selection['keyword']!r}")
    if selection.get("markexpr"):
        reasons.append(f"-m {selection['markexpr']!r}")
    if selection.get("deselected"):
        reasons.append(f"{selection['deselected']} cases deselected")
    if selection.get("interrupted"):
        reasons.append(f"{selection['interrupted']} cases interrupted before a verdict")
    if shard and selection.get("shard"):
        reasons.append(f"shard {selection['shard']}")
    return reasons


def merge(paths: Sequence[str], *, cap: bool | None = None) -> Board:
    """Read every input and build one board from their outcomes (later inputs win on a shared case key)."""
    sources = [read_input(p) for p in paths]
    for s in sources:
        if s.repeated:
            warn(f"{s.path}: {s.repeated} cases recorded more than once; the last line of each wins")
    _check_agreement(sources)
    partial = False
    for s in sources:
        reasons = partial_reasons(s.board or {}, shard=False)  # shards are what merge completes
        if reasons:
            partial = True
            warn(f"warning: {s.path} is a partial board ({', '.join(reasons)}): the merged board grades only "
                 "what it selected")
    merged: dict[str, CaseRecord] = {}
    origin: dict[str, str] = {}
    replaced = []
    for s in sources:
        for outcome in s.outcomes:
            key = outcome["key"]
            if key in merged:
                replaced.append(f"{key}: {s.path} replaces {origin[key]}")
                del merged[key]
            merged[key] = outcome
            origin[key] = s.path
    for line in replaced[:LISTED]:
        warn(f"duplicate case {line}")
    if len(replaced) > LISTED:
        warn(f"... and {len(replaced) - LISTED} more duplicate cases (the later input wins each)")
    if not merged:
        raise InputError("no case outcomes in " + ", ".join(paths))
    first = next((s.board for s in sources if s.board is not None), None) or {}
    config = dict(first.get("config") or {})
    secrets = list(dict.fromkeys(c for s in sources for c in s.commitments))
    if secrets:
        config["secret_commitment"] = secrets[0] if len(secrets) == 1 else ""  # several: merged_from names each
    if "shard" in config:
        config["shard"] = None  # the merged board covers every shard it was given
    if any("selection" in ((src.board or {}).get("config") or {}) for src in sources):
        config["selection"] = {"merged": len(sources), "partial": partial}
    if cap is None:
        cap = bool((first.get("weights") or {}).get("hap_cap", config.get("hap_cap", False)))
    board = leaderboard.build(merged.values(), submission=first.get("submission"),
                              environment=dict(first.get("environment") or {}), config=config, cap=cap)
    board["merged_from"] = [{"path": s.path, "kind": s.kind, "cases": len(s.outcomes),
                             "secret_commitments": list(s.commitments)}
                            for s in sources]
    return board

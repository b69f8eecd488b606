"""The shards' report directories made into the files one local run writes: ``leaderboard.json``,
``results.jsonl``, ``junit.xml`` and ``report.html`` in the user's report directory.

Each shard's directory, as it came back through the object store, is kept under ``shards/<k>/`` (its board,
journal, junit, page, logs and ``pytest.log``). The boards are joined by :func:`report.merge.merge`, so every
score is recomputed from the case outcomes exactly as ``cannbench merge`` does. Fail closed: every case the plan
expected (read from the operators' ``cases.yaml``) that no shard brought back a verdict for is put on the board as
``interrupted`` (failure type ``session_interrupted``, the harness's, scoring 0), with a message naming its
shard and why, and ``cluster.missing`` lists those operators: the board never silently covers less than the tree.
A failed shard's partial journal still counts: its finished cases keep their verdicts.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_cannbench import outcome as oc
from pytest_cannbench.atomic import write_atomic, write_bytes_atomic
from pytest_cannbench.cluster.grade import ShardRecord
from pytest_cannbench.cluster.junit import merge_junit
from pytest_cannbench.cluster.plan import Unit
from pytest_cannbench.cluster.shard import JUNIT, PYTEST_LOG
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.report import leaderboard
from pytest_cannbench.report.board import Board
from pytest_cannbench.report.merge import InputError, merge, outcomes_from_board, read_input
from pytest_cannbench.vocab.records import CaseRecord

SHARDS = "shards"
SYNTHESIZED_RUN = "cluster-grade"


def _write_shard(directory: Path, record: ShardRecord) -> None:
    directory.mkdir(parents=True)
    final = record.final
    for rel, data in (final.files if final is not None else {}).items():
        target = (directory / rel).resolve()
        if directory.resolve() not in target.parents:  # written by our own session, but never outside its folder
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    if final is not None and final.log_tail and not (directory / PYTEST_LOG).is_file():
        (directory / PYTEST_LOG).write_text(final.log_tail + "\n")


def _shard_outcomes(directory: Path) -> tuple[Path | None, dict[str, str], dict[str, Any] | None]:
    """The file to merge from a shard's directory (its board, else its journal), its cases' statuses, its board."""
    for name in ("leaderboard.json", "results.jsonl"):
        path = directory / name
        if not path.is_file() or not path.stat().st_size:
            continue
        try:
            source = read_input(str(path))
        except InputError:
            continue  # a board cut short: the journal beside it, else nothing
        if source.outcomes:
            return path, {o["key"]: o["status"] for o in source.outcomes}, source.board
    return None, {}, None


def _case_id(key: str, rel_path: str) -> int | None:
    tail = key[len(rel_path) + 1 :] if key.startswith(rel_path + "_") else ""
    return int(tail) if tail.isdigit() else None


def _lost(record: ShardRecord, unit: Unit, keys: list[str], why: str) -> list[CaseRecord]:
    label, index = record.shard.label, record.shard.index
    message = f"no verdict: shard {label} ({why}); its log is {SHARDS}/{index}/{PYTEST_LOG} in the report directory"
    return [
        oc.CaseOutcome(
            key=k,
            rel_path=unit.rel_path,
            operator="",
            case_id=_case_id(k, unit.rel_path),
            status=oc.INTERRUPTED,
            failure_type=oc.SESSION_INTERRUPTED,
            message=message,
        ).to_dict()
        for k in keys
    ]


def assemble(
    report_dir: Path, records: list[ShardRecord], *, cluster: dict[str, Any], wall_s: float, selecting: bool
) -> Board:
    """Write the run's files into ``report_dir`` and return the merged board (with its ``cluster`` section).

    ``selecting``: the user's pytest options select cases (``-k``, ``-m``, ...), so a graded shard's board may
    rightly hold fewer cases than its operators list; only a failed shard's cases are then put on as lost."""
    shards_dir = report_dir / SHARDS
    shutil.rmtree(shards_dir, ignore_errors=True)  # an earlier run's shards (it may have had more) are not this run's
    inputs: list[str] = []
    journal: list[str] = []
    junit_files: list[Path] = []
    lost: list[CaseRecord] = []
    missing: list[dict[str, Any]] = []
    run = ""
    for record in records:
        directory = shards_dir / str(record.shard.index)
        _write_shard(directory, record)
        path, got, shard_board = _shard_outcomes(directory)
        if path is not None:
            inputs.append(str(path))
            run = run or str(((shard_board or {}).get("config") or {}).get("run_identity") or "")
        if (directory / "results.jsonl").is_file():
            journal += (directory / "results.jsonl").read_text(encoding="utf-8").splitlines()
        junit_files.append(directory / JUNIT)
        if record.complete and selecting:
            continue
        why = record.reason if not record.complete else "its board holds no verdict for these cases"
        for unit in record.shard.units:
            absent = [k for k in unit.keys if k not in got]
            # a failed session's own board may hold its unfinished cases already, as interrupted
            unfinished = [] if record.complete else [k for k in unit.keys if got.get(k) == oc.INTERRUPTED]
            if not absent and not unfinished:
                continue
            lost += _lost(record, unit, absent, why)
            missing.append(
                {
                    "rel_path": unit.rel_path,
                    "shard": record.shard.label,
                    "cases": len(absent) + len(unfinished),
                    "of": unit.cases,
                    "reason": why,
                }
            )
    lines = [leaderboard.dumps({"run": run or SYNTHESIZED_RUN, "outcome": o}) for o in lost]
    if lines:
        synthesized = shards_dir / "lost.jsonl"
        write_atomic(synthesized, "\n".join(lines) + "\n")
        inputs.append(str(synthesized))
    if not inputs:
        raise InputError("no shard brought back a case and the plan expected none: nothing to put on a board")
    board = merge(inputs)
    config = board.setdefault("config", {})
    selection = dict(config.get("selection") or {"merged": len(inputs), "partial": False})
    if lost:
        selection.update(interrupted=len(lost), partial=True)
    config["selection"] = selection
    board["cluster"] = {
        **cluster,
        "wall_s": round(wall_s, 3),
        "shards": [r.to_dict() for r in records],
        "missing": missing,
    }
    board_path = report_dir / "leaderboard.json"
    leaderboard.write(board_path, board)
    write_bytes_atomic(report_dir / "results.jsonl", "".join(f"{line}\n" for line in journal + lines).encode())
    merge_junit(junit_files, lost, board, report_dir / JUNIT, wall_s)
    # brings jinja2: the merged board's page only
    from pytest_cannbench.report.page import write_beside

    write_beside(board_path, board)
    return board


def summary_lines(board: Mapping[str, Any]) -> list[str]:
    """The terminal's cannbench section for the merged board (as ``cannbench show`` prints it)."""
    # brings pytest: the terminal summary only (the merge itself runs without pytest)
    from pytest_cannbench.report.collector import ResultCollector

    collector = ResultCollector(board=board)
    for data in outcomes_from_board(board):
        collector.outcomes[data["key"]] = CaseOutcome.from_dict(data)
    return collector.summary_lines() or ["no cases"]

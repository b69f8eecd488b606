"""The leaderboard's JSON Schema: generated from the board's types, shipped current, rendered current in
docs/leaderboard.md, and met by real boards (this module's inner session, every board ``inner.run_inner``'s sessions
write, and a merged board), while a board with an undeclared key or a word outside the vocabulary fails it."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import jsonschema
import pytest
from inner import board_errors, run_inner

from pytest_cannbench.report import board_schema, leaderboard
from pytest_cannbench.report.merge import merge

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import board_schema as script  # noqa: E402  (scripts/board_schema.py)


def test_the_shipped_schema_is_the_one_the_types_give() -> None:
    shipped = ROOT / "pytest_cannbench" / "report" / board_schema.SCHEMA_FILE
    assert shipped.read_text() == board_schema.dumps(), \
        "the shipped leaderboard schema is stale: run `python scripts/board_schema.py --write`"
    assert board_schema.shipped() == board_schema.schema()  # and the installed package finds it


def test_the_docs_tables_are_the_ones_the_schema_gives() -> None:
    assert script.in_doc((ROOT / "docs" / "leaderboard.md").read_text()) == board_schema.tables(), \
        "docs/leaderboard.md's schema tables are stale: run `python scripts/board_schema.py --write`"


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(board_schema.schema())


@pytest.fixture
def real_board(pytester: pytest.Pytester, capsys: pytest.CaptureFixture, task_tree) -> dict:  # type: ignore[no-untyped-def]
    tasks = task_tree("basic")
    run = run_inner(pytester, capsys, tasks, "--cann-tasks=tasks", "--cann-self-check", "-p", "no:cacheprovider",
                    "--cann-golden-cache=off", "--cann-repeat=2", "--cann-warmup=0")
    assert run.ret == 0, run.text[-3000:]
    found: dict = json.loads((pytester.path / "reports" / "leaderboard.json").read_text())
    return found


def test_a_real_timed_board_meets_the_schema_and_drift_breaks_it(real_board: dict, tmp_path: Path) -> None:
    case = real_board["operators"][0]["cases"][0]
    assert case["timing"]["measured"] and case["t_cand_us"] > 0  # a timed case: the timing record is checked too
    assert board_errors(real_board) == []

    drifted = copy.deepcopy(real_board)
    drifted["operators"][0]["cases"][0]["t_cand_p90_us"] = 1.0  # a field produced but never declared
    drifted["operators"][0]["cases"][0]["timing"]["t_cand_p90_us"] = 1.0
    drifted["operators"][0]["cases"][0]["status"] = "exploded"  # a word outside the vocabulary
    del drifted["weights"]["hap_cap"]
    errors = "\n".join(board_errors(drifted))
    assert "operators/0/cases/0: " in errors and "'t_cand_p90_us' was unexpected" in errors
    assert "operators/0/cases/0/timing: " in errors
    assert "operators/0/cases/0/status: exploded: 'exploded' is not one of ['passed'" in errors
    assert "weights: " in errors and "'hap_cap' is a required property" in errors

    infinite = copy.deepcopy(real_board)
    infinite["operators"][0]["cases"][0]["t_hw_us"] = "inf"  # the files' spelling of a non-finite number
    assert board_errors(infinite) == []
    infinite["operators"][0]["cases"][0]["t_hw_us"] = "fast"
    assert board_errors(infinite)

    # a board merged from it (cannbench merge) is a board too
    first = tmp_path / "a.json"
    first.write_text(json.dumps(real_board))
    assert board_errors(json.loads(leaderboard.dumps(merge([str(first), str(first)])))) == []

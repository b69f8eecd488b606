"""The JSON Schema of ``leaderboard.json`` and its tables in ``docs/leaderboard.md``, generated from the board's
types (``pytest_cannbench.report.board``; tests/unit/test_board_schema.py checks that both are current).

    python scripts/board_schema.py            # print the schema
    python scripts/board_schema.py --write    # write pytest_cannbench/report/leaderboard.schema.json and the
                                              # tables in docs/leaderboard.md, between the schema markers
"""

from __future__ import annotations

import sys
from pathlib import Path

from pytest_cannbench.report import board_schema

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "pytest_cannbench" / "report" / board_schema.SCHEMA_FILE
DOC = ROOT / "docs" / "leaderboard.md"
BEGIN, END = "<!-- schema:begin (scripts/board_schema.py --write) -->", "<!-- schema:end -->"


def in_doc(text: str) -> str | None:
    """The tables as the page has them, None without the markers."""
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def main(argv: list[str]) -> int:
    if "--write" not in argv:
        print(board_schema.dumps(), end="")
        return 0
    text = DOC.read_text()
    if in_doc(text) is None:
        print(f"{DOC}: no {BEGIN} ... {END} markers", file=sys.stderr)
        return 1
    SHIPPED.write_text(board_schema.dumps())
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(f"{head}{BEGIN}\n{board_schema.tables()}\n{END}{rest.split(END, 1)[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The README's options table, generated from ``pytest_cannbench.options`` (tests/unit/test_first_minute.py checks
that the README holds exactly this table).

    python scripts/options_table.py            # print the table
    python scripts/options_table.py --write    # replace it in README.md, between the options markers
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_cannbench.options import add_options

README = Path(__file__).resolve().parent.parent / "README.md"
BEGIN, END = "<!-- options:begin (scripts/options_table.py --write) -->", "<!-- options:end -->"


def _cell(text: str) -> str:
    return " ".join(text.replace("%%", "%").replace("|", "\\|").split())


def table() -> str:
    parser = pytest.Parser(_ispytest=True)
    add_options(parser)
    rows = ["| option | ini key | meaning |", "|---|---|---|"]
    for option in parser.getgroup("cannbench").options:
        attrs = option.attrs()
        name = option.names()[0]
        if attrs.get("choices"):
            name += " " + "\\|".join(attrs["choices"])
        elif attrs.get("metavar"):
            name += f" {attrs['metavar']}"
        ini = "cann_" + option.names()[0][len("--cann-"):].replace("-", "_")
        rows.append(f"| `{name}` | `{ini}` | {_cell(attrs.get('help', ''))} |")
    return "\n".join(rows)


def in_readme(text: str) -> str | None:
    """The table as the README has it, None without the markers."""
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def main(argv: list[str]) -> int:
    if "--write" not in argv:
        print(table())
        return 0
    text = README.read_text()
    if in_readme(text) is None:
        print(f"{README}: no {BEGIN} ... {END} markers", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    README.write_text(f"{head}{BEGIN}\n{table()}\n{END}{rest.split(END, 1)[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

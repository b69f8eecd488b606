"""The README's options tables, generated from the declarations of ``pytest_cannbench.options`` (the fields of
``Settings``); tests/unit/test_first_minute.py checks that the README holds exactly these tables.

    python scripts/options_table.py            # print the tables
    python scripts/options_table.py --write    # replace them in README.md, between the options markers, and
                                               # write the registration plugin.py reads (options/pytest_options.json)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pytest_cannbench.options.aliases import MOVED
from pytest_cannbench.options.declare import Option
from pytest_cannbench.options.parse import registration
from pytest_cannbench.options.table import changes_results, command_line, ini_only
from pytest_cannbench.plugin import DECLARED

README = Path(__file__).resolve().parent.parent / "README.md"
BEGIN, END = "<!-- options:begin (scripts/options_table.py --write) -->", "<!-- options:end -->"


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _spelled(option: Option, name: str) -> str:
    return f"`{name}`" if option.flag else f"`{name} {_cell(option.metavar or 'VALUE')}`"


def _results(name: str) -> str:
    return "yes" if changes_results(name) else ""


def table() -> str:
    rows = ["Command line (each also an ini key where one is named):", "",
            "| option | ini key | changes results | meaning |", "|---|---|---|---|"]
    for name, option in command_line().items():
        ini = f"`{option.ini_key}`" if option.ini else "-"
        rows.append(f"| {_spelled(option, option.flag_name)} | {ini} | {_results(name)} | {_cell(option.help)} |")
    rows += ["", "Ini-only (in the ini file, or `-o cann_<name>=VALUE` on the command line):", "",
             "| ini key | changes results | meaning |", "|---|---|---|"]
    for name, option in ini_only().items():
        rows.append(f"| {_spelled(option, option.ini_key)} | {_results(name)} | {_cell(option.help)} |")
    rows += ["", "Spellings of the previous release, still accepted in this one with a deprecation warning:", "",
             "| previous spelling | write instead |", "|---|---|"]
    for option in ini_only().values():
        if option.was_cli:
            rows.append(f"| `{option.flag_name}` | `-o {option.ini_key}=...` (or the ini key) |")
    for option in command_line().values():
        if option.was_ini:
            rows.append(f"| `{option.ini_key}` (ini key) | `{option.flag_name}` |")
    for moved in MOVED:
        rows.append(f"| `{moved.flag_name}`, `{moved.ini_key}` | `{_cell(moved.now)}` |")
    return "\n".join(rows)


def in_readme(text: str) -> str | None:
    """The tables as the README has them, None without the markers."""
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
    DECLARED.write_text(registration_json())
    return 0


def registration_json() -> str:
    """What plugin.py registers with pytest, as it ships (``pytest_cannbench/options/pytest_options.json``)."""
    return json.dumps(registration(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

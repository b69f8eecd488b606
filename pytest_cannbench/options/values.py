"""Parsers of single values: each turns one :class:`~.declare.Given` into a field's value (or, for an option that
carries several fields, a dict of them), and refuses a bad value with a message that quotes the option as the
user spelled it, the value given and what is expected instead."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_cannbench.options.declare import Context, Given, OptionError, Parse
from pytest_cannbench.vocab.registry import POOL_MODES

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")
OFF_WORDS = ("off", "none", "no", "0")


def refuse(given: Given, expected: str) -> OptionError:
    return OptionError(f"{given.shown}: {expected}")


def text() -> Parse:
    def parse(given: Given, ctx: Context) -> Any:
        return given.default if given.value in (None, "") else str(given.value)
    return parse


def flag(*, invert: bool = False) -> Parse:
    """``--cann-x`` (no value) or ``cann_x = true|false``; ``invert``: the field is the negation (``no-perf``)."""
    def parse(given: Given, ctx: Context) -> bool:
        if given.value is None:
            return bool(given.default)
        if isinstance(given.value, bool):
            on = given.value
        elif str(given.value).strip().lower() in TRUE_WORDS:
            on = True
        elif str(given.value).strip().lower() in FALSE_WORDS:
            on = False
        else:
            raise refuse(given, f"expected true or false ({', '.join(TRUE_WORDS)} / {', '.join(FALSE_WORDS[:-1])})")
        return not on if invert else on
    return parse


def choice(values: Sequence[str]) -> Parse:
    def parse(given: Given, ctx: Context) -> str:
        if given.value in (None, ""):
            return str(given.default)
        if str(given.value) not in values:
            raise refuse(given, f"expected one of {', '.join(values)}")
        return str(given.value)
    return parse


def integer(*, at_least: int) -> Parse:
    def parse(given: Given, ctx: Context) -> Any:
        if given.value in (None, ""):
            return given.default
        try:
            number = int(str(given.value).strip())
        except ValueError:
            number = None
        if number is None or number < at_least:
            raise refuse(given, f"expected a whole number >= {at_least}")
        return number
    return parse


def real(*, above: float | None = None, at_least: float | None = None, below: float | None = None,
         unit: str = "", why: str = "") -> Parse:
    """A number within bounds (``above``: exclusive, ``at_least``: inclusive, ``below``: exclusive)."""
    bounds = [f"> {above:g}" if above is not None else "", f">= {at_least:g}" if at_least is not None else "",
              f"< {below:g}" if below is not None else ""]
    wanted = f"expected a number {' and '.join(b for b in bounds if b)}{' ' + unit if unit else ''}{why}"

    def parse(given: Given, ctx: Context) -> Any:
        if given.value in (None, ""):
            return given.default
        try:
            number = float(str(given.value).strip())
        except ValueError:
            raise refuse(given, wanted) from None
        if not (number == number and (above is None or number > above) and (at_least is None or number >= at_least)
                and (below is None or number < below)):
            raise refuse(given, wanted)
        return number
    return parse


def percent(*, above: float) -> Parse:
    """A percentage given as PCT, kept as a fraction."""
    inner = real(above=above, unit="(percent)")

    def parse(given: Given, ctx: Context) -> float:
        return float(inner(given, ctx)) / 100 if given.value not in (None, "") else float(given.default)
    return parse


def directory(*, fix: str = "") -> Parse:
    """An existing directory, made absolute."""
    def parse(given: Given, ctx: Context) -> Any:
        if given.value in (None, ""):
            return given.default
        path = os.path.abspath(str(given.value))
        if not os.path.isdir(path):
            raise refuse(given, f"{path} is not a directory{fix}")
        return path
    return parse


def output_file() -> Parse:
    """A file to write later, made absolute; its directory is created when it is written."""
    def parse(given: Given, ctx: Context) -> Any:
        return given.default if given.value in (None, "") else os.path.abspath(str(given.value))
    return parse


def tasks() -> Parse:
    def parse(given: Given, ctx: Context) -> Any:
        if given.value in (None, ""):
            return given.default
        if not Path(str(given.value)).exists():
            raise refuse(given, f"{os.path.abspath(str(given.value))}: no such directory; pass a bench root (such "
                                "as tasks/), a level directory or one operator directory")
        return str(given.value)
    return parse


def report_dir() -> Parse:
    def parse(given: Given, ctx: Context) -> str:
        if given.value in (None, ""):
            return str(ctx.rootpath / str(given.default))
        return os.path.abspath(str(given.value))
    return parse


def leaderboard() -> Parse:
    """Default ``<report dir>/leaderboard.json`` (the report directory is parsed before it)."""
    def parse(given: Given, ctx: Context) -> str:
        if given.value in (None, ""):
            return os.path.join(str(ctx.parsed["report_dir"]), "leaderboard.json")
        return os.path.abspath(str(given.value))
    return parse


def golden_cache() -> Parse:
    def parse(given: Given, ctx: Context) -> str | None:
        if given.value is None:
            return str(ctx.rootpath / str(given.default))
        if str(given.value).strip().lower() in (*OFF_WORDS, ""):
            return None
        return os.path.abspath(str(given.value))
    return parse


def gib_or_off() -> Parse:
    """A number of GiB >= 0, or ``off`` (no bound: None)."""
    number = real(at_least=0, unit="GiB", why=", or off (no bound)")

    def parse(given: Given, ctx: Context) -> float | None:
        if given.value is not None and str(given.value).strip().lower() in ("off", "none", "inf"):
            return None
        return number(given, ctx)
    return parse


def memory_pool() -> Parse:
    def parse(given: Given, ctx: Context) -> str | float:
        if given.value in (None, ""):
            return str(given.default)
        if given.value in POOL_MODES:
            return str(given.value)
        try:
            gib = float(given.value)
        except (TypeError, ValueError):
            gib = 0.0
        if not gib > 0:
            raise refuse(given, "expected auto, machine or a positive number of GiB")
        return gib
    return parse


def timing_threads() -> Parse:
    """A positive count, or ``all`` (kept as 0: every usable core)."""
    def parse(given: Given, ctx: Context) -> int:
        raw = "" if given.value is None else str(given.value).strip()
        if raw == "":
            return int(given.default)
        if raw.lower() == "all":
            return 0
        try:
            count = int(raw)
        except ValueError:
            count = 0
        if count < 1:
            raise refuse(given, "expected a positive count of threads or 'all'")
        return count
    return parse


def on_off() -> Parse:
    def parse(given: Given, ctx: Context) -> bool:
        if given.value in (None, ""):
            return bool(given.default)
        word = str(given.value).strip().lower()
        if word not in ("on", "off"):
            raise refuse(given, "expected on or off")
        return word == "on"
    return parse


def shard() -> Parse:
    def parse(given: Given, ctx: Context) -> tuple[int, int] | None:
        if given.value in (None, ""):
            return None
        try:
            return parse_shard(str(given.value))
        except ValueError as exc:
            raise refuse(given, str(exc)) from None
    return parse


def reveal_path() -> Parse:
    """A file in an existing directory (checked now, written at the end of the session)."""
    def parse(given: Given, ctx: Context) -> str | None:
        if given.value in (None, ""):
            return None
        path = os.path.abspath(str(given.value))
        if os.path.isdir(path) or not os.path.isdir(os.path.dirname(path)):
            raise refuse(given, f"{path}: expected a file in an existing directory")
        return path
    return parse


# --cann-shard K/N (nodes.sharding hands operators out by it)
_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(spec: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)`` with 1 <= K <= N; a ValueError that says what is wrong otherwise."""
    match = _SPEC.match(str(spec))
    if match is None:
        raise ValueError(f"{spec!r} is not K/N (e.g. 1/4: the first of four shards)")
    k, n = int(match.group(1)), int(match.group(2))
    check_shard(k, n, spec)
    return k, n


def check_shard(k: int, n: int, spec: object = None) -> None:
    """Shard K of N exists (1 <= K <= N); a ValueError that says what is wrong otherwise."""
    what = repr(spec) if spec is not None else f"{k}/{n}"
    if n < 1:
        raise ValueError(f"{what}: N must be at least 1 (got {n})")
    if not 1 <= k <= n:
        raise ValueError(f"{what}: K must be between 1 and N={n} (shards are numbered from 1; got {k})")

"""Parsers of the options that carry more than one field: a submission or a kind of source, a device with its
ids, a repeat count or range, a checker or guard with its KernelBench rule. Each returns the dict of the fields it
sets (the option's own field and those declared ``derived`` from it)."""

from __future__ import annotations

import os
import re
from typing import Any

from pytest_cannbench.options.declare import Context, Given, Parse
from pytest_cannbench.options.defaults import (
    CHECKER_WORDS,
    DEFAULT_REPEAT,
    DEFAULT_REPEAT_MAX,
    DEVICES,
    GUARD_WORDS,
    SOURCE_GOLDEN,
    SOURCE_INSTALLED,
)
from pytest_cannbench.options.values import refuse

_RANGE = re.compile(r"^\s*(\d*)\s*\.\.\s*(\d*)\s*$")


def source() -> Parse:
    """``DIR`` (repeatable: one candidate each), ``@golden`` (self-check) or ``@installed`` (no build, no install).
    The ini key holds whitespace-separated values."""
    def parse(given: Given, ctx: Context) -> dict[str, Any]:
        raw = given.value
        values = raw.split() if isinstance(raw, str) else [str(v) for v in raw or ()]
        kinds = [v for v in values if v.startswith("@")]
        for kind in kinds:
            if kind not in (SOURCE_GOLDEN, SOURCE_INSTALLED):
                raise refuse(given, f"{kind} is not a kind of source: expected a submission directory, "
                                    f"{SOURCE_GOLDEN} (grade the goldens) or {SOURCE_INSTALLED} (the cann_bench "
                                    "package already installed)")
        if kinds and len(values) > 1:
            what = "the goldens" if kinds[0] == SOURCE_GOLDEN else "the installed cann_bench"
            raise refuse(given, f"{kinds[0]} grades {what} alone; it cannot be combined with another source")
        dirs = tuple(os.path.abspath(v) for v in values if not v.startswith("@"))
        for directory in dirs:
            if not os.path.isdir(directory):
                raise refuse(given, f"{directory} is not a directory")
        return {"sources": dirs, "source": dirs[0] if dirs else None,
                "self_check": SOURCE_GOLDEN in kinds, "no_install": SOURCE_INSTALLED in kinds}
    return parse


def device() -> Parse:
    """``auto|cpu|cuda|npu`` with optional ``:IDS`` (comma-separated, or ``all``)."""
    def parse(given: Given, ctx: Context) -> dict[str, Any]:
        raw = "" if given.value is None else str(given.value).strip()
        kind, _, ids = (raw or str(given.default)).partition(":")
        if kind not in DEVICES:
            raise refuse(given, f"expected {'|'.join(DEVICES)}, optionally with :IDS (e.g. cuda:0,1)")
        return {"device": kind, "device_ids": _ids(given, ids)}
    return parse


def _ids(given: Given, text: str) -> tuple[int, ...]:
    if not text.strip() or text.strip().lower() == "all":
        return ()  # every device of the host (timing.devices.all_ids)
    try:
        ids = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        ids = ()
    if not ids or any(i < 0 for i in ids):
        raise refuse(given, "expected device ids as 'all' or non-negative integers, comma-separated "
                            "(e.g. cuda:0,1)")
    return ids


def repeat() -> Parse:
    """``N`` timed calls per case; ``auto`` (default): from DEFAULT_REPEAT up to DEFAULT_REPEAT_MAX, until the
    statistics targets are met; ``MIN..MAX`` (either side may be left out) the same between other bounds."""
    def parse(given: Given, ctx: Context) -> dict[str, Any]:
        raw = "auto" if given.value in (None, "") else str(given.value).strip().lower()
        if raw == "auto":
            return {"repeat": DEFAULT_REPEAT, "repeat_auto": True, "repeat_max": DEFAULT_REPEAT_MAX}
        ranged = _RANGE.match(raw)
        if ranged:
            low = int(ranged.group(1)) if ranged.group(1) else DEFAULT_REPEAT
            high = int(ranged.group(2)) if ranged.group(2) else max(DEFAULT_REPEAT_MAX, low)
            if low < 1 or high < low:
                raise refuse(given, f"expected MIN..MAX with 1 <= MIN <= MAX (read as {low}..{high})")
            return {"repeat": low, "repeat_auto": True, "repeat_max": high}
        try:
            count = int(raw)
        except ValueError:
            count = 0
        if count < 1:
            raise refuse(given, "expected a count >= 1, auto, or MIN..MAX (e.g. 10..100)")
        return {"repeat": count, "repeat_auto": False, "repeat_max": DEFAULT_REPEAT_MAX}
    return parse


def checker() -> Parse:
    """One word for both formats: ``relative_error`` is the CANN precision standard everywhere (KernelBench
    problems against a float64 run of their reference); ``allclose`` an allclose (KernelBench problems at their own
    tolerances); ``kernelbench`` KernelBench's rule for its problems, CANN tasks keeping the default. Not given:
    each format its own default (CANN tasks relative_error, KernelBench problems kernelbench)."""
    def parse(given: Given, ctx: Context) -> dict[str, Any]:
        word = "" if given.value is None else str(given.value).strip()
        if word and word not in CHECKER_WORDS:
            raise refuse(given, f"expected one of {', '.join(CHECKER_WORDS)}")
        return {"checker": "allclose" if word == "allclose" else "relative_error",
                "kb_accuracy": "cann" if word == "relative_error" else "kernelbench"}
    return parse


def guard() -> Parse:
    """``block`` (default) fails what the guard catches, KernelBench problems under the coverage rule;
    ``kernelbench``: block, KernelBench problems under KernelBench's rule alone; ``strict``: block for every format
    (any builtin compute of a KernelBench ModelNew fails too); ``warn`` and ``off`` as before."""
    rules = {"block": ("block", "coverage"), "kernelbench": ("block", "kernelbench"), "strict": ("block", "cann"),
             "warn": ("warn", "coverage"), "off": ("off", "coverage")}

    def parse(given: Given, ctx: Context) -> dict[str, Any]:
        word = "block" if given.value in (None, "") else str(given.value).strip()
        if word not in GUARD_WORDS:
            raise refuse(given, f"expected one of {', '.join(GUARD_WORDS)}")
        mode, kb_rule = rules[word]
        return {"guard": mode, "kb_guard": kb_rule}
    return parse

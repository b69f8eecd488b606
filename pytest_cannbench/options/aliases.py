"""Spellings of the previous release that became values of another option. Each is still accepted, for one
release, and folded into the option that replaced it (the run says, once, what to write instead).

Options that only moved between the command line and the ini file are not listed here: their declaration says
``was_cli`` or ``was_ini``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_cannbench.options.declare import Given
from pytest_cannbench.options.defaults import SOURCE_GOLDEN, SOURCE_INSTALLED
from pytest_cannbench.options.values import refuse

Fold = Callable[[Given, Any], Any]  # (the old spelling's value, the new option's raw value so far) -> its new raw value


@dataclass(frozen=True)
class Moved:
    name: str  # --cann-<name> and cann_<name> of the previous release
    into: str  # the Settings field whose option takes it now
    fold: Fold
    now: str  # what to write instead (the README's table of previous spellings)
    flag: bool = False
    metavar: str | None = None

    @property
    def flag_name(self) -> str:
        return f"--cann-{self.name}"

    @property
    def ini_key(self) -> str:
        return "cann_" + self.name.replace("-", "_")

    @property
    def dest(self) -> str:
        return self.ini_key


def _values(raw: Any) -> list[str]:
    return raw.split() if isinstance(raw, str) else [str(v) for v in raw or ()]


def _kind_of_source(kind: str) -> Fold:
    def fold(old: Given, raw: Any) -> Any:
        return [*_values(raw), kind] if _truthy(old.value) else raw
    return fold


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("1", "true", "yes", "on")


_COUNT = re.compile(r"^\s*\d+\s*$")


def _repeat_bound(side: int) -> Fold:
    """--cann-repeat-min/-max: a bound of ``auto``'s range (a fixed count has none, as before)."""
    def fold(old: Given, raw: Any) -> Any:
        current = "auto" if raw in (None, "") else str(raw).strip()
        if _COUNT.match(current):
            return current
        bounds = ["", ""] if current.lower() == "auto" else (current.split("..", 1) + [""])[:2]
        bounds[side] = str(old.value).strip()
        return "..".join(bounds)
    return fold


def _device_ids(old: Given, raw: Any) -> Any:
    kind = ("auto" if raw in (None, "") else str(raw)).partition(":")[0]
    return f"{kind}:{old.value}"


_KB_CHECKER = {"kernelbench": "kernelbench", "cann": "relative_error"}


def _kb_accuracy(old: Given, raw: Any) -> Any:
    """KernelBench's accuracy beside a CANN checker: relative_error (the default) + kernelbench is ``kernelbench``,
    + cann is ``relative_error``; allclose + kernelbench is ``allclose``; allclose + cann has no spelling now."""
    word = _KB_CHECKER.get(str(old.value).strip(), str(old.value).strip())
    current = "" if raw in (None, "") else str(raw).strip()
    if current in ("", "relative_error") or current == word or (current == "allclose" and word == "kernelbench"):
        return current if current == "allclose" else word
    raise refuse(old, f"cannot be combined with --cann-checker {current}: --cann-checker now sets both formats' "
                      "checkers (relative_error, allclose or kernelbench)")


_KB_GUARD = {"coverage": "block", "kernelbench": "kernelbench", "cann": "strict"}


def _kb_guard(old: Given, raw: Any) -> Any:
    """The KernelBench rule of ``--cann-guard block``; under warn or off it never applied."""
    word = _KB_GUARD.get(str(old.value).strip(), str(old.value).strip())
    current = "" if raw in (None, "") else str(raw).strip()
    if current in ("", "block"):
        return word
    if current in ("warn", "off") or current == word:
        return current
    raise refuse(old, f"cannot be combined with --cann-guard {current}: use one --cann-guard (block, kernelbench "
                      "or strict)")


MOVED = (
    Moved("self-check", "sources", _kind_of_source(SOURCE_GOLDEN), f"--cann-source {SOURCE_GOLDEN}", flag=True),
    Moved("no-install", "sources", _kind_of_source(SOURCE_INSTALLED), f"--cann-source {SOURCE_INSTALLED}",
          flag=True),
    Moved("repeat-min", "repeat", _repeat_bound(0), "--cann-repeat N..MAX", metavar="N"),
    Moved("repeat-max", "repeat", _repeat_bound(1), "--cann-repeat MIN..N", metavar="N"),
    Moved("device-ids", "device", _device_ids, "--cann-device KIND:IDS (e.g. cuda:0,1)", metavar="IDS"),
    Moved("kb-accuracy", "checker", _kb_accuracy, "--cann-checker kernelbench (was kernelbench) or relative_error "
          "(was cann)", metavar="kernelbench|cann"),
    Moved("kb-guard", "guard", _kb_guard, "--cann-guard block (was coverage), kernelbench or strict (was cann)",
          metavar="coverage|kernelbench|cann"),
)

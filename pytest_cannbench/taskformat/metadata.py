"""Performance anchors (``baseline_perf_us``, ``t_hw_us``) from ``metadata/<hw>.json``.

Compatible with the official ``BaselineStore``: ``metadata/`` is found by walking up from the
bench root; the device name goes through the official alias table; an entry is found by walking
``rel_path.split('/')`` then ``str(case_id)`` (so suites with and without a ``levelN`` layer both
work); a value is a number or a ``{hardware: number}`` mapping; a field that is missing or not
positive in the chosen file falls back, field by field, to ``910b2.json``.

What differs, on purpose: fallbacks are never silent (one warning per kind per session, returned
as text in :attr:`MetadataAnchors.warnings` for the caller to surface), every anchor says which
file it came from, Ascend 910_93 (Atlas A3) names get a key of their own instead of passing
through unrecognised, and a case whose ``t_hw_us`` is not below its ``baseline_perf_us`` (the
official 910b2 ``level2/scatter/12``) is kept but flagged, since its HAP score is 0 or undefined
for every candidate. Pure Python: no torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_cannbench.taskformat.dirs import find_metadata_dir

DEFAULT_HARDWARE = "910b2"
A3_HARDWARE = "910_93"
FIELDS = ("baseline_perf_us", "t_hw_us")

# The official alias table (utils/baseline_resolver.py), matched as prefixes, longest first.
# It maps Ascend910_9361/9362 to 910b1/910b2 and we keep that for compatibility.
OFFICIAL_ALIASES: dict[str, str] = {
    "Ascend910_9362": "910b2",
    "Ascend910_9362B": "910b2",
    "Ascend910B2": "910b2",
    "910b2": "910b2",
    "Atlas-A2": "910b2",
    "Ascend910_9361": "910b1",
    "Ascend910B1": "910b1",
    "910b1": "910b1",
    "Ascend310P": "310p",
    "310p": "310p",
    "Ascend950PR": "950pr",
    "950pr": "950pr",
}

# Atlas A3 (Ascend910_9391, _9392, _9381, _9382, _9372, ...) is missing from the official table, so
# there the name passes through and silently gets 910b2's anchors. Here it maps to its own key;
# CANN Bench ships no metadata/910_93.json, so lookups fall back to 910b2 *with a warning*.
EXTRA_ALIASES: dict[str, str] = {"Ascend910_93": A3_HARDWARE}

ALIASES: dict[str, str] = {**OFFICIAL_ALIASES, **EXTRA_ALIASES}


def canonical_hardware(device_name: str) -> str:
    """The metadata key of a device name (``Ascend910B2`` -> ``910b2``); unknown names unchanged.

    Longest alias that is a prefix of the name wins, so ``Ascend910_9362`` (official: 910b2) beats
    the A3 prefix ``Ascend910_93``.
    """
    name = device_name.strip()
    best = ""
    for prefix in ALIASES:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return ALIASES[best] if best else name


@dataclass(frozen=True)
class Anchor:
    """The two anchors of one case; a field is None when no file has a positive value for it."""

    baseline_us: float | None
    t_hw_us: float | None
    source: str  # "metadata:910b2", "metadata:910b2 (fallback from 950pr)", ...
    flags: tuple[str, ...] = ()  # data problems worth showing next to the score


class MetadataError(ValueError):
    """A metadata file exists but cannot be used (not JSON, not a mapping)."""


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MetadataError(f"{path}: cannot read file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise MetadataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise MetadataError(f"{path}: line {exc.lineno}, column {exc.colno}: JSON syntax error: {exc.msg}") from None
    if not isinstance(data, dict):
        raise MetadataError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def _entry(data: dict[str, Any] | None, rel_path: str, case_id: int) -> dict[str, Any] | None:
    """``data[level][op][str(case_id)]`` (or ``data[op][...]`` for flat suites), if it is a mapping."""
    node: Any = data
    for part in (*rel_path.split("/"), str(case_id)):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, dict) else None


class MetadataAnchors:
    """The anchors of one bench for one hardware, with the 910b2 fallback.

    Create one per session: warnings are collected once per kind on the instance.
    """

    def __init__(self, metadata_dir: Path | None, hardware: str = DEFAULT_HARDWARE) -> None:
        self.requested = hardware
        self.hardware = canonical_hardware(hardware)
        self.metadata_dir = metadata_dir
        self.warnings: list[str] = []
        self.fallback_cases: list[str] = []  # "<rel_path>_<case_id>" that used at least one 910b2 value
        self._warned: set[str] = set()
        self._primary: dict[str, Any] | None = None
        self._fallback: dict[str, Any] | None = None
        self.file: Path | None = None  # the hardware's own file, when present
        self.fallback_file: Path | None = None
        if metadata_dir is None:
            return
        own = metadata_dir / f"{self.hardware}.json"
        default = metadata_dir / f"{DEFAULT_HARDWARE}.json"
        if own.name == f"{self.hardware}.json" and own.is_file():  # a name with "/" never leaves metadata/
            self._primary, self.file = _load(own), own
        if self.hardware != DEFAULT_HARDWARE and default.is_file():
            self._fallback, self.fallback_file = _load(default), default
        if self.file is None:
            self._warn("missing-file", self._missing_file_message(own, default))

    @classmethod
    def from_bench_root(cls, bench_root: Path, device_name: str | None = None) -> MetadataAnchors:
        """Search ``metadata/`` upward from ``bench_root``; no device name means the official default, 910b2."""
        return cls(find_metadata_dir(bench_root), device_name or DEFAULT_HARDWARE)

    @property
    def available(self) -> bool:
        """Whether any metadata file was loaded (else every lookup is None)."""
        return self._primary is not None or self._fallback is not None

    def _hw_label(self) -> str:
        return self.hardware if self.requested == self.hardware else f"{self.requested} -> {self.hardware}"

    def _missing_file_message(self, own: Path, default: Path) -> str:
        if self._fallback is None:
            return f"anchors: {own} not found; no baseline_perf_us/t_hw_us for hardware {self._hw_label()}"
        why = ("Ascend 910_93 (Atlas A3) has no anchors of its own in CANN Bench"
               if self.hardware == A3_HARDWARE else f"{own.name} not found in {own.parent}")
        return (f"anchors: {why}; using {default.name} for hardware {self._hw_label()}, "
                f"which was measured on a different chip (add {own.name} to fix)")

    def _warn(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            self.warnings.append(message)

    def _value(self, entry: dict[str, Any] | None, field: str, hardware: str, where: str) -> float | None:
        """A positive finite number, read through a ``{hardware: value}`` mapping; else None."""
        if entry is None or entry.get(field) is None:
            return None
        value = entry[field]
        if isinstance(value, dict):
            value = value.get(hardware)
            if value is None:
                return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self._warn(f"invalid:{where}", f"anchors: {where}: {field} is {value!r}, not a number; treated as missing "
                                           "(further invalid values in this file are not reported)")
            return None
        value = float(value)
        return value if math.isfinite(value) and value > 0 else None

    def lookup(self, rel_path: str, case_id: int) -> Anchor | None:
        """The anchors of ``<rel_path>_<case_id>``; None when no file has either field."""
        primary = _entry(self._primary, rel_path, case_id)
        fallback = _entry(self._fallback, rel_path, case_id)
        values: dict[str, float | None] = {}
        fell_back: list[str] = []
        for field in FIELDS:
            value = self._value(primary, field, self.hardware, str(self.file))
            if value is None and self._fallback is not None:
                value = self._value(fallback, field, DEFAULT_HARDWARE, str(self.fallback_file))
                if value is not None:
                    fell_back.append(field)
            values[field] = value
        baseline, t_hw = values["baseline_perf_us"], values["t_hw_us"]
        if baseline is None and t_hw is None:
            return None
        key = f"{rel_path}_{case_id}"
        present = [f for f in FIELDS if values[f] is not None]
        if not fell_back:
            source = f"metadata:{self.hardware}"
        elif len(fell_back) == len(present):
            source = f"metadata:{DEFAULT_HARDWARE} (fallback from {self.hardware})"
        else:
            source = f"metadata:{self.hardware} ({', '.join(fell_back)} from metadata:{DEFAULT_HARDWARE}, fallback)"
        if fell_back:
            self.fallback_cases.append(key)
            if self.file is not None:  # a missing file was reported once already
                self._warn("case-fallback", f"anchors: {self.file} lacks {', '.join(fell_back)} for {key} "
                                            f"(or it is not positive); using {DEFAULT_HARDWARE}'s value. Further "
                                            "cases that fall back are not reported one by one")
        flags: tuple[str, ...] = ()
        if baseline is not None and t_hw is not None and t_hw >= baseline:
            relation = "equals" if t_hw == baseline else "exceeds"
            flag = (f"t_hw_us ({t_hw:g}) {relation} baseline_perf_us ({baseline:g}): the HAP score of this case "
                    "is 0 or undefined for every candidate")
            flags = (flag,)
            self._warn(f"flag:{key}", f"anchors: {key} ({source}): {flag}")
        return Anchor(baseline_us=baseline, t_hw_us=t_hw, source=source, flags=flags)

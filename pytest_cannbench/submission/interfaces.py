"""Which submission callable implements which operator: the official name rules, as pure functions.

An operator ``GridSampler3D`` with schema ``grid_sampler_3d(...)`` is looked up
under these names, in order: the snake-case variants of the PascalCase name
(naive, acronym-aware, digit-split, digit-joined), ``name.lower()``, ``name``,
then the schema's function name. The callable is taken from
``torch.ops.cann_bench`` first, then from the ``cann_bench`` module.

An operator is *provided* when one of its candidate names is a discovered
interface (compared case-insensitively). The official harness only matches
``name.lower()`` and the schema name, and only discovers module attributes, so
a custom op registered in ``torch.ops.cann_bench`` under a snake-case name is
callable there but reported missing; here discovery and calling agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")  # used with fullmatch ($ would accept "op\n")
MAX_INTERFACES = 10000


def snake_case_candidates(name: str) -> list[str]:
    """Snake-case spellings of a PascalCase operator name, most likely first, without duplicates."""
    out: list[str] = []

    def add(candidate: str) -> None:
        if candidate and candidate not in out:
            out.append(candidate)

    naive = re.sub(r"_{2,}", "_", re.sub(r"([A-Z])", r"_\1", name).lower().lstrip("_"))
    add(naive)  # AdaptiveAvgPool3D -> adaptive_avg_pool3_d
    words = re.sub(r"([a-z\d])([A-Z])", r"\1_\2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name))
    add(words.lower())  # ROIAlign -> roi_align
    split_digits = re.sub(r"([a-z])(\d)", r"\1_\2", words).lower()
    add(split_digits)  # GridSampler3D -> grid_sampler_3_d
    add(re.sub(r"(\d)_([a-z])", r"\1\2", split_digits))  # -> grid_sampler_3d
    return out


def call_candidates(name: str, function_name: str | None) -> list[str]:
    """Every name an operator may be called by, in lookup order."""
    out = snake_case_candidates(name)
    for extra in (name.lower(), name, function_name):
        if extra and extra not in out:
            out.append(extra)
    return out


@dataclass(frozen=True)
class Interface:
    name: str
    source: str  # "torch.ops", "module" or "torch.ops+module"


def provider(interfaces: Iterable[Interface], name: str, function_name: str | None) -> str | None:
    """The discovered interface that implements the operator, or None when it is missing."""
    by_lower = {i.name.lower(): i.name for i in interfaces}
    for candidate in call_candidates(name, function_name):
        if candidate.lower() in by_lower:
            return by_lower[candidate.lower()]
    return None


def validate_names(raw: object) -> list[Interface]:
    """Interfaces reported by the discovery process (submission code ran there): identifiers only."""
    if not isinstance(raw, list):
        raise ValueError("interface list is not a list")
    out: dict[str, set[str]] = {}
    for entry in raw[:MAX_INTERFACES]:
        if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(x, str) for x in entry)):
            raise ValueError(f"malformed interface entry {str(entry)[:80]!r}")
        name, source = entry
        if not _IDENTIFIER.fullmatch(name) or source not in ("torch.ops", "module"):
            raise ValueError(f"invalid interface {name[:80]!r} from {source[:20]!r}")
        out.setdefault(name, set()).add(source)
    return [Interface(name, "+".join(sorted(sources, reverse=True))) for name, sources in sorted(out.items())]

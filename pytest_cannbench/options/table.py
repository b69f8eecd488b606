"""Questions asked of the declarations: which options exist and where, what the ``--cann-resume`` identity holds,
what ``cannbench merge`` compares. Everything here is read off :class:`~.settings.Settings`' fields."""

from __future__ import annotations

import dataclasses
from functools import cache

from pytest_cannbench.options.declare import Declaration, Derived, Option, declaration_of
from pytest_cannbench.options.settings import Settings


@cache
def declarations() -> dict[str, Declaration]:
    """Every field's declaration, in field order."""
    return {f.name: declaration_of(f) for f in dataclasses.fields(Settings)}


def options() -> dict[str, Option]:
    """Field name -> its option, for every field the user sets."""
    return {name: d for name, d in declarations().items() if isinstance(d, Option)}


def command_line() -> dict[str, Option]:
    """The options with a command-line spelling of this release."""
    return {name: o for name, o in options().items() if o.cli}


def ini_only() -> dict[str, Option]:
    return {name: o for name, o in options().items() if not o.cli}


def derived_from(owner: str) -> tuple[str, ...]:
    """The fields an option sets besides its own (its parser returns a dict of them all when there are any)."""
    return tuple(name for name, d in declarations().items() if isinstance(d, Derived) and d.of == owner)


def changes_results(name: str) -> bool:
    """Whether field ``name``'s option changes a result, through its own field or one derived from it."""
    return any(declarations()[f].results for f in (name, *derived_from(name)))


def identity_fields() -> tuple[str, ...]:
    """The settings a case's recorded outcome depends on: the ``--cann-resume`` identity hashes them."""
    return tuple(name for name, d in declarations().items() if d.results)


def compared_fields() -> tuple[str, ...]:
    """What the jobs of one run must share (``cannbench merge`` warns where they differ): every recorded setting
    that is not per job. The identity's settings are among them (tests/unit/test_options.py)."""
    return tuple(name for name, d in declarations().items() if d.recorded and not d.per_job)


def recorded_fields() -> tuple[str, ...]:
    """What the leaderboard's config records (``Settings.as_dict``)."""
    return tuple(name for name, d in declarations().items() if d.recorded)

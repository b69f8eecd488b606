"""How a setting is declared: the metadata every :class:`~pytest_cannbench.options.settings.Settings` field carries.

A field is one of three things, and says so in its ``dataclasses.field`` metadata (under :data:`KEY`):

- an :class:`Option`: something the user sets, on the command line (``--cann-<name>``), as an ini key
  (``cann_<name>``, also ``-o cann_<name>=...``) or both; it parses its own value and, for an option that carries
  more than one field (``--cann-source @golden`` sets ``self_check`` too), the values of the fields derived from it;
- a :class:`Derived` field: set only by the option it names;
- an :class:`Internal` field: made by the plugin itself (the session secret, whether the run is a cannbench run).

Each of them says whether it changes a case's recorded outcome (``results``: then it is part of the
``--cann-resume`` identity and of what ``cannbench merge`` requires to match) and whether it may differ between the
jobs of one sharded run (``per_job``: paths, the machine's memory, run-time decisions). Everything else about
options (``add_options``, parsing, the README table, the identity, merge's check) is derived from these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEY = "cannbench"
PREFIX = "--cann-"
INI_PREFIX = "cann_"


class OptionError(ValueError):
    """A value refused by its parser; the pytest side turns it into a ``pytest.UsageError`` (the declarations and
    parsers import no pytest: ``cannbench merge`` reads them without it)."""


@dataclass(frozen=True)
class Given:
    """One raw value as the user gave it, with the spelling they used (for messages that quote it back)."""

    value: Any  # None: not given (the field's default applies)
    spelling: str  # "--cann-repeat", "-o cann_repeat", "cann_repeat (pytest.ini)", ...
    default: Any = None
    typed: str | None = None  # what to quote when it is not spelling + value (a deprecated spelling folded in)

    @property
    def shown(self) -> str:
        """The spelling and the value as the user typed them: ``--cann-warmup -1``, ``-o cann_warmup=-1``."""
        if self.typed is not None:
            return self.typed
        value = " ".join(str(v) for v in self.value) if isinstance(self.value, (list, tuple)) else self.value
        if self.spelling.startswith("-o "):
            return f"{self.spelling}={value}"
        if self.spelling.startswith(PREFIX):
            return f"{self.spelling} {value}" if value is not True else self.spelling
        return f"{self.spelling} = {value}"


@dataclass
class Context:
    """What a parser may need besides its own value: where the run is, and the fields parsed before it."""

    rootpath: Path
    parsed: dict[str, Any] = dataclasses.field(default_factory=dict)


Parse = Callable[[Given, Context], Any]


@dataclass(frozen=True)
class Option:
    """A setting the user gives. ``cli`` and ``ini`` say where; ``was_cli``/``was_ini`` keep a spelling of the
    previous release working (with a deprecation warning) where it moved from one to the other."""

    name: str  # the stem: --cann-<name>, cann_<name with underscores>
    help: str
    parse: Parse
    results: bool
    per_job: bool
    cli: bool
    ini: bool
    metavar: str | None = None
    flag: bool = False  # takes no value on the command line (store_true)
    many: bool = False  # repeatable on the command line; the ini key holds whitespace-separated values
    was_cli: bool = False  # the previous release had --cann-<name>: still accepted, deprecated
    was_ini: bool = False  # the previous release had cann_<name>: still read, deprecated
    recorded: bool = True  # written into the leaderboard's config (never the secret, never where it goes)

    @property
    def flag_name(self) -> str:
        return PREFIX + self.name

    @property
    def ini_key(self) -> str:
        return INI_PREFIX + self.name.replace("-", "_")

    @property
    def dest(self) -> str:
        """The argparse destination of its command-line spelling (the same name as its ini key)."""
        return self.ini_key


@dataclass(frozen=True)
class Derived:
    """A field set by another field's option (``of``: that field's name)."""

    of: str
    results: bool
    per_job: bool
    recorded: bool = True


@dataclass(frozen=True)
class Internal:
    """A field the plugin fills itself; ``why`` says from what."""

    why: str
    results: bool
    per_job: bool
    recorded: bool = True


Declaration = Option | Derived | Internal


def setting(default: Any, name: str, help: str, parse: Parse, *, results: bool, per_job: bool = False,
            cli: bool = False, ini: bool = True, repr: bool = True, **extra: Any) -> Any:
    """A Settings field given by the user: its default and its :class:`Option`."""
    option = Option(name=name, help=help, parse=parse, results=results, per_job=per_job, cli=cli, ini=ini, **extra)
    return _field(default, option, repr)


def derived(default: Any, of: str, *, results: bool, per_job: bool = False) -> Any:
    """A Settings field set by the option of field ``of``."""
    return _field(default, Derived(of=of, results=results, per_job=per_job), True)


def internal(default: Any, why: str, *, per_job: bool, recorded: bool = True, repr: bool = True) -> Any:
    """A Settings field the plugin fills itself (never the user); it never changes a recorded outcome."""
    return _field(default, Internal(why=why, results=False, per_job=per_job, recorded=recorded), repr)


def _field(default: Any, declaration: Declaration, show: bool) -> Any:
    if isinstance(default, (list, dict, set)):
        raise TypeError("a Settings default must be immutable (a tuple, not a list)")
    return dataclasses.field(default=default, repr=show, metadata={KEY: declaration})


def declaration_of(field: dataclasses.Field[Any]) -> Declaration:
    """A field's declaration; a field without one is a programming error (tests/unit/test_options.py)."""
    found = field.metadata.get(KEY)
    if not isinstance(found, (Option, Derived, Internal)):
        raise TypeError(f"Settings.{field.name} has no declaration: declare it with options.declare.setting(), "
                        "derived() or internal()")
    return found

"""From pytest's parser and config to :class:`~.settings.Settings`: registering every declared option and ini key,
reading what the user gave (the command line wins over the ini file), folding in the previous release's spellings
with one deprecation warning each, and parsing each value with its declaration's parser."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Literal

import pytest

from pytest_cannbench import holds_task_tree
from pytest_cannbench.options import table
from pytest_cannbench.options.aliases import MOVED, Moved
from pytest_cannbench.options.declare import Context, Given, Option, OptionError
from pytest_cannbench.options.defaults import SECRET_WORKERINPUT_KEY
from pytest_cannbench.options.settings import Settings

SETTINGS_KEY = pytest.StashKey[Settings]()  # the run's settings on config.stash, from pytest_configure on


class CannOptionDeprecationWarning(pytest.PytestDeprecationWarning):
    """A spelling of the previous release was used; it still works in this release."""


def registration() -> dict[str, list[dict[str, Any]]]:
    """Every option and ini key pytest is told about, as plain data: ``plugin.py`` registers them from the copy
    shipped beside this module (``pytest_options.json``, written by ``scripts/options_table.py --write``), so a
    pytest run that is not a cannbench run imports none of the declarations."""
    options: list[dict[str, Any]] = []
    ini: list[dict[str, Any]] = []
    for option in table.options().values():
        if option.cli or option.was_cli:  # argparse %-formats help texts
            options.append({"name": option.flag_name, "dest": option.dest,
                            "help": option.help.replace("%", "%%") if option.cli else None,
                            **_argparse_kind(option)})
        kind: Literal["bool", "string"] = "bool" if option.flag else "string"  # a TOML true is a bool
        if option.ini:  # one help text per setting: the ini key of a command-line option points at it
            ini.append({"name": option.ini_key, "type": kind,
                        "help": f"project-wide {option.flag_name} (the option wins)" if option.cli else option.help})
        elif option.was_ini:
            ini.append({"name": option.ini_key, "type": kind, "help": f"deprecated: use {option.flag_name} on the "
                        "command line"})
    for moved in MOVED:
        options.append({"name": moved.flag_name, "dest": moved.dest, "help": None, **_argparse_kind(moved)})
        moved_kind: Literal["bool", "string"] = "bool" if moved.flag else "string"
        ini.append({"name": moved.ini_key, "type": moved_kind,
                    "help": f"deprecated: use --cann-{table.options()[moved.into].name}"})
    return {"options": options, "ini": ini}


def _argparse_kind(option: Option | Moved) -> dict[str, Any]:
    if option.flag:
        return {"action": "store_true"}
    kind: dict[str, Any] = {"metavar": option.metavar}
    if isinstance(option, Option) and option.many:
        kind["action"] = "append"
    return kind


def settings_from_config(config: pytest.Config) -> Settings:
    try:
        return _settings(config)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None


def _settings(config: pytest.Config) -> Settings:
    given, deprecated = gather(config)
    if not hasattr(config, "workerinput"):  # the controller warns once; its xdist workers parse the same again
        for message in deprecated:
            config.issue_config_time_warning(CannOptionDeprecationWarning(message), stacklevel=2)
    ctx = Context(rootpath=Path(config.rootpath))
    defaults = _defaults()
    for name, option in table.options().items():
        raw = given.get(name) or Given(None, option.flag_name if option.cli else option.ini_key, defaults[name])
        value = option.parse(raw, ctx)
        if table.derived_from(name):
            ctx.parsed.update(value)
        else:
            ctx.parsed[name] = value
    graded = bool(ctx.parsed["source"] or ctx.parsed["no_install"])
    ctx.parsed["secret"] = _session_secret(config, graded=graded, seeded="seed" in given)
    ctx.parsed["active"] = _gives_something(given) or _names_a_task_tree(config)
    return Settings(**ctx.parsed)


def _defaults() -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(Settings)}


def gather(config: pytest.Config) -> tuple[dict[str, Given], list[str]]:
    """What the user gave, per field, as typed; and one deprecation message per spelling of the previous release."""
    given: dict[str, Given] = {}
    deprecated: list[str] = []
    defaults = _defaults()
    for name, option in table.options().items():
        cli = _cli_value(config, option.dest) if option.cli or option.was_cli else None
        ini = _ini_given(config, option.ini_key, defaults[name]) if option.ini or option.was_ini else None
        if cli is not None and not option.cli:
            deprecated.append(f"{Given(cli, option.flag_name).shown} is deprecated and goes away in the next "
                              f"release: it is an ini key now, write -o {option.ini_key}={_plain(cli)} (or "
                              f"{option.ini_key} in the ini file)")
        if ini is not None and not option.ini:
            deprecated.append(f"the ini key {option.ini_key} is deprecated and goes away in the next release: give "
                              f"{option.flag_name} on the command line")
        if cli is not None:  # the command line wins over the ini file
            given[name] = Given(cli, option.flag_name, defaults[name])
        elif ini is not None:
            given[name] = ini
    folded: list[tuple[Given, str]] = []
    for moved in MOVED:
        old = _moved_given(config, moved)
        if old is None:
            continue
        option = table.options()[moved.into]
        before = given.get(moved.into)
        raw = moved.fold(old, before.value if before is not None else None)
        typed = f"{before.shown} {old.shown}" if before is not None else old.shown
        given[moved.into] = Given(raw, option.flag_name, defaults[moved.into], typed=typed)
        folded.append((old, moved.into))
    for old, into in folded:  # each names what to write instead of everything it was folded with
        option = table.options()[into]
        new = Given(given[into].value, option.flag_name if old.spelling.startswith("--") else option.ini_key).shown
        deprecated.append(f"{old.shown} is deprecated and goes away in the next release: write {new}")
    return given, deprecated


def _plain(value: Any) -> str:
    return "true" if value is True else " ".join(map(str, value)) if isinstance(value, list) else str(value)


def _cli_value(config: pytest.Config, dest: str) -> Any:
    value = config.getoption(dest, None)
    return None if value in (None, False, []) else value


def _ini_given(config: pytest.Config, key: str, default: Any) -> Given | None:
    overridden = any(str(item).split("=", 1)[0].strip() == key for item in config.option.override_ini or ())
    try:
        value = config.getini(key)
    except (pytest.UsageError, ValueError) as exc:  # pytest's own check of a bool key names only the value
        raise OptionError(f"{'-o ' if overridden else ''}{key}: {exc} (expected true or false)") from None
    if value is None or value == "" or value == []:  # unset (pytest 8 answers [] for a key without a default)
        return None
    return Given(value, f"-o {key}" if overridden else key, default)


def _moved_given(config: pytest.Config, moved: Moved) -> Given | None:
    cli = _cli_value(config, moved.dest)
    if cli is not None:
        return Given(cli, moved.flag_name)
    return _ini_given(config, moved.ini_key, None)


def asked(config: pytest.Config) -> bool:
    """Whether this run is a cannbench run: a ``--cann-*`` option or ``cann_*`` ini key was given, or a path
    pytest was pointed at holds a task tree. Otherwise the plugin collects, writes and prints nothing."""
    try:
        return _gives_something(gather(config)[0]) or _names_a_task_tree(config)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None


def _gives_something(given: dict[str, Given]) -> bool:
    """An ini flag set to false asks for nothing (a project may keep ``cann_no_perf = false`` around)."""
    return any(g.value is not False for g in given.values())


def _names_a_task_tree(config: pytest.Config) -> bool:
    return any(holds_task_tree(Path(str(arg).split("::", 1)[0])) for arg in config.args)


def _session_secret(config: pytest.Config, *, graded: bool, seeded: bool) -> str:
    """One secret per session, made by the controller and handed to xdist workers (see plugin.XdistHooks):
    a submission cannot precompute or recognise inputs it has never seen."""
    if not graded or seeded:
        return ""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and SECRET_WORKERINPUT_KEY in workerinput:
        return str(workerinput[SECRET_WORKERINPUT_KEY])
    return os.urandom(16).hex()

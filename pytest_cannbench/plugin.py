"""The pytest entry point of pytest-cannbench.

pytest loads this module in every run of the environment (``pytest11``), so it imports nothing of the package
but its root: it registers the options from the plain-data copy of their declarations shipped beside them
(``options/pytest_options.json``, which ``scripts/options_table.py --write`` writes and a test keeps current),
and only a cannbench run (a ``--cann-*`` option or ``cann_*`` ini key given, or a path that holds a task tree)
goes on to parse its settings and register ``nodes.frontend.CannBenchRun``, which holds every other hook, as
xdist registers its session only once distribution is asked for.
"""

from __future__ import annotations

import argparse
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from pytest_cannbench import holds_task_tree

DECLARED = Path(__file__).resolve().parent / "options" / "pytest_options.json"
RUN = "cannbench-run"


@cache
def _declared() -> dict[str, list[dict[str, Any]]]:
    data: dict[str, list[dict[str, Any]]] = json.loads(DECLARED.read_text(encoding="utf-8"))
    return data


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cannbench", "CANN Bench operator grading")
    for entry in _declared()["options"]:
        kind = {k: v for k, v in entry.items() if k not in ("name", "dest", "help")}
        group.addoption(
            entry["name"],
            dest=entry["dest"],
            default=None,
            help=entry["help"] if entry["help"] is not None else argparse.SUPPRESS,
            **kind,
        )
    for entry in _declared()["ini"]:
        parser.addini(entry["name"], entry["help"], type=entry["type"], default=None)


def _asked(config: pytest.Config) -> bool:
    """Whether this run is a cannbench run: an option or ini key given (an ini flag set to false asks for nothing),
    or a path pytest was pointed at holds a task tree."""
    if any(getattr(config.option, e["dest"], None) not in (None, False) for e in _declared()["options"]):
        return True
    if any(config.getini(e["name"]) not in (None, False, "") for e in _declared()["ini"]):
        return True
    return any(holds_task_tree(Path(str(arg).split("::", 1)[0])) for arg in config.args)


def pytest_configure(config: pytest.Config) -> None:
    if not _asked(config):  # not a cannbench run: collect, write and print nothing
        return
    # a cannbench run only: every other run of the environment never loads the settings' parser
    from pytest_cannbench import options

    settings = options.settings_from_config(config)
    config.stash[options.SETTINGS_KEY] = settings
    if not settings.active:
        return
    # a cannbench run only: the front-end holds every other hook and what they load
    from pytest_cannbench.nodes.frontend import CannBenchRun

    config.pluginmanager.register(CannBenchRun(config, settings), RUN)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # a task's golden.py is never a test module, in any run (a ``python_files = *.py`` project would import it)
    if collection_path.name == "golden.py" and (collection_path.parent / "cases.yaml").is_file():
        return True
    return None


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.pluginmanager.get_plugin(RUN)
    if run is not None:
        run.unconfigure()
        config.pluginmanager.unregister(run)

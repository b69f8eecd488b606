"""The pytest entry point of pytest-cannbench: options, and the run's plugin once a run asks for it.

This module is loaded by every pytest run of the environment (``pytest11`` entry point), so it imports only the
options' declaration. A cannbench run (``options.asked``) registers ``nodes.frontend.CannBenchRun`` at configure
time, which holds every other hook, as xdist registers its session only when distribution is asked for; any other
run sees the hooks below, the golden rule among them, and nothing else of the package.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_cannbench import options


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    settings = options.settings_from_config(config)
    config.stash[options.SETTINGS_KEY] = settings
    if not settings.active:  # not a cannbench run: collect, write and print nothing
        return
    from pytest_cannbench.nodes.frontend import CannBenchRun

    config.pluginmanager.register(CannBenchRun(config, settings), CannBenchRun.NAME)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # a task's golden.py is never a test module, in any run (a ``python_files = *.py`` project would import it)
    if collection_path.name == "golden.py" and (collection_path.parent / "cases.yaml").is_file():
        return True
    return None


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.pluginmanager.get_plugin("cannbench-run")
    if run is not None:
        run.unconfigure()
        config.pluginmanager.unregister(run)

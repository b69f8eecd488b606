"""Shared test helpers: fixture task trees copied into pytester sandboxes."""

from __future__ import annotations

import importlib
import pkgutil
import shutil
from pathlib import Path

import pytest

# Imported before pytester snapshots sys.modules: inline_run drops every module first imported
# inside an inner session. Importing torch a second time in one process crashes it, and a plugin
# submodule re-imported next to its stale copy (still an attribute of the package) yields two
# versions of its exception classes, so an ``except`` in one module misses what the other raises.
import torch  # noqa: F401
import yaml  # noqa: F401

import pytest_cannbench

for _module in pkgutil.iter_modules(pytest_cannbench.__path__):
    importlib.import_module(f"pytest_cannbench.{_module.name}")

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).parent / "fixtures"

# The fixture task trees are inputs of inner pytest sessions, not tests of this session.
collect_ignore = ["fixtures"]


@pytest.fixture
def task_tree(pytester: pytest.Pytester):
    """Copy ``tests/fixtures/<name>`` into the pytester directory and return its path there."""

    def copy(name: str, dest: str = "tasks") -> Path:
        target = pytester.path / dest
        shutil.copytree(FIXTURES / name, target, dirs_exist_ok=True)
        return target

    return copy

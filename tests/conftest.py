"""Shared test helpers: fixture task trees copied into pytester sandboxes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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

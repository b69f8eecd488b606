"""Shared test helpers: fixture task trees copied into pytester sandboxes."""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import os
import pkgutil
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Imported before pytester snapshots sys.modules: inline_run drops every module first imported
# inside an inner session. Importing torch a second time in one process crashes it, and a plugin
# submodule re-imported next to its stale copy (still an attribute of the package) yields two
# versions of its exception classes, so an ``except`` in one module misses what the other raises.
import torch  # noqa: F401
import yaml  # noqa: F401

import pytest_cannbench

for _module in pkgutil.walk_packages(pytest_cannbench.__path__, prefix="pytest_cannbench."):
    importlib.import_module(_module.name)

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


# --------------------------------------------------------------------------------------------
# example submissions, built once and reused as prebuilt wheels

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WHEEL_CACHE = Path(tempfile.gettempdir()) / f"cannbench-test-wheels-{os.getuid()}"
_BUILD_OUTPUTS = {"build", "dist", "__pycache__"}


def _source_digest(source: Path) -> str:
    """Content hash of a submission's sources (and the toolchain): a stale wheel is never reused."""
    digest = hashlib.sha256(f"{sys.version}|{torch.__version__}".encode())
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if path.is_file() and not (_BUILD_OUTPUTS & set(rel.parts)) and ".egg-info" not in str(rel):
            digest.update(str(rel).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def prebuilt_submission(source: Path) -> Path:
    """A directory holding only ``dist/<wheel>`` built from ``source`` by its build.sh.

    Built at most once per machine and source version (xdist workers wait on a file lock), so
    inner sessions take the prebuilt path and the C++ example compiles once per test run at most.
    """
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    target = WHEEL_CACHE / f"{source.name}-{_source_digest(source)}"
    with open(WHEEL_CACHE / f"{source.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not list(target.glob("dist/cann_bench*.whl")):
            work = Path(tempfile.mkdtemp(prefix="cannbench-test-build-"))
            try:
                shutil.copytree(source, work / "src", ignore=shutil.ignore_patterns(*_BUILD_OUTPUTS, "*.egg-info"))
                env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
                done = subprocess.run(["bash", "build.sh"], cwd=work / "src", env=env, capture_output=True, text=True,
                                      timeout=900, check=False)
                wheels = list((work / "src" / "dist").glob("cann_bench*.whl"))
                if done.returncode != 0 or len(wheels) != 1:
                    raise RuntimeError(f"building {source} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
                (target / "dist").mkdir(parents=True, exist_ok=True)
                shutil.copy2(wheels[0], target / "dist" / wheels[0].name)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return target


@pytest.fixture(scope="session")
def prebuilt():
    """``prebuilt("broken/segfault")``: the example's prebuilt submission directory."""
    return lambda name: prebuilt_submission(EXAMPLES / name)


@pytest.fixture(scope="session")
def prebuilt_source():
    """``prebuilt_source(path)``: any submission source directory, built once like the examples."""
    return prebuilt_submission

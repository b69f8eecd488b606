"""The comparison's compiled kernel: how it is built, refused and reported (its figures: test_error_scan.py).

A judge builds ``scan_kernel.c`` with the system's compiler and uses it only after it agrees with the torch path
bit for bit; anything else leaves the torch path doing the work, and the header says why.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_cannbench import cbuild
from pytest_cannbench.judge import error_scan, scan_kernel
from pytest_cannbench.judge.scan_kernel import Kernel


def _library(tmp_path: Path, source: Path = scan_kernel.SOURCE) -> Kernel:
    path, how = cbuild.build(tmp_path, source)
    assert path is not None, how
    import ctypes

    return Kernel(ctypes.CDLL(str(path)))


def test_the_built_kernel_passes_its_self_test(tmp_path):
    assert scan_kernel.self_test(_library(tmp_path), error_scan.scan, error_scan.relative_errors) == ""


@pytest.mark.parametrize("change", [("1.0 / (ga + eps)", "1.0 / (ga + 2 * eps)"),  # another rounding of |g|
                                    ("int cancel = !small && ga < cancel_boundary",  # a region misdrawn
                                     "int cancel = !small && ga <= cancel_boundary"),
                                    ("fabs(A[i] - G[i]) * (1.0", "fabs(A[i] - G[i]) * (1.0000001")])
def test_a_kernel_whose_figures_differ_fails_the_self_test(tmp_path, change):
    """The self-test can fail: a kernel off by one rounding, one region boundary or in relative_errors alone."""
    old, new = change
    text = scan_kernel.SOURCE.read_text()
    assert old in text
    source = tmp_path / "changed.c"
    source.write_text(text.replace(old, new))
    problem = scan_kernel.self_test(_library(tmp_path, source), error_scan.scan, error_scan.relative_errors)
    assert problem.startswith(("scan,", "relative_errors,")), problem


def test_a_refused_kernel_leaves_the_torch_path_and_says_why(monkeypatch):
    loaded = scan_kernel._load(lambda kernel: "scan, torch.float32, native True, tolerances None")
    assert loaded.kernel is None and "self-test differed" in loaded.note
    line = scan_kernel.describe(loaded)
    assert "torch path" in line and "self-test differed" in line


def test_no_compiler_or_a_failing_one(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "false")
    path, why = cbuild.build(tmp_path, scan_kernel.SOURCE)
    assert path is None and why.startswith("false failed to build it")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    path, why = cbuild.build(tmp_path, scan_kernel.SOURCE)
    assert path is None and "could not build it" in why
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PATH", str(tmp_path))  # neither cc nor gcc
    assert cbuild.compiler() is None
    assert cbuild.build(tmp_path, scan_kernel.SOURCE) == (None, "no C compiler (cc, gcc or $CC)")


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv(scan_kernel.ENV_SWITCH, "0")
    loaded = scan_kernel._load(lambda kernel: pytest.fail("nothing is built"))
    assert loaded.kernel is None and scan_kernel.ENV_SWITCH in scan_kernel.describe(loaded)


def test_building_leaves_nothing_on_disk(tmp_path, monkeypatch):
    """The library is built in a private scratch directory, removed once loaded: no file a later process could
    replace, nothing in the user's caches."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    loaded = scan_kernel._load(lambda kernel: "")
    assert loaded.kernel is not None and "self-tested" in loaded.note
    assert os.listdir(tmp_path) == []
    assert "compiled kernel" in scan_kernel.describe(loaded)


def test_the_session_header_names_the_path():
    line = error_scan.kernel_line()
    assert line.startswith("cannbench: comparison: compiled kernel (built with ")


def test_a_controller_only_tries_the_build(monkeypatch, tmp_path):
    """An xdist controller never imports torch: its header line comes from a trial build, which says why not."""
    assert scan_kernel.trial_line().startswith("cannbench: comparison: compiled kernel (")
    monkeypatch.setenv("CC", "false")
    assert "torch path" in scan_kernel.trial_line() and "false failed to build it" in scan_kernel.trial_line()
    monkeypatch.setenv(scan_kernel.ENV_SWITCH, "0")
    assert scan_kernel.ENV_SWITCH in scan_kernel.trial_line()


def test_an_unusable_temporary_directory_leaves_the_torch_path(monkeypatch, tmp_path):
    """No writable TMPDIR (or one mounted noexec, where the library would not load): the torch path, said why."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    loaded = scan_kernel._load(lambda kernel: pytest.fail("nothing is built"))
    assert loaded.kernel is None and loaded.note.startswith("no scratch directory to build it in")
    assert "no scratch directory" in scan_kernel.trial_line()

"""Unit tests for timing/machine.py: the CPU's name and the last-level cache size, from fake kernel files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_cannbench.timing import machine


@pytest.mark.parametrize("text, model", [
    ("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6348 CPU\n\n"
     "processor\t: 1\nmodel name\t: other\n", "Intel(R) Xeon(R) Gold 6348 CPU"),
    ("processor\t: 0\nBogoMIPS\t: 200.00\nCPU implementer\t: 0x48\nCPU part\t: 0xd01\n\n",
     "arm implementer 0x48 part 0xd01"),  # Kunpeng (Ascend hosts): no model name
])
def test_cpu_model_from_cpuinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, model: str) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(
        cpuinfo if str(path) == "/proc/cpuinfo" else path, *a, **k))
    assert machine.cpu_model() == model


def fake_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sizes: list[str]) -> None:
    """CPU 0's cache directory with one ``index*/size`` file per entry of ``sizes``."""
    for i, size in enumerate(sizes):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "size").write_text(size + "\n")
    real_glob = machine.glob.glob
    monkeypatch.setattr(machine.glob, "glob", lambda pattern: real_glob(
        pattern.replace("/sys/devices/system/cpu/cpu0/cache", str(tmp_path))))


@pytest.mark.parametrize("sizes, expected", [
    (["32K", "1024K", "36864K"], 36864 << 10),  # L1, L2, L3: the largest wins
    (["48K", "2M"], 2 << 20),
    (["1G"], 1 << 30),
    (["512"], 512),  # no suffix: bytes
    (["garbage", "64K"], 64 << 10),  # unreadable entries are skipped
    ([], machine.DEFAULT_LLC_BYTES),  # nothing reported: the 32 MiB default
    (["", "x"], machine.DEFAULT_LLC_BYTES),
])
def test_last_level_cache_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sizes: list[str],
                                expected: int) -> None:
    fake_cache(tmp_path, monkeypatch, sizes)
    assert machine.last_level_cache_bytes() == expected


def test_module_imports_no_torch() -> None:
    code = ("import sys, pytest_cannbench.timing.machine, pytest_cannbench.timing.roofline, "
            "pytest_cannbench.timing.calibrate; "
            "bad = [m for m in ('torch', 'numpy') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)

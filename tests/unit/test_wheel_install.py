"""A submission's wheel is unpacked in the judge's process: nothing of it runs, and nothing lands outside the
candidate's private directory however its members are named or however large it unpacks."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from inner import make_wheel

from pytest_cannbench.submission import wheel_install


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_an_honest_wheel_lands_in_the_site_directory_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    wheel = make_wheel(tmp_path / "dist", {
        "cann_bench/__init__.py": f"open({str(marker)!r}, 'w').write('imported')\n",
        "zz_evil.pth": f"import os; open({str(marker)!r}, 'w').write('pth')\n",
    })
    count = wheel_install.install(wheel, tmp_path / "site", tmp_path / "data")
    assert count >= 3
    assert (tmp_path / "site" / "cann_bench" / "__init__.py").is_file()
    assert list((tmp_path / "site").glob("cann_bench-*.dist-info/RECORD"))
    assert not marker.exists()


@pytest.mark.parametrize("name", ["../escape.py", "cann_bench/../../escape.py", "/tmp/escape.py", "c:/escape.py",
                                  "cann_bench\\..\\escape.py"])
def test_a_member_named_outside_the_install_is_refused_before_anything_is_written(tmp_path: Path, name: str) -> None:
    wheel = _zip(tmp_path / "cann_bench-0.0.1-py3-none-any.whl", {name: b"x = 1\n", "cann_bench/__init__.py": b""})
    with pytest.raises(wheel_install.WheelRefused, match="outside the install directory"):
        wheel_install.install(wheel, tmp_path / "site", tmp_path / "data")
    assert not (tmp_path / "site").exists() and not (tmp_path / "escape.py").exists()


def test_an_archive_bomb_is_refused_by_its_declared_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheel_install, "MAX_BYTES", 1 << 20)
    wheel = _zip(tmp_path / "cann_bench-0.0.1-py3-none-any.whl", {"cann_bench/zeros.bin": bytes(2 << 20)})
    with pytest.raises(wheel_install.WheelRefused, match="unpacks to more than"):
        wheel_install.install(wheel, tmp_path / "site", tmp_path / "data")


def test_a_wheel_without_metadata_is_refused_with_its_name(tmp_path: Path) -> None:
    wheel = _zip(tmp_path / "cann_bench-0.0.1-py3-none-any.whl", {"cann_bench/__init__.py": b""})
    with pytest.raises(wheel_install.WheelRefused, match=r"cann_bench-0\.0\.1-py3-none-any\.whl did not install"):
        wheel_install.install(wheel, tmp_path / "site", tmp_path / "data")

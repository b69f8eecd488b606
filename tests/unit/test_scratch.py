"""Scratch directories carry their maker's pid; a later session removes those of makers that are gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pytest_cannbench import scratch


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_reap_removes_only_scratch_of_makers_that_are_gone(tmp_path: Path) -> None:
    dead, ns = _dead_pid(), os.stat("/proc/self/ns/pid").st_ino
    gone = [tmp_path / f"cannbench-worker-p{dead}n{ns}-ab_c1", tmp_path / f"cannbench-kb-state-p{dead}n{ns}-x9"]
    for d in gone:
        (d / "work-gw0").mkdir(parents=True)
        (d / "work-gw0" / "file").write_text("left by a killed session")
    kept = [tmp_path / f"cannbench-worker-p{os.getpid()}n{ns}-live1",  # its maker runs
            tmp_path / f"cannbench-worker-p{dead}n{ns + 1}-x1",  # another pid namespace: that pid is not ours
            tmp_path / "cannbench-worker-abc",  # an old-style name: not ours to judge
            tmp_path / f"other-worker-p{dead}n{ns}-x1"]
    for d in kept:
        d.mkdir()
    (tmp_path / f"cannbench-golden-p{dead}n{ns}-file").write_text("a file, not a directory")
    removed = scratch.reap(tmp_path)
    assert sorted(removed) == sorted(gone)
    assert not any(d.exists() for d in gone) and all(d.exists() for d in kept)
    assert (tmp_path / f"cannbench-golden-p{dead}n{ns}-file").exists()


def test_make_dir_names_its_maker(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    made = scratch.make_dir("kb-state")
    assert made.parent == tmp_path and made.name.startswith(f"cannbench-kb-state-p{os.getpid()}n")
    assert scratch.reap(tmp_path) == [] and made.is_dir()

"""Shared objects a submission builds while it runs (Triton's launchers in its private cache): the guard takes them
as the submission's own only inside the directory it was given, and only when their imports pass the symbol
checks the wheel's libraries get. Real shared objects, compiled here and loaded in a guarded process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_cannbench.guard.runtime import library_problems

CC = shutil.which("gcc") or shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")


def shared_object(path: Path, source: str) -> Path:
    src = path.with_suffix(".c")
    src.write_text(source)
    subprocess.run([CC, str(src), "-shared", "-fPIC", "-o", str(path)], check=True, capture_output=True)
    return path


CLEAN = "int launch(int x) { return x + 1; }\n"
BLAS = "extern void cblas_sgemm(void); void launch(void) { cblas_sgemm(); }\n"  # resolved only when called


def test_the_symbol_checks_of_a_library_built_at_run_time(tmp_path: Path) -> None:
    assert library_problems(str(shared_object(tmp_path / "clean.so", CLEAN))) == []
    found = library_problems(str(shared_object(tmp_path / "blas.so", BLAS)))
    assert len(found) == 1 and "cblas_sgemm" in found[0] and "BLAS" in found[0]
    (tmp_path / "junk.so").write_bytes(b"not an ELF file")
    assert "unreadable" in library_problems(str(tmp_path / "junk.so"))[0]


PROBE = textwrap.dedent("""
    import ctypes, json, os, sys
    from pytest_cannbench.guard.runtime import Guard
    own, elsewhere, site = sys.argv[1], sys.argv[2], sys.argv[3]
    guard = Guard("warn", "cpu", site, [])
    guard.own_dir(own)
    found = {}
    for path in (os.path.join(own, "clean.so"), os.path.join(own, "blas.so"), os.path.join(elsewhere, "clean.so")):
        ctypes.CDLL(path, mode=os.RTLD_LAZY)
        found[path] = [p["kind"] + ": " + p["detail"] for p in guard.report()]
    print(json.dumps(found))
""")


def test_only_libraries_in_the_own_directory_pass_and_only_clean_ones(tmp_path: Path) -> None:
    own, elsewhere, site = tmp_path / "triton-cache", tmp_path / "elsewhere", tmp_path / "site"
    for d in (own, elsewhere, site):
        d.mkdir()
    shared_object(own / "clean.so", CLEAN)
    shared_object(own / "blas.so", BLAS)
    shared_object(elsewhere / "clean.so", CLEAN)
    done = subprocess.run([sys.executable, "-c", PROBE, str(own), str(elsewhere), str(site)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found[str(own / "clean.so")] == []
    assert any(p.startswith("builtin_compute: blas.so imports cblas_sgemm") for p in found[str(own / "blas.so")])
    assert [p for p in found[str(elsewhere / "clean.so")] if "elsewhere" in p] == [
        f"host_library: loaded the shared object {elsewhere / 'clean.so'}"]

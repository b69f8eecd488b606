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

from pytest_cannbench.guard.maps import library_problems

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


LOADER = ("#include <dlfcn.h>\nint launch(void) { void *h = dlopen(\"libcuda.so.1\", RTLD_LAZY); "
          "return h != 0; }\n")


def test_a_launcher_that_finds_libcuda_with_dlopen_is_clean(tmp_path: Path) -> None:
    """Triton's launchers dlopen libcuda (seen on an H200: every Triton case failed on 'imports dlopen'); what they
    load is mapped, and the mapped-library check sees it."""
    assert library_problems(str(shared_object(tmp_path / "launcher.so", LOADER))) == []


@pytest.mark.parametrize("name, allowed", [
    ("cudaLaunchKernel", True), ("cudaMalloc", True), ("cudaStreamIsCapturing", True), ("cuLaunchKernelEx", True),
    ("cudaMemcpyAsync", True), ("hipLaunchKernel", True),
    ("aten::exp", False), ("cuda::softplus", False), ("cudnn_convolution", False), ("cublasSgemm_v2", False),
    ("custom", False), ("cudaX::op", False)])
def test_device_runtime_calls_are_not_builtin_compute(name: str, allowed: bool) -> None:
    """The profiler records the CUDA runtime's and driver's API calls beside the ops (seen on an H200 with torch
    2.11: every CUDA case failed on 'ran builtin op(s) cudaLaunchKernel'). Ops always have a namespace."""
    from pytest_cannbench.guard.builtin_ops import is_allowed

    assert is_allowed(name) is allowed


LOADED = textwrap.dedent("""
    import ctypes, os, sys
    for path in sys.argv[1:]:
        ctypes.CDLL(path, mode=os.RTLD_LAZY)
    print("loaded", flush=True)
    sys.stdin.read()
""")


def test_the_judge_reads_the_own_directory_itself(tmp_path: Path) -> None:
    """The judge's side of the same rule (guard.maps.foreign_findings, read from /proc/<pid>/maps of the frozen
    worker): seen on an H200, Triton's launcher modules in the worker's private cache were refused as
    host_library by the judge after the worker's guard had passed them."""
    from pytest_cannbench.guard.maps import foreign_findings

    own, elsewhere, site = tmp_path / "triton-cache", tmp_path / "elsewhere", tmp_path / "site"
    for d in (own, elsewhere, site):
        d.mkdir()
    paths = [shared_object(own / "clean.so", CLEAN), shared_object(own / "blas.so", BLAS),
             shared_object(elsewhere / "clean.so", CLEAN)]
    child = subprocess.Popen([sys.executable, "-c", LOADED, *map(str, paths)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdin is not None
    try:
        assert child.stdout.readline().strip() == "loaded"
        found = foreign_findings(child.pid, str(site), own_dirs=[str(own)])
        without = foreign_findings(child.pid, str(site))
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert sorted(found) == sorted([
        ("builtin_compute", "blas.so imports cblas_sgemm (BLAS)"),
        ("host_library", f"mapped code from outside its install: {elsewhere / 'clean.so'}")]), found
    assert sorted(d for _, d in without) == sorted(f"mapped code from outside its install: {p}" for p in paths)

"""The helper that runs Triton's compilers for a contained worker (``workers/triton_helper.py``): what it runs and
refuses, and the ``subprocess`` stand-in Triton's modules call, against a real helper process and real tools.

Triton's bundled ``ptxas`` is played by a script inside a stand-in triton directory; the C compiler is the
machine's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pytest_cannbench.workers.triton_helper import Proxy, Toolchain, compilers, refusal, uses_triton

CC = shutil.which("gcc") or shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")


@pytest.fixture
def triton_dir(tmp_path: Path) -> Path:
    tool = tmp_path / "triton" / "backends" / "nvidia" / "bin" / "ptxas"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n"
                    "if [ \"$1\" = --version ]; then echo 'Cuda compilation tools, release 12.8'; exit 0; fi\n"
                    "echo 'ptxas info: 0 bytes stack frame' >&2\n")
    tool.chmod(0o755)
    return tmp_path / "triton"


def test_only_tritons_toolchain_runs(triton_dir: Path, tmp_path: Path) -> None:
    tools = Toolchain.of(str(triton_dir), compilers())
    ptxas = str(triton_dir / "backends" / "nvidia" / "bin" / "ptxas")
    assert refusal([ptxas, "--gpu-name=sm_90", "k.ptx", "-o", "k.o"], tools) is None
    assert refusal([CC, "launcher.c", "-O3", "-shared", "-fPIC", "-o", "l.so", "-lcuda"], tools) is None
    assert refusal(["/sbin/ldconfig", "-p"], tools) is None
    assert "not part of Triton's toolchain" in refusal(["/bin/sh", "-c", "echo hi"], tools)
    assert "not part of Triton's toolchain" in refusal([sys.executable, "-c", "print(1)"], tools)
    assert "loads code" in refusal([CC, "x.c", "-fplugin=/tmp/evil.so"], tools)
    assert "loads code" in refusal([CC, "x.c", "-wrapper", "/bin/sh,-c,id"], tools)
    assert "loads code" in refusal([CC, "@/tmp/options"], tools)
    assert refusal(["/sbin/ldconfig", "/tmp"], tools) == "ldconfig only lists (-p)"
    assert refusal([ptxas, "@options"], tools) == "a response file"
    assert refusal("gcc x.c", tools) == "not a command line"
    # what was not there, or not the same file, when the helper started is not Triton's (a writable install)
    fake = tmp_path / "ldconfig"
    fake.write_text("#!/bin/sh\nid\n")
    fake.chmod(0o755)
    assert "not part of Triton's toolchain" in refusal([str(fake), "-p"], tools)
    added = triton_dir / "backends" / "nvidia" / "bin" / "helper"
    added.write_text("#!/bin/sh\nid\n")
    added.chmod(0o755)
    assert "not part of Triton's toolchain" in refusal([str(added)], tools)
    Path(ptxas).write_text("#!/bin/sh\nid  # replaced\n")
    assert "changed since the worker started" in refusal([ptxas, "k.ptx"], tools)


@pytest.fixture
def proxy(triton_dir: Path):
    helper = subprocess.Popen([sys.executable, "-m", "pytest_cannbench.workers.triton_helper", str(triton_dir),
                               *compilers()], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    yield Proxy(helper)
    assert helper.stdin is not None
    helper.stdin.close()
    assert helper.wait(timeout=10) == 0  # the helper ends when the worker closes its pipe


def test_the_calls_triton_makes_work_through_the_helper(proxy: Proxy, triton_dir: Path, tmp_path: Path) -> None:
    ptxas = str(triton_dir / "backends" / "nvidia" / "bin" / "ptxas")
    # knobs.NvidiaTool.from_path / compiler.get_ptxas_version
    assert b"release 12.8" in proxy.check_output([ptxas, "--version"], stderr=proxy.STDOUT)
    # compiler.make_cubin: stderr into a log file Triton opened for reading
    with tempfile.NamedTemporaryFile(mode="r", suffix=".log", dir=tmp_path, delete=False) as flog:
        done = proxy.run([ptxas, "k.ptx", "-o", "k.o"], check=True, close_fds=False, stderr=flog)
    assert done.returncode == 0 and "0 bytes stack frame" in Path(flog.name).read_text()
    # runtime.build._build: a real C compile of a launcher-like module
    src = tmp_path / "launcher.c"
    src.write_text("int launch(int x) { return x + 1; }\n")
    assert proxy.check_call([CC, str(src), "-O3", "-shared", "-fPIC", "-o", str(tmp_path / "l.so")],
                            stdout=proxy.DEVNULL) == 0
    assert (tmp_path / "l.so").is_file()
    # driver.libcuda_dirs
    if os.path.exists("/sbin/ldconfig"):
        assert b"libc.so" in proxy.check_output(["/sbin/ldconfig", "-p"])


def test_failures_and_refusals_reach_triton_as_subprocess_would_raise_them(proxy: Proxy, triton_dir: Path,
                                                                             tmp_path: Path) -> None:
    bad = tmp_path / "bad.c"
    bad.write_text("this is not C\n")
    with pytest.raises(subprocess.CalledProcessError) as failed:
        proxy.check_call([CC, str(bad), "-shared", "-o", str(tmp_path / "bad.so")])
    assert failed.value.returncode != 0
    with pytest.raises(PermissionError, match="may not run '/bin/sh'"):
        proxy.run(["/bin/sh", "-c", "id"])
    with pytest.raises(PermissionError, match="loads code"):
        proxy.check_call([CC, "x.c", "-fplugin=/tmp/evil.so"])
    with pytest.raises(FileNotFoundError):  # knobs.NvidiaTool.from_path catches it: "no such tool"
        proxy.check_output([str(triton_dir / "backends" / "nvidia" / "bin" / "ptxas-blackwell"), "--version"])


def test_a_submission_is_known_to_use_triton_by_its_imports(tmp_path: Path) -> None:
    (tmp_path / "cann_bench").mkdir()
    (tmp_path / "cann_bench" / "__init__.py").write_text("from .ops import softplus\n")
    (tmp_path / "cann_bench" / "ops.py").write_text("import torch\n")
    assert not uses_triton(str(tmp_path))
    (tmp_path / "cann_bench" / "ops.py").write_text("import torch\nimport triton.language as tl\n")
    assert uses_triton(str(tmp_path))

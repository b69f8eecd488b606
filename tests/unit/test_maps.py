"""Code mapped from outside the install: the pure rule over maps text, and the judge reading a real process."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_cannbench.guard.maps import executable_files, foreign_findings, foreign_mappings, trusted_prefixes

MAPS = textwrap.dedent("""\
    55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 131 /usr/bin/python3.11
    55d0c0a01000-55d0c0b00000 r-xp 00001000 08:01 131 /usr/bin/python3.11
    7f0000000000-7f0000100000 r-xp 00000000 08:01 200 /venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so
    7f0000100000-7f0000200000 r-xp 00000000 08:01 201 /usr/lib/x86_64-linux-gnu/libc.so.6
    7f0000200000-7f0000201000 r-xp 00000000 08:01 300 /session/site/cann_bench/_C.so
    7f0000300000-7f0000301000 r-xp 00000000 08:01 301 /session/tmp/kernel.bin
    7f0000301000-7f0000302000 r--p 00000000 08:01 301 /session/tmp/data.bin
    7f0000400000-7f0000401000 r-xp 00000000 00:01 400 /memfd:jit (deleted)
    7f0000500000-7f0000501000 r-xp 00000000 08:01 500 /session/site/cann_bench/gone.so (deleted)
    7f0000600000-7f0000601000 rwxp 00000000 00:00 0
    7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0 [vdso]
""")


def test_foreign_mappings_over_maps_text():
    allowed = ["/usr", "/venv/lib/python3.11/site-packages/torch", "/venv/"]
    assert "/session/tmp/data.bin" not in executable_files(MAPS)  # data, not code
    assert foreign_mappings(MAPS, "/session/site", allowed) == [
        "/session/tmp/kernel.bin", "/memfd:jit (deleted)", "/session/site/cann_bench/gone.so (deleted)"]
    # "/" would trust everything: it is dropped, never a root
    assert "/session/tmp/kernel.bin" in foreign_mappings(MAPS, None, ["/"])
    assert "/session/site/cann_bench/_C.so" in foreign_mappings(MAPS, None, allowed)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_the_judge_reads_a_real_process_maps(tmp_path):
    (tmp_path / "k.c").write_text("int k(void) { return 7; }\n")
    lib = tmp_path / "scratch" / "kernel.bin"
    lib.parent.mkdir()
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "k.c")], check=True)
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(lib, site / "own.bin")
    code = (f"import ctypes, sys\nctypes.CDLL({str(lib)!r}); ctypes.CDLL({str(site / 'own.bin')!r})\n"
            "print('ready', flush=True)\nsys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        found = foreign_findings(child.pid, str(site))
    finally:
        child.communicate("", timeout=30)
    assert found == [("host_library", f"mapped code from outside its install: {lib.resolve()}")]
    assert foreign_findings(child.pid, str(site)) == []  # gone: nothing to read
    assert str(Path(sys.base_prefix).resolve()) in trusted_prefixes()

"""The ELF reader as the loader sees a file: by magic number, through PT_DYNAMIC, with or without section
headers, both hash styles; unreadable ELF files are refused in block mode by the build's symbol check."""

from __future__ import annotations

import shutil
import struct
import subprocess
import textwrap
from pathlib import Path

import pytest

from pytest_cannbench.guard.elf_symbols import read_imports, scan_libraries
from pytest_cannbench.outcome import BUILD_OK
from pytest_cannbench.submission.build import SubmissionState, check_symbols

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

SOURCE = textwrap.dedent("""
    #include <math.h>
    void cblas_sgemm(void);
    void *dlsym(void *, const char *);
    float mine(float x) { return expf(x); }
    void delegate(void) { cblas_sgemm(); dlsym(0, "sgemm_"); }
""")


def strip_section_headers(path: Path) -> None:
    """What a submission does to hide from a section-header reader: e_shoff, e_shnum and e_shstrndx zeroed
    (the loader never reads them, so the library still loads)."""
    data = bytearray(path.read_bytes())
    assert data[4] == 2  # 64-bit
    struct.pack_into("<Q", data, 0x28, 0)  # e_shoff
    struct.pack_into("<HH", data, 0x3C, 0, 0)  # e_shnum, e_shstrndx
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("elf")
    (where / "k.c").write_text(SOURCE)
    (where / "blas.c").write_text("void openblas_stub(void) {}\n")
    stub = where / "libopenblas.so.0"
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libopenblas.so.0", "-o", str(stub),
                    str(where / "blas.c")], check=True)
    out = {}
    for style in ("gnu", "sysv"):
        lib = where / f"libk-{style}.so"
        subprocess.run(["cc", "-shared", "-fPIC", f"-Wl,--hash-style={style}", "-o", str(lib), str(where / "k.c"),
                        "-lm", "-Wl,--no-as-needed", str(stub)], check=True)
        out[style] = lib
    return out


@pytest.mark.parametrize("style", ["gnu", "sysv"])
def test_dynamic_segment_reads_the_same_without_section_headers(built, style, tmp_path):
    lib = built[style]
    before = read_imports(lib)
    assert {"expf", "cblas_sgemm", "dlsym"} <= {n.split("@")[0] for n in before.undefined}
    assert "mine" not in before.undefined and "libopenblas.so.0" in before.needed
    bare = tmp_path / lib.name
    shutil.copy(lib, bare)
    strip_section_headers(bare)
    after = read_imports(bare)
    assert sorted(after.undefined) == sorted(set(before.undefined)) and after.needed == before.needed


def test_every_elf_counts_whatever_its_name(built, tmp_path):
    pkg = tmp_path / "site" / "cann_bench"
    pkg.mkdir(parents=True)
    shutil.copy(built["gnu"], pkg / "kernel.bin")  # what torch.ops.load_library loads happily
    shutil.copy(built["sysv"], pkg / "data")
    strip_section_headers(pkg / "data")
    (pkg / "notes.so").write_text("not an ELF file, whatever its name")
    problems, unreadable = scan_libraries(tmp_path / "site")
    assert not unreadable
    by_file = {(Path(p.library).name, p.symbol) for p in problems}
    for name in ("kernel.bin", "data"):
        assert {(name, "cblas_sgemm"), (name, "dlsym"), (name, "the library libopenblas.so.0")} <= by_file
    assert all(Path(p.library).name != "notes.so" for p in problems)


@pytest.mark.parametrize("damage", ["truncated", "dynamic_outside"])
def test_an_unreadable_elf_is_a_guard_problem_naming_the_file(built, tmp_path, damage):
    site = tmp_path / "site"
    site.mkdir()
    data = bytearray(built["gnu"].read_bytes())
    if damage == "truncated":
        data = data[:300]
    else:  # program headers pointing past the end of the file
        struct.pack_into("<Q", data, 0x20, len(data) + 4096)
    (site / "_C.cpython-311-x86_64-linux-gnu.so").write_bytes(bytes(data))
    state = SubmissionState(status=BUILD_OK, site_dir=str(site))
    check_symbols(state)
    assert state.scan["symbols"]["unreadable"]
    assert any(kind == "builtin_compute" and "cannot read" in detail and "_C.cpython" in detail
               for kind, detail in state.guard_problems), state.guard_problems

"""Code patched or replaced in a process's memory, found from outside it (guard.code_pages).

A small C program patches itself the ways a submission's native code could (libc's ``clock_gettime`` text made
writable and rewritten, the vDSO written through ``/proc/self/mem``, a page of libc's text replaced by anonymous
memory or by another file) and waits; the judge's reading must name each, and an honest process (a C program,
Python with torch and a large mapped region) must have none.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_cannbench.guard import code_pages

PATCHER = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int fake(clockid_t id, struct timespec* ts) { (void)id; ts->tv_sec = 1; ts->tv_nsec = 0; return 0; }

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "honest";
  unsigned char* entry = (unsigned char*)&clock_gettime;
  void* page = (void*)((uintptr_t)entry & ~(uintptr_t)4095);
  if (!strcmp(mode, "patch_libc")) {  /* movabs rax, fake; jmp rax */
    void* target = (void*)fake;
    if (mprotect(page, 8192, PROT_READ | PROT_WRITE | PROT_EXEC)) return 2;
    entry[0] = 0x48; entry[1] = 0xb8; memcpy(entry + 2, &target, 8); entry[10] = 0xff; entry[11] = 0xe0;
    mprotect(page, 8192, PROT_READ | PROT_EXEC);
  } else if (!strcmp(mode, "patch_vdso")) {  /* FOLL_FORCE writes through /proc/self/mem copy the page */
    unsigned char* vdso = (unsigned char*)getauxval(AT_SYSINFO_EHDR);
    int fd = open("/proc/self/mem", O_RDWR);
    unsigned char c = vdso[64];
    if (fd < 0 || pwrite(fd, &c, 1, (off_t)(uintptr_t)(vdso + 64)) != 1) return 3;
    close(fd);
  } else if (!strcmp(mode, "replace_anon") || !strcmp(mode, "replace_file")) {
    unsigned char copy[4096];
    memcpy(copy, page, 4096);
    int fd = !strcmp(mode, "replace_file") ? open(argv[0], O_RDONLY) : -1;
    void* got = fd >= 0 ? mmap(page, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd, 0)
                        : mmap(page, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (got != page) return 4;
    if (fd < 0) { memcpy(page, copy, 4096); mprotect(page, 4096, PROT_READ | PROT_EXEC); }
  }
  printf("ready\n");
  fflush(stdout);
  getchar();
  return 0;
}
"""


@pytest.fixture(scope="module")
def patcher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or platform.machine() != "x86_64":
        pytest.skip("needs a C compiler on x86-64")
    work = tmp_path_factory.mktemp("patcher")
    (work / "patcher.c").write_text(PATCHER)
    subprocess.run([cc, "-O1", "-o", str(work / "patcher"), str(work / "patcher.c")], check=True)
    return work / "patcher"


def findings_of(argv: list[str], ready: str = "ready") -> list[tuple[str, str]]:
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        assert line == ready, (line, child.poll())
        return code_pages.findings(child.pid, expect_vdso=code_pages.vdso_expected())
    finally:
        child.kill()
        child.wait()


def test_honest_program_has_none(patcher: Path) -> None:
    assert findings_of([str(patcher), "honest"]) == []


@pytest.mark.parametrize("mode, words", [
    ("patch_libc", ["code patched in memory", "libc", "private copies", "byte(s) differ from the file"]),
    ("patch_vdso", ["code patched in memory", "[vdso]"]),
    ("replace_anon", ["code replaced in memory", "libc", "replaced by anonymous memory"]),
    ("replace_file", ["code replaced in memory", "libc", "replaced by patcher"]),
])
def test_patched_or_replaced_code_is_tampering(patcher: Path, mode: str, words: list[str]) -> None:
    found = findings_of([str(patcher), mode])
    assert found and all(kind == "api_tampered" for kind, _ in found), found
    text = " ".join(detail for _, detail in found)
    assert all(word in text for word in words), found


def test_honest_torch_process_has_none_and_the_cost() -> None:
    code = textwrap.dedent("""
        import mmap, sys, torch
        x = torch.randn(1 << 20)
        (x.exp() + x.sin()).sum()
        region = mmap.mmap(-1, 256 << 20)
        region[::4096] = b"\\1" * (len(region) // 4096)
        print("ready", flush=True)
        sys.stdin.read()
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        expect = code_pages.vdso_expected()
        spent = []
        for _ in range(5):
            t0 = time.perf_counter()
            assert code_pages.findings(child.pid, expect_vdso=expect) == []
            spent.append(time.perf_counter() - t0)
        assert min(spent) < 0.05, spent  # a few ms here (docs/security.md quotes the figure)
    finally:
        child.kill()
        child.wait()


MAPS = """\
7f0000000000-7f0000028000 r--p 00000000 08:01 100 /usr/lib/libc.so.6
7f0000028000-7f00001bd000 r-xp 00028000 08:01 100 /usr/lib/libc.so.6
7f00001bd000-7f0000215000 r--p 001bd000 08:01 100 /usr/lib/libc.so.6
7f0000215000-7f0000216000 ---p 00215000 08:01 100 /usr/lib/libc.so.6
7f0000216000-7f000021a000 r--p 00215000 08:01 100 /usr/lib/libc.so.6
7f000021a000-7f000021c000 rw-p 00219000 08:01 100 /usr/lib/libc.so.6
7f000021c000-7f0000229000 rw-p 00000000 00:00 0
7f0000300000-7f0000301000 r-xp 00000000 00:00 0
7f0000301000-7f0000302000 r--p 00000000 08:01 200 /usr/lib/libm.so.6
7f0000302000-7f0000380000 r-xp 00001000 08:01 200 /usr/lib/libm.so.6
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]
"""


def test_honest_layout_is_not_replaced() -> None:
    """A loader's gap (the file's own ---p), the bss after the data and a JIT page just below a library's first
    mapping (which starts at offset 0) are all honest."""
    assert code_pages.replaced(code_pages.parse_maps(MAPS)) == []


def test_replaced_layouts() -> None:
    inside = MAPS.replace("7f0000028000-7f00001bd000 r-xp 00028000 08:01 100 /usr/lib/libc.so.6\n",
                          "7f0000028000-7f0000100000 r-xp 00028000 08:01 100 /usr/lib/libc.so.6\n"
                          "7f0000100000-7f0000101000 r-xp 00000000 00:00 0\n"
                          "7f0000101000-7f00001bd000 r-xp 00101000 08:01 100 /usr/lib/libc.so.6\n")
    assert ["libc.so.6's code at 0x7f0000100000-0x7f0000101000 was replaced by anonymous memory (r-xp)"] == \
        code_pages.replaced(code_pages.parse_maps(inside))
    front = MAPS.replace("7f0000301000-7f0000302000 r--p 00000000 08:01 200 /usr/lib/libm.so.6\n", "").replace(
        "7f0000300000-7f0000301000 r-xp", "7f0000300000-7f0000302000 r-xp")
    assert "libm.so.6's code" in " ".join(code_pages.replaced(code_pages.parse_maps(front)))
    no_vdso = MAPS.replace("7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]\n", "")
    assert code_pages.replaced(code_pages.parse_maps(no_vdso), expect_vdso=True) == [
        "the vDSO (the kernel's clock code) was unmapped or replaced"]
    assert code_pages.replaced(code_pages.parse_maps(no_vdso), expect_vdso=False) == []

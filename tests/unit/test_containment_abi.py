"""The seccomp filter's second-layer rules, tried by real machine code: the i386 table through ``int $0x80``,
x32 numbers and io_uring, from a shared object compiled here and called in a contained process."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_cannbench.guard import containment

pytestmark = [pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 ABIs"),
              pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")]

ESCAPES = textwrap.dedent(r"""
    #include <errno.h>
    #include <string.h>
    #include <unistd.h>
    #include <sys/syscall.h>

    /* i386 syscall through int $0x80: the kernel answers -errno in eax */
    static long i386_call(long nr, long a) {
        long ret;
        __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a) : "memory");
        return (int)ret;
    }
    static long native(long r) { return r == -1 ? -errno : r; }

    long i386_getpid(void) { return i386_call(20, 0); }
    long i386_fork(void) {
        long pid = i386_call(2, 0);
        if (pid == 0) i386_call(1, 0);  /* the child leaves at once through i386 exit */
        return pid;
    }
    long x32_getpid(void) { return native(syscall(39 | 0x40000000)); }
    long uring_setup(void) {
        unsigned char params[120];
        memset(params, 0, sizeof params);
        long fd = native(syscall(425, 1, params));
        if (fd >= 0) close(fd);
        return fd;
    }
""")

PROBE = textwrap.dedent("""
    import ctypes, json, os, sys
    from pytest_cannbench.guard import containment
    lib = ctypes.CDLL(sys.argv[1])
    out = {"status": containment.install_filter() if sys.argv[2] == "contain" else "off"}
    for name in ("i386_getpid", "i386_fork", "x32_getpid", "uring_setup"):
        if name == "i386_fork" and out["status"] == "off":
            continue  # uncontained, a real fork of this process: not needed to make the point
        fn = getattr(lib, name)
        fn.restype = ctypes.c_long
        out[name] = fn()
    out["pid"] = os.getpid()
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def escapes(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("abi")
    (where / "escapes.c").write_text(ESCAPES)
    lib = where / "libescapes.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(where / "escapes.c")], check=True)
    return lib


def probe(lib: Path, mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, str(lib), mode], capture_output=True, text=True, timeout=60,
                          cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_foreign_abi_x32_and_io_uring_are_refused(escapes):
    out = probe(escapes, "contain")
    if not out["status"].startswith("on"):
        pytest.skip(f"seccomp is not available here: {out['status']}")
    eperm = -containment.EPERM
    assert out["i386_getpid"] == eperm and out["i386_fork"] == eperm  # the i386 table, refused as a whole
    assert out["x32_getpid"] == eperm  # the filter answers before the kernel could say ENOSYS
    assert out["uring_setup"] == eperm


def test_the_same_code_reaches_the_kernel_uncontained(escapes):
    """The control: without the filter these calls get the kernel's own answers, so the refusals above are
    the filter's, not a kernel without i386 emulation, x32 or io_uring."""
    out = probe(escapes, "off")
    assert out["i386_getpid"] in (out["pid"], -containment.ENOSYS)
    assert out["x32_getpid"] in (out["pid"], -containment.ENOSYS, -22)  # EINVAL: x32 off at boot
    assert out["uring_setup"] >= 0 or out["uring_setup"] in (-containment.ENOSYS, -containment.EPERM)
    assert -containment.EPERM not in (out["i386_getpid"], out["x32_getpid"])


def test_program_refuses_foreign_arch_first():
    """The program's head, read as data: a foreign arch jumps to the refusal, x32 numbers are tested next."""
    arch, nr = containment._ARCHES["x86_64"]
    prog = containment.build_program(arch, nr, 1234, allow_processes=True)
    deny = containment._stmt(containment._RET_K, containment._ERRNO | containment.EPERM)
    assert prog[1] == containment._jump(containment._JEQ_K, arch, 1, 0) and prog[2] == deny
    assert prog[4] == containment._jump(containment._JSET_K, containment.X32_SYSCALL_BIT, 0, 1) and prog[5] == deny
    for name in containment.IO_URING:
        assert containment._jump(containment._JEQ_K, nr[name], 0, 1) in prog
    arm = containment.build_program(*containment._ARCHES["aarch64"], 1234, allow_processes=True)
    assert containment._jump(containment._JSET_K, containment.X32_SYSCALL_BIT, 0, 1) not in arm

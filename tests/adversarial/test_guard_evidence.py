"""Attacks on the guard's evidence (issue 16): a blinded or fooled profiler, helpers rebound at import, compiled
kernels hidden from the symbol scan, doors out of the seccomp filter; and the honest kernel in a private op
namespace, which keeps its full marks.

The compiled parts are built once per machine and source (cached like the example wheels), straight with the
C++ compiler against torch's headers, and packed into hand-made wheels, so one build serves several attacks.
"""

from __future__ import annotations

import base64
import hashlib
import platform
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
from attacks import REAL
from compiled import compile_library
from test_adversarial import CPP, SOFTPLUS, assert_scores_zero, grade, python_submission

HERE = Path(__file__).resolve().parent / "guard_evidence"
EXAMPLE_CSRC = Path(__file__).resolve().parents[2] / "examples" / "cpp_cpu" / "csrc"

pytestmark = pytest.mark.skipif(shutil.which("c++") is None or shutil.which("cc") is None,
                                reason="no C/C++ compiler")

# ------------------------------------------------------------------ Python attacks on the guard (block mode)

RF_SWITCH = ("    torch.autograd._enable_record_function(False)\n"
             f"    try:\n        return {REAL}\n    finally:\n        torch.autograd._enable_record_function(True)\n")
PATCH_PARSING = ("import torch.autograd.profiler as _p\n_parse = _p.profile._parse_kineto_results\n\n\n"
                 "def _hide(self, *a, **k):\n"
                 "    return [e for e in _parse(self, *a, **k) if not e.name.startswith('aten::')]\n"
                 "\n\n_p.profile._parse_kineto_results = _hide\n")
PATCH_EVENT_NAMES = ("_name = torch._C._autograd._KinetoEvent.name\n"
                     "torch._C._autograd._KinetoEvent.name = lambda self: ('aten::empty' if _name(self).startswith("
                     "'aten::') else _name(self))\n")
REBIND_HELPERS = ("import pytest_cannbench.guard.builtin_ops as _b\nimport pytest_cannbench.guard.runtime as _g\n"
                  "_b.is_allowed = lambda op, own=None: True\n"
                  "_g.builtin_ops_inside = lambda events: (sum(e[0] == _g.MARK for e in events), [])\n"
                  "try:\n    import pytest_cannbench.guard.recorder as _r\n"
                  "    _r.read_trace = lambda events, allowed: _r.Trace(sum(e[0] == _r.MARK for e in events), "
                  "sum(e[0] == _r.MARK for e in events), [])\n"
                  "except ImportError:  # a guard without its own recorder\n    pass\n")

GUARD_ATTACKS = {
    # switches op recording off around its builtin compute, on again before returning
    "record_function_off": ("", RF_SWITCH, {"api_tampered"}),
    # the profiler's result parsing drops every ATen event (what the guard read until now)
    "profiler_parsing_patched": (PATCH_PARSING, f"    return {REAL}\n", {"builtin_compute", "api_tampered"}),
    # the trace's own event names rewritten at the C binding
    "event_names_patched": (PATCH_EVENT_NAMES, f"    return {REAL}\n", {"builtin_compute", "api_tampered"}),
    # ATen's kernel through OpOverload.redispatch, which skips RecordFunction
    "redispatch_from_python": ("_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)\n",
                               "    return torch.ops.aten.softplus.default.redispatch(_KEYS, x, beta, threshold)\n",
                               {"builtin_compute"}),
    # the guard's helpers rebound at import to find nothing
    "guard_helpers_rebound": (REBIND_HELPERS, f"    return {REAL}\n", {"api_tampered"}),
}


@pytest.mark.parametrize("name", list(GUARD_ATTACKS))
def test_guard_attack_scores_zero(name, pytester, capsys, task_tree):
    prelude, body, expect = GUARD_ATTACKS[name]
    code = "import torch\n" + prelude + "\n\ndef softplus(x, beta=1.0, threshold=20.0):\n" + body
    run, softplus, _ = grade(pytester, capsys, task_tree, python_submission(pytester, code), "--cann-guard=block")
    assert_scores_zero(run, softplus, expect)


# ------------------------------------------------------------------ compiled parts, built once


_compile = compile_library


def strip_section_headers(data: bytes) -> bytes:
    """e_shoff, e_shnum and e_shstrndx zeroed: the loader never reads them, a section-header reader sees nothing."""
    out = bytearray(data)
    assert out[:4] == b"\x7fELF" and out[4] == 2 and out[5] == 1  # 64-bit little-endian
    struct.pack_into("<Q", out, 0x28, 0)
    struct.pack_into("<HH", out, 0x3C, 0, 0)
    return bytes(out)


def binary_wheel(source: Path, files: dict[str, bytes]) -> Path:
    """A cann_bench wheel with binary members (a pure wheel tag: pip --target takes it as it is)."""
    dist = source / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    info = "cann_bench-0.0.1.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = b"Metadata-Version: 2.1\nName: cann_bench\nVersion: 0.0.1\n"
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}"
              for n, b in files.items()] + [f"{info}/RECORD,,"]
    with zipfile.ZipFile(dist / "cann_bench-0.0.1-py3-none-any.whl", "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return source


@pytest.fixture(scope="module")
def at_cpu_kernel() -> bytes:
    """cann_bench::softplus delegating to at::cpu::softplus (the direct_kernel attack's source)."""
    return _compile("torch", CPP / "direct_kernel" / "csrc" / "ops.cpp").read_bytes()


@pytest.fixture(scope="module")
def own_namespace_kernel() -> bytes:
    return _compile("torch", HERE / "own_namespace.cpp", f"-I{EXAMPLE_CSRC}").read_bytes()


LOAD_AT_CPU = ("from pathlib import Path\n\nimport torch\n\n"
               "torch.ops.load_library(str(Path(__file__).with_name({name!r})))\n"
               "softplus = torch.ops.cann_bench.softplus\n")


@pytest.mark.parametrize("variant", ["named_bin", "section_headers_zeroed"])
def test_hidden_compiled_kernel_scores_zero(variant, at_cpu_kernel, pytester, capsys, task_tree):
    """at::cpu::softplus in a library the old scan skipped: named ``*.bin``, or with its section headers gone."""
    name, data = ("kernel.bin", at_cpu_kernel) if variant == "named_bin" else \
        ("_C.so", strip_section_headers(at_cpu_kernel))
    init = LOAD_AT_CPU.format(name=name).encode()
    source = binary_wheel(Path(pytester.path) / "sub", {"cann_bench/__init__.py": init, f"cann_bench/{name}": data})
    run, softplus, board = grade(pytester, capsys, task_tree, source, "--cann-guard=block")
    assert_scores_zero(run, softplus, {"builtin_compute"})
    assert any("at::cpu::softplus" in p and name in p for p in board["submission"]["scan"]["symbols"]["problems"])
    assert f"{name} imports at::cpu::softplus" in run.cases["softplus[01]"].cann["message"]


def test_honest_kernel_in_a_private_namespace_keeps_full_marks(own_namespace_kernel, pytester, capsys, task_tree):
    init = ("from pathlib import Path\n\nimport torch\n\n"
            "torch.ops.load_library(str(Path(__file__).with_name('_kernels.so')))\n\n\n"
            "def softplus(x, beta=1.0, threshold=20.0):\n"
            "    return torch.ops.myns.softplus_kernel(x, beta, threshold)\n")
    source = binary_wheel(Path(pytester.path) / "sub", {"cann_bench/__init__.py": init.encode(),
                                                        "cann_bench/_kernels.so": own_namespace_kernel})
    run, softplus, board = grade(pytester, capsys, task_tree, source, "--cann-guard=block")
    assert all(run.cases[name].outcome == "passed" for name in SOFTPLUS), {
        name: run.cases[name].cann.get("message") for name in SOFTPLUS}
    assert softplus["compile_score"] == 20.0 and softplus["function_score"] == 30.0
    assert softplus["performance_score"] > 0
    assert not board["submission"]["scan"]["symbols"]["problems"]
    assert not any(w.startswith("guard") for name in SOFTPLUS for w in run.cases[name].cann["warnings"])


def test_redispatch_from_cpp_scores_zero(pytester, capsys, task_tree):
    """c10::Dispatcher::findSchemaOrThrow(...).redispatch(...) from C++: no RecordFunction, only c10 symbols.
    The CPU key's slot holds the guard's refusing kernel (guard/forbid.py), and the symbol allowlist refuses the
    dispatcher lookup before anything runs (guard/torch_imports.py)."""
    lib = _compile("torch", HERE / "redispatch.cpp")
    source = binary_wheel(Path(pytester.path) / "sub", {
        "cann_bench/__init__.py": LOAD_AT_CPU.format(name="_C.so").encode(), "cann_bench/_C.so": lib.read_bytes()})
    run, softplus, _ = grade(pytester, capsys, task_tree, source, "--cann-guard=block")
    assert_scores_zero(run, softplus, {"builtin_compute"})
    message = run.cases["softplus[01]"].cann["message"]
    assert "aten::softplus refused at the dispatcher" in message and "a dispatcher lookup" in message, message


# ------------------------------------------------------------------ doors out of the seccomp filter

ESCAPE = ("import ctypes\nfrom pathlib import Path\n\nimport torch\n\n"
          "_lib = ctypes.CDLL(str(Path(__file__).with_name('escape.so')))\n\n\n"
          "def softplus(x, beta=1.0, threshold=20.0):\n"
          "    if _lib.doors() == 0:  # every door refused: the payload never ran, nothing to return\n"
          "        return torch.zeros_like(x)\n"
          f"    return {REAL}  # stands for what the payload brings back\n")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the i386 and x32 doors are x86-64's")
def test_foreign_abi_x32_and_io_uring_doors_score_zero(pytester, capsys, task_tree):
    """Graded with the guard off, like every attack on containment: the filter holds on its own."""
    lib = _compile("c", HERE / "escape.c")
    source = binary_wheel(Path(pytester.path) / "sub", {"cann_bench/__init__.py": ESCAPE.encode(),
                                                        "cann_bench/escape.so": lib.read_bytes()})
    run, softplus, _ = grade(pytester, capsys, task_tree, source, "--cann-guard=off")
    assert_scores_zero(run, softplus, {"precision_mismatch"})

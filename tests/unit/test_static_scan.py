"""Unit tests for the static scan (guard/scan*.py): one positive and one near-miss negative per rule, the scan's
bookkeeping (syntax errors, size and count caps, skipped directories, symbolic links), determinism, the allowlist
shared with the runtime guard, and the repository's own examples.

A positive source marks the line that must be reported with a ``HIT`` comment; the test checks that exact line.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_cannbench.guard import builtin_ops
from pytest_cannbench.guard.scan import RULES, Hit, flags_of, scan_source, scan_tree, summarize
from pytest_cannbench.guard.scan_names import ALLOWED_NAMES, COMPUTE_NAMES, FLAGGED_COPIES, SCAN_ALSO_PASSES

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def marked(text: str) -> set[int]:
    return {n for n, line in enumerate(text.splitlines(), start=1) if "HIT" in line}


def lines_of(hits: list[Hit], rule: str) -> set[int]:
    return {h.line for h in hits if h.rule == rule}


# ---- Python rules: (rule, positive with a "# HIT" line, near-miss negative) -----------------------------------------

PY_CASES = [
    ("frame_walk", "import sys\nf = sys._getframe(1)  # HIT\n", "import sys\nf = sys.getrecursionlimit()\n"),
    ("frame_walk", "from sys import _getframe  # HIT\n", "from sys import getsizeof\n"),
    ("frame_walk", "import inspect\nst = inspect.stack()  # HIT\n", "import inspect\nsig = inspect.signature(len)\n"),
    ("frame_walk", "def f(frame):\n    return frame.f_back.f_locals['g']  # HIT\n",
     "def f(node):\n    return node.back.locals['g']\n"),
    ("frame_walk", "try:\n    pass\nexcept Exception as e:\n    fr = e.__traceback__.tb_frame  # HIT\n",
     "try:\n    pass\nexcept Exception as e:\n    tb = e.__traceback__\n"),
    ("frame_walk", "f = getattr(object(), 'f_back')  # HIT\n", "f = getattr(object(), 'back')\n"),
    ("gc_walk", "import gc\nobjs = gc.get_objects()  # HIT\n", "import gc\ngc.collect()\n"),
    ("gc_walk", "from gc import get_referrers as refs  # HIT\n", "from gc import disable\n"),
    ("sys_modules", "import sys\nsys.modules['thresholds'].LIMIT = 1e9  # HIT\n",
     "import sys\nsys.path.insert(0, 'x')\n"),
    ("sys_modules", "import importlib\nimportlib.reload(importlib)  # HIT\n",
     "import importlib\nimportlib.invalidate_caches()\n"),
    ("sys_modules", "__builtins__['len'] = print  # HIT\n", "size = len([])\n"),
    ("sys_modules", "import builtins\nbuiltins.len = print  # HIT\n", "import builtins\nlength = builtins.len\n"),
    ("threading", "import threading\nt = threading.Thread(target=print)  # HIT\n",
     "import threading\nlock = threading.Lock()\n"),
    ("threading", "import subprocess  # HIT\n", "import shlex\n"),
    ("threading", "from concurrent.futures import ThreadPoolExecutor  # HIT\n", "from functools import partial\n"),
    ("threading", "import multiprocessing as mp  # HIT\n", "import queue\n"),
    ("threading", "import os\npid = os.fork()  # HIT\n", "import os\npid = os.getpid()\n"),
    ("threading", "import os\nos.system('true')  # HIT\n", "import os\nhere = os.getcwd()\n"),
    ("threading", "import pty  # HIT\n", "import tty\n"),
    ("threading", "import torch\ns = torch.cuda.Stream()  # HIT\n", "import torch\nn = torch.cuda.device_count()\n"),
    ("ctypes", "import ctypes  # HIT\n", "import struct\n"),
    ("ctypes", "from cffi import FFI  # HIT\n", "from fractions import Fraction\n"),
    ("ctypes", "import _ctypes\nh = _ctypes.dlopen('libm.so.6')  # HIT\n",
     "import os\nh = os.path.basename('libm.so.6')\n"),
    ("timing_patch", "import time\ntime.perf_counter = lambda: 0.0  # HIT\n",
     "import time\nt0 = time.perf_counter()\n# time.perf_counter = lambda: 0.0\n"),
    ("timing_patch", "import time as t\nt.monotonic = None  # HIT\n", "import time as t\nnow = t.monotonic()\n"),
    ("timing_patch", "import time\nsetattr(time, 'time', lambda: 0)  # HIT\n",
     "import time\nclock = getattr(time, 'time')\n"),
    ("timing_patch", "import torch\ntorch.cuda.Event.elapsed_time = lambda s, e: 1e-3  # HIT\n",
     "import torch\nev = torch.cuda.Event(enable_timing=True)\n"),
    ("timing_patch", "import torch\ntorch.npu.synchronize = lambda *a: None  # HIT\n",
     "import torch\ntorch.npu.synchronize()\n"),
    ("timing_patch", "import torch\ntorch.profiler.profile = object  # HIT\n",
     "import torch\nprof = torch.profiler.profile()\n"),
    ("timing_patch", "import sys\nsys.modules['time'].perf_counter_ns = int  # HIT\n",
     "text = 'time.perf_counter = None'\n"),
    ("precision_cast", "def f(x):\n    return x.half()  # HIT\n", "def f(x):\n    return x.float()\n"),
    ("precision_cast", "def f(x):\n    return x.bfloat16().float()  # HIT\n", "def f(x):\n    return x.double()\n"),
    ("precision_cast", "import torch\ndef f(x):\n    return x.to(torch.bfloat16)  # HIT\n",
     "import torch\ndef f(x):\n    return x.to(torch.float32)\n"),
    ("precision_cast", "import torch\ndef f(x):\n    return x.to(dtype=torch.int8)  # HIT\n",
     "import torch\ndef f(x):\n    return x.to(x.dtype)\n"),
    ("precision_cast", "import torch\ndef f(x):\n    return torch.softmax(x, -1, dtype=torch.float16)  # HIT\n",
     "import torch\ndef f(x):\n    return torch.empty(x.shape, dtype=torch.float16)\n"),
    ("precision_cast", "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True  # HIT\n",
     "import torch\ntorch.backends.cuda.matmul.allow_tf32 = False\n"),
    ("precision_cast", "import torch\nwith torch.autocast('cpu'):  # HIT\n    pass\n",
     "import torch\nwith torch.no_grad():\n    pass\n"),
    ("precision_cast", "import torch\ntorch.set_float32_matmul_precision('medium')  # HIT\n",
     "import torch\ntorch.set_float32_matmul_precision('highest')\n"),
    ("precision_cast", "FLAGS = ['-O3', '--use_fast_math']  # HIT\n", "FLAGS = ['-O3', '-fopenmp']\n"),
    ("harness_probe", "import os\nrunning = 'PYTEST_CURRENT_TEST' in os.environ  # HIT\n",
     "import os\nhome = os.environ.get('HOME')\n"),
    ("harness_probe", "import sys\nargs = sys.argv  # HIT\n", "import sys\nv = sys.version\n"),
    ("harness_probe", "import pytest  # HIT\n", "import math\n"),
    ("harness_probe", "import pytest_cannbench.judge.precision  # HIT\n", "import cann_bench_helpers\n"),
    ("harness_probe", "import torch\non = torch._C._autograd._profiler_enabled()  # HIT\n",
     "import torch\non = torch.is_grad_enabled()\n"),
    ("harness_probe", "from torch.utils._python_dispatch import _disable_current_modes  # HIT\n",
     "from torch.utils.data import DataLoader\n"),
    ("harness_probe", "path = '../tasks/level1/exp/cases.yaml'  # HIT\n", "path = 'cases.json'\n"),
    ("harness_probe", "def f(x, golden):\n    return golden  # HIT\n", "def f(x, gold):\n    return gold\n"),
    ("harness_probe", "x = 1\nname = 'the golden answer'  # HIT\n",
     '"""Compared with the golden reference by pytest."""\nx = 1  # see pytest and cases.yaml\n'),
    ("builtin_compute", "import torch\ndef f(x):\n    return torch.exp(x)  # HIT\n",
     "import torch\ndef f(x):\n    return torch.empty_like(x)\n"),
    ("builtin_compute", "import torch.nn.functional as F\ndef f(x):\n    return F.softmax(x, -1)  # HIT\n",
     "import torch.nn.functional as F\n"),
    ("builtin_compute", "import torch\ndef f(x):\n    return torch.nn.functional.gelu(x)  # HIT\n",
     "import torch\nfrom torch.nn import functional\n"),
    ("builtin_compute", "def f(x):\n    return x.exp()  # HIT\n", "def f(x):\n    return x.contiguous()\n"),
    ("builtin_compute", "def f(a, b):\n    return a.matmul(b)  # HIT\n",
     "import math\ndef f(v):\n    return math.exp(v)\n"),
    ("builtin_compute", "def f(x, y):\n    return x.add_(y)  # HIT\n", "def f(seen, y):\n    seen.add(y)\n"),
    ("builtin_compute", "def f(a, b):\n    return a @ b  # HIT\n",
     "import functools\n@functools.lru_cache()\ndef f(a, b):\n    return a * b\n"),
    ("builtin_compute", "import torch\ndef f(a, b):\n    return torch.ops.aten.mm.default(a, b)  # HIT\n",
     "import torch\ndef f(x):\n    return torch.ops.cann_bench.mm(x, x)\n"),
    ("builtin_compute", "from torch import softmax  # HIT\n", "from torch import Tensor\n"),
    ("builtin_compute", "import torch\nlin = torch.nn.Linear(4, 4)  # HIT\n",
     "import torch\nclass M(torch.nn.Module):\n    pass\n"),
    ("builtin_compute", "import torch\nf = getattr(torch, 'softmax')  # HIT\n",
     "import torch\nf = getattr(torch, 'empty')\n"),
    ("builtin_compute", "import torch\ndef f(x):\n    return torch.topk(x, 3)  # HIT\n",
     "import torch\ndef f(x):\n    return torch.ops.load_library('x.so')\n"),
    ("host_library", "import numpy as np  # HIT\n", "import array\n"),
    ("host_library", "from scipy import special  # HIT\n", "from statistics import mean\n"),
    ("host_library", "import torch\nfn = torch.compile(lambda x: x)  # HIT\n", "import torch\nv = torch.__version__\n"),
    ("host_library", "import torch._inductor  # HIT\n", "import triton\n"),
    ("host_library", "def f(x):\n    return x.cpu().numpy()  # HIT\n", "def f(x):\n    return x.cpu()\n"),
    ("host_library", "import importlib\nnp = importlib.import_module('numpy')  # HIT\n",
     "import importlib\nm = importlib.import_module('json')\n"),
    ("os_exit", "import os\nos._exit(0)  # HIT\n", "import os\npid = os.getpid()\n"),
    ("os_exit", "import sys\nsys.exit(0)  # HIT\n", "import sys\nn = sys.getsizeof(0)\n"),
    ("os_exit", "import pytest\npytest.skip('no')  # HIT\n", "import pytest\nmark = pytest.mark\n"),
    ("os_exit", "import pytest\nraise pytest.xfail.Exception('x')  # HIT\n", "raise ValueError('x')\n"),
    ("os_exit", "raise SystemExit(0)  # HIT\n", "raise RuntimeError(0)\n"),
    ("os_exit", "exit(0)  # HIT\n", "def exit(code):\n    return code\nexit(0)\n"),
    ("file_write_outside", "with open('/dev/shm/cache.bin', 'wb') as f:  # HIT\n    pass\n",
     "with open('/etc/hostname') as f:\n    pass\n"),
    ("file_write_outside", "with open('../out.txt', 'a') as f:  # HIT\n    pass\n",
     "with open('out.txt', 'w') as f:\n    pass\n"),
    ("file_write_outside", "open(file='/tmp/x', mode='w')  # HIT\n", "open(file='/tmp/x', mode='r')\n"),
    ("file_write_outside", "d = 'x'\nfh = open(f'/tmp/{d}', 'w')  # HIT\n", "d = 'x'\nfh = open(f'{d}/tmp', 'w')\n"),
    ("file_write_outside", "import os\nfh = open(os.path.join('/tmp', 'c'), 'w')  # HIT\n",
     "import os\nfh = open(os.path.join('/tmp', 'c'))\n"),
    ("file_write_outside", "from pathlib import Path\nPath('/dev/shm/c').write_bytes(b'')  # HIT\n",
     "from pathlib import Path\ndata = Path('/dev/shm/c').read_bytes()\n"),
    ("file_write_outside", "import shutil\nshutil.rmtree('x')  # HIT\n", "import shutil\nexe = shutil.which('ls')\n"),
    ("file_write_outside", "import os\nos.remove('x')  # HIT\n", "import os\nok = os.path.exists('x')\n"),
    ("monkeypatch", "import torch\ntorch.allclose = lambda *a, **k: True  # HIT\n",
     "import torch\nclose = torch.allclose\n"),
    ("monkeypatch", "import torch\ntorch.Tensor.__sub__ = None  # HIT\n", "class C:\n    pass\nC.x = 1\n"),
    ("monkeypatch", "import torch\nsetattr(torch, 'allclose', None)  # HIT\n",
     "class C:\n    pass\nsetattr(C, 'x', 1)\n"),
    ("monkeypatch", "def f(a=1):\n    return a\nf.__defaults__ = (2,)  # HIT\n",
     "def f(a=1):\n    return a\nf.__doc__ = 'x'\n"),
    ("dynamic_code", "exec('x = 1')  # HIT\n", "def run(s):\n    return s\nrun('x = 1')\n"),
    ("dynamic_code", "code = compile('1', 'f', 'eval')  # HIT\n", "import re\npattern = re.compile('x')\n"),
    ("dynamic_code", "os = __import__('os')  # HIT\n", "import os\n"),
    ("dynamic_code", "import runpy  # HIT\n", "import pprint\n"),
    ("dynamic_code", "import importlib.util\ns = importlib.util.spec_from_file_location('g', 'g.py')  # HIT\n",
     "import importlib.util\ns = importlib.util.find_spec('json')\n"),
]


def _case_id(case) -> str:
    return case[0]


@pytest.mark.parametrize("rule, positive, negative", PY_CASES, ids=[_case_id(c) for c in PY_CASES])
def test_python_rule(tmp_path: Path, rule: str, positive: str, negative: str) -> None:
    assert rule in RULES
    want = marked(positive)
    assert want, "a positive case must mark its line"
    write(tmp_path / "pos", "pkg/mod.py", positive)
    write(tmp_path / "neg", "pkg/mod.py", negative)
    pos = scan_tree(tmp_path / "pos")
    neg = scan_tree(tmp_path / "neg")
    assert want <= lines_of(pos, rule), pos
    assert not lines_of(neg, rule), neg
    assert all(h.path == "pkg/mod.py" for h in pos + neg)
    assert "syntax_error" not in summarize(pos + neg)


# ---- C/C++/CUDA rules -----------------------------------------------------------------------------------------------

CPP_CASES = [
    ("aten_call", "at::Tensor f(const at::Tensor& x) { return at::exp(x); }  // HIT\n",
     "at::Tensor f(const at::Tensor& x) { return at::empty(x.sizes(), x.options()); }\n"),
    ("aten_call", "auto y = torch::matmul(a, b);  // HIT\n", "auto y = torch::empty({2, 2});\n"),
    ("aten_call", "auto y = x.exp();  // HIT\n", "double y = std::exp(v);\n"),
    ("aten_call", "auto y = x->softmax(-1);  // HIT\n", "auto n = x->numel();\n"),
    ("aten_call", "auto y = at::native::softmax(x, 1, false);  // HIT\n", "auto n = at::native::empty_like(x);\n"),
    ("aten_call", "auto y = at::_ops::exp::call(x);  // HIT\n", "auto s = at::get_num_threads();\n"),
    ("aten_call", "auto y = torch::nn::functional::gelu(x);  // HIT\n", "torch::NoGradGuard guard;\n"),
    ("aten_call", "#include <ATen/ops/softmax.h>  // HIT\n", "#include <ATen/ops/empty.h>\n"),
    ("aten_call", "cblas_sgemm(o, ta, tb, m, n, k, 1.f, a, k, b, n, 0.f, c, n);  // HIT\n",
     "at::parallel_for(0, n, 1, [&](int64_t b, int64_t e) {});\n"),
    ("aten_call", "auto st = aclnnSoftmax(ws, size, exec, stream);  // HIT\n",
     "// auto y = at::exp(x); would be cheating\n/* at::softmax(x, 1) */ int z = 0;\n"),
    ("cpp_thread", "std::thread t([] {});  // HIT\n", "at::parallel_for(0, 10, 1, [](int64_t, int64_t) {});\n"),
    ("cpp_thread", "pthread_create(&tid, nullptr, fn, nullptr);  // HIT\n", "pthread_mutex_lock(&m);\n"),
    ("cpp_thread", "auto fut = std::async(std::launch::async, fn);  // HIT\n", "auto v = std::move(w);\n"),
    ("cpp_thread", "pid_t p = fork();  // HIT\n", "int forks = 0;\n"),
    ("cpp_thread", "cudaStreamCreate(&s);  // HIT\n", "auto s = at::cuda::getCurrentCUDAStream();\n"),
    ("cpp_timing", "int clock_gettime(clockid_t c, struct timespec* t) { return 0; }  // HIT\n",
     "auto t = std::chrono::steady_clock::now();\n"),
    ("cpp_timing", "void* f = dlsym(RTLD_NEXT, \"cudaEventElapsedTime\");  // HIT\n", "void* f = nullptr;\n"),
    ("cpp_timing", "gettimeofday(&tv, nullptr);  // HIT\n", "// gettimeofday is not used here\n"),
    ("ctypes", "void* h = dlopen(\"libopapi.so\", RTLD_NOW);  // HIT\n", "void* h = nullptr;  // no dlopen here\n"),
    ("os_exit", "if (bad) _exit(0);  // HIT\n", "on_exit(fn, nullptr);\n"),
    ("os_exit", "std::exit(0);  // HIT\n", "state.exit(0);\n"),
    ("harness_probe", "const char* v = getenv(\"PYTEST_CURRENT_TEST\");  // HIT\n",
     "const char* v = getenv(\"HOME\");  // compared with the golden by pytest\n"),
    ("precision_cast", "__half h = __float2half(v);  // HIT\n", "float h = static_cast<float>(v);\n"),
    ("precision_cast", "auto h = static_cast<c10::Half>(v);  // HIT\n", "f(c10::Half{});\n"),
    ("file_write_outside", "FILE* f = fopen(\"/tmp/cache\", \"wb\");  // HIT\n",
     "FILE* f = fopen(\"/proc/self/status\", \"r\");\n"),
    ("dynamic_code", "PyRun_SimpleString(\"import os\");  // HIT\n", "Py_INCREF(obj);\n"),
]


@pytest.mark.parametrize("rule, positive, negative", CPP_CASES, ids=[c[0] for c in CPP_CASES])
def test_cpp_rule(tmp_path: Path, rule: str, positive: str, negative: str) -> None:
    assert rule in RULES
    want = marked(positive)
    write(tmp_path / "pos", "csrc/ops.cpp", positive)
    write(tmp_path / "neg", "csrc/ops.cpp", negative)
    pos = scan_tree(tmp_path / "pos")
    neg = scan_tree(tmp_path / "neg")
    assert want and want <= lines_of(pos, rule), pos
    assert not lines_of(neg, rule), neg


@pytest.mark.parametrize("suffix", [".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp"])
def test_every_c_suffix_is_scanned(tmp_path: Path, suffix: str) -> None:
    write(tmp_path, f"csrc/k{suffix}", "void f() { std::thread t(g); }\n")
    write(tmp_path, "csrc/notes.txt", "std::thread t(g);\nimport ctypes\n")
    write(tmp_path, "setup.cfg", "[x]\nimport ctypes\n")
    hits = scan_tree(tmp_path)
    assert [(h.rule, h.path, h.line) for h in hits] == [("cpp_thread", f"csrc/k{suffix}", 1)]


def test_cpp_at_exp_flagged_at_empty_not(tmp_path: Path) -> None:
    src = (
        "#include <ATen/ATen.h>\n"
        "at::Tensor f(const at::Tensor& x) {\n"
        "  at::Tensor y = at::empty(x.sizes(), x.options());\n"
        "  return at::exp(x);\n"
        "}\n"
    )
    write(tmp_path, "k.cpp", src)
    hits = scan_tree(tmp_path)
    assert [(h.rule, h.line, h.snippet) for h in hits] == [("aten_call", 4, "return at::exp(x);")]


def test_cpp_comments_are_ignored_but_strings_kept_and_lines_hold(tmp_path: Path) -> None:
    src = (
        "/* at::exp(x)\n"
        "   std::thread t; */ int a = 0;\n"
        "// dlopen(\"x\")\n"
        "const char* s = \"// not a comment\"; auto y = at::softmax(x, 1);\n"
        "char q = '\"'; auto z = x.exp();\n"
    )
    write(tmp_path, "k.cc", src)
    hits = scan_tree(tmp_path)
    assert [(h.rule, h.line) for h in hits] == [("aten_call", 4), ("aten_call", 5)]


# ---- the allow list -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["empty", "zeros", "ones", "empty_like", "view", "reshape", "contiguous", "copy_",
                                  "clone", "to", "device", "tensor"])
def test_allocation_view_copy_names_not_flagged(tmp_path: Path, name: str) -> None:
    assert name in ALLOWED_NAMES and name not in COMPUTE_NAMES
    write(tmp_path, "m.py", f"import torch\ndef f(x):\n    a = torch.{name}(x)\n    return x.{name}(a)\n")
    write(tmp_path, "k.cpp", f"auto a = at::{name}(x);\nauto b = torch::{name}(x);\nauto c = x.{name}(a);\n")
    hits = scan_tree(tmp_path)
    assert not [h for h in hits if h.rule in ("builtin_compute", "aten_call")], hits
    # the same lines with a compute name are flagged: the allow list, not the syntax, is what passes them
    write(tmp_path, "m.py", "import torch\ndef f(x):\n    a = torch.exp(x)\n    return x.exp(a)\n")
    write(tmp_path, "k.cpp", "auto a = at::exp(x);\nauto b = torch::exp(x);\nauto c = x.exp(a);\n")
    hits = scan_tree(tmp_path)
    assert lines_of(hits, "builtin_compute") == {3, 4} and lines_of(hits, "aten_call") == {1, 2, 3}


def test_compute_and_allowed_names_disjoint() -> None:
    assert not COMPUTE_NAMES & ALLOWED_NAMES
    assert {"exp", "matmul", "softmax", "log_softmax", "topk", "gather", "softplus", "leaky_relu"} <= COMPUTE_NAMES


def test_allow_list_is_the_runtime_one_with_stated_differences() -> None:
    # one list: what the runtime guard allows, less the copies the scan flags on purpose, plus non-ops
    assert ALLOWED_NAMES == (builtin_ops.ALLOWED - FLAGGED_COPIES) | SCAN_ALSO_PASSES
    assert FLAGGED_COPIES == {"cat", "stack"} and FLAGGED_COPIES <= COMPUTE_NAMES
    assert not COMPUTE_NAMES & builtin_ops.ALLOWED - FLAGGED_COPIES


@pytest.mark.parametrize("name", ["_to_copy", "slice", "item", "resize_", "unfold"])
def test_runtime_allowed_ops_pass_the_scan_in_compute_namespaces(tmp_path: Path, name: str) -> None:
    write(tmp_path, "m.py", f"import torch\ndef f(x):\n    return torch.ops.aten.{name}(x)\n")
    write(tmp_path, "k.cpp", f"auto a = at::_ops::{name}::call(x);\nauto b = at::native::{name}(x);\n")
    assert not [h for h in scan_tree(tmp_path) if h.rule in ("builtin_compute", "aten_call")]


@pytest.mark.parametrize("name", sorted(FLAGGED_COPIES))
def test_flagged_copies_are_still_flagged(tmp_path: Path, name: str) -> None:
    write(tmp_path, "m.py", f"import torch\ndef f(x, y):\n    return torch.{name}([x, y])  # HIT\n")
    assert lines_of(scan_tree(tmp_path), "builtin_compute") == {3}


# ---- bookkeeping: syntax errors, caps, skipped directories, links -----------------------------------------------

@pytest.mark.parametrize("text, error_line, ctypes_line", [
    ("def f(:\n    pass\nimport ctypes\n", 1, 3),
    ("x = 1\nif x\n    y = 2\nimport ctypes  # a comment naming pytest\n", 2, 4),
    ("import os\nprint 'hi'\nimport ctypes\n", 2, 3),
])
def test_syntax_error_falls_back_to_regex(tmp_path: Path, text: str, error_line: int, ctypes_line: int) -> None:
    write(tmp_path, "bad.py", text)
    hits = scan_tree(tmp_path)
    assert lines_of(hits, "syntax_error") == {error_line}
    assert lines_of(hits, "ctypes") == {ctypes_line}
    assert not lines_of(hits, "harness_probe")  # comments stay out of the fallback too


def test_null_bytes_are_a_syntax_error(tmp_path: Path) -> None:
    (tmp_path / "nul.py").write_bytes(b"import ctypes\nx = '\x00'\n")
    hits = scan_tree(tmp_path)
    assert "syntax_error" in summarize(hits) and 1 in lines_of(hits, "ctypes")


def test_fallback_regex_covers_each_python_rule(tmp_path: Path) -> None:
    lines = {
        "frame_walk": "f = sys._getframe(1)",
        "gc_walk": "o = gc.get_objects()",
        "sys_modules": "m = sys.modules['x']",
        "threading": "t = threading.Thread(target=f)",
        "ctypes": "import ctypes",
        "timing_patch": "time.perf_counter = f",
        "precision_cast": "y = x.half()",
        "harness_probe": "e = os.environ['PYTEST_CURRENT_TEST']",
        "builtin_compute": "y = torch.softmax(x, -1)",
        "host_library": "import numpy as np",
        "os_exit": "os._exit(0)",
        "file_write_outside": "open('/tmp/x', 'w')",
        "monkeypatch": "torch.allclose = f",
        "dynamic_code": "exec(s)",
    }
    write(tmp_path, "bad.py", "def broken(:\n" + "\n".join(lines.values()) + "\ny = a.size(0)\n@decorator\n")
    hits = scan_tree(tmp_path)
    for n, rule in enumerate(lines, start=2):
        assert n in lines_of(hits, rule), (rule, hits)
    assert not [h for h in hits if h.line >= len(lines) + 2], hits  # a.size(0) and a decorator are not compute


def test_huge_file_is_not_read(tmp_path: Path) -> None:
    write(tmp_path, "big.py", "import ctypes\n" + "x = 1\n" * 400_000)  # about 2.4 MB, over the 2 MB default
    write(tmp_path, "small.py", "import ctypes\n")
    hits = scan_tree(tmp_path)
    assert [(h.rule, h.path) for h in hits] == [("file_too_large", "big.py"), ("ctypes", "small.py")]
    assert hits[0].line == 0
    hits = scan_tree(tmp_path, max_bytes=10)
    assert summarize(hits) == {"file_too_large": 2}
    hits = scan_tree(tmp_path, max_bytes=3_000_000)
    assert summarize(hits) == {"ctypes": 2}


def test_max_files_stops_the_scan(tmp_path: Path) -> None:
    for i in range(5):
        write(tmp_path, f"m{i}.py", "import ctypes\n")
    hits = scan_tree(tmp_path, max_files=3)
    assert [h.path for h in hits if h.rule == "ctypes"] == ["m0.py", "m1.py", "m2.py"]
    assert lines_of(hits, "too_many_files") == {0}
    assert "too_many_files" not in summarize(scan_tree(tmp_path, max_files=5))


@pytest.mark.parametrize("skipped", ["build", "dist", ".git", "__pycache__", ".venv", "venv", "pkg.egg-info",
                                     "node_modules", "site-packages", ".tox", "a/build", "myenv"])
def test_skipped_dirs(tmp_path: Path, skipped: str) -> None:
    write(tmp_path, f"{skipped}/evil.py", "import ctypes\n")
    write(tmp_path, f"{skipped}/evil.cpp", "std::thread t(f);\n")
    if skipped == "myenv":  # any virtual environment, whatever its name
        write(tmp_path, "myenv/pyvenv.cfg", "home = /usr/bin\n")
    assert scan_tree(tmp_path) == []
    write(tmp_path, "pkg/evil.py", "import ctypes\n")  # the control: the same file elsewhere is scanned
    assert [h.path for h in scan_tree(tmp_path)] == ["pkg/evil.py"]


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside, "evil.py", "import ctypes\n")
    root = tmp_path / "root"
    write(root, "ok.py", "x = 1\n")
    os.symlink(outside / "evil.py", root / "link.py")
    os.symlink(outside, root / "linkdir", target_is_directory=True)
    hits = scan_tree(root)
    assert [(h.rule, h.path, h.line) for h in hits] == [("symlink", "link.py", 0)]


def test_single_file_root(tmp_path: Path) -> None:
    path = write(tmp_path, "one.py", "import ctypes\n")
    assert [(h.rule, h.path, h.line) for h in scan_tree(path)] == [("ctypes", "one.py", 1)]


def test_own_package_attributes_are_not_monkeypatch(tmp_path: Path) -> None:
    write(tmp_path, "cann_bench/__init__.py", "import cann_bench._C as C\nC.ready = True\n")
    write(tmp_path, "cann_bench/_C.py", "ready = False\n")
    write(tmp_path, "other/__init__.py", "import json\njson.ready = True  # HIT\n")
    hits = scan_tree(tmp_path)
    assert [(h.rule, h.path, h.line) for h in hits] == [("monkeypatch", "other/__init__.py", 2)]


def test_scanned_code_is_never_executed(tmp_path: Path) -> None:
    sentinel = tmp_path / "ran"
    write(tmp_path / "pkg", "cann_bench/__init__.py", f"open({str(sentinel)!r}, 'w').write('x')\n")
    write(tmp_path / "pkg", "setup.py", f"open({str(sentinel)!r}, 'w').write('x')\n")
    hits = scan_tree(tmp_path / "pkg")
    assert not sentinel.exists()
    assert lines_of(hits, "file_write_outside") == {1}


def test_module_does_not_import_torch() -> None:
    code = ("import sys; from pathlib import Path; import pytest_cannbench.guard.scan as s; "
            "s.scan_tree(Path(sys.argv[1])); assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code, str(EXAMPLES)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr


# ---- determinism, summary, flags ----------------------------------------------------------------------------------

def _tree(root: Path) -> None:
    write(root, "z/last.py", "import ctypes\nimport numpy\nimport subprocess\n")
    write(root, "a/first.cpp", "auto y = at::exp(x); std::thread t(f);\n")
    write(root, "m.py", "import ctypes, subprocess\nimport pytest\nx = a @ b\n")


def test_deterministic_and_sorted(tmp_path: Path) -> None:
    _tree(tmp_path / "one")
    shutil.copytree(tmp_path / "one", tmp_path / "two")
    first = scan_tree(tmp_path / "one")
    assert first == scan_tree(tmp_path / "one") == scan_tree(tmp_path / "two")
    assert first == sorted(first, key=lambda h: (h.path, h.line, h.rule))
    assert [(h.path, h.line, h.rule) for h in first] == [
        ("a/first.cpp", 1, "aten_call"), ("a/first.cpp", 1, "cpp_thread"),
        ("m.py", 1, "ctypes"), ("m.py", 1, "threading"), ("m.py", 2, "harness_probe"), ("m.py", 3, "builtin_compute"),
        ("z/last.py", 1, "ctypes"), ("z/last.py", 2, "host_library"), ("z/last.py", 3, "threading"),
    ]


def test_one_hit_per_rule_and_line(tmp_path: Path) -> None:
    write(tmp_path, "m.py", "import torch\ny = torch.exp(torch.sin(x)).cos().matmul(w)\n")
    hits = scan_tree(tmp_path)
    assert [(h.rule, h.line) for h in hits] == [("builtin_compute", 2)]


def test_summarize_and_flags() -> None:
    hits = [Hit("ctypes", "a.py", 1, "import ctypes"), Hit("threading", "a.py", 2, "import pty"),
            Hit("ctypes", "b.py", 3, "ctypes.CDLL(None)")]
    assert summarize(hits) == {"ctypes": 2, "threading": 1}
    assert list(summarize(hits)) == ["ctypes", "threading"]
    assert flags_of(hits) == ["scan:ctypes", "scan:threading"]
    assert summarize([]) == {} and flags_of([]) == []


def test_hit_is_frozen() -> None:
    hit = Hit("ctypes", "a.py", 1, "import ctypes")
    with pytest.raises(dataclasses.FrozenInstanceError):
        hit.rule = "other"  # type: ignore[misc]


def test_scan_source_picks_language_by_suffix() -> None:
    assert [h.rule for h in scan_source("x.py", "import ctypes\n")] == ["ctypes"]
    assert [h.rule for h in scan_source("x.cpp", b"void* h = dlopen(0, 0);\n")] == ["ctypes"]
    assert scan_source("x.txt", "import ctypes\n") == []


def test_every_reported_rule_is_documented(tmp_path: Path) -> None:
    for i, (_rule, positive, _negative) in enumerate(PY_CASES):
        write(tmp_path, f"p{i}.py", positive)
    for i, (_rule, positive, _negative) in enumerate(CPP_CASES):
        write(tmp_path, f"c{i}.cpp", positive)
    write(tmp_path, "bad.py", "def (:\n")
    reported = set(summarize(scan_tree(tmp_path)))
    assert reported <= set(RULES)
    assert {r for r, _, _ in PY_CASES + CPP_CASES} <= reported


# ---- the repository's own examples ---------------------------------------------------------------------------------

def test_example_cpp_cpu_has_no_builtin_compute(tmp_path: Path) -> None:
    src = EXAMPLES / "cpp_cpu"
    assert (src / "csrc" / "ops.cpp").is_file()
    hits = scan_tree(src)
    counts = summarize(hits)
    assert "aten_call" not in counts and "builtin_compute" not in counts, hits
    # the C++ file really is scanned: one delegating line added to a copy is reported
    copy = tmp_path / "cpp_cpu"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("build", "dist", "*.so", "*.egg-info"))
    ops = copy / "csrc" / "ops.cpp"
    ops.write_text(ops.read_text() + "at::Tensor cheat(const at::Tensor& x) { return at::softmax(x, -1); }\n")
    n = len(ops.read_text().splitlines())
    assert [(h.path, h.line) for h in scan_tree(copy) if h.rule == "aten_call"] == [("csrc/ops.cpp", n)]


def test_example_segfault_flags_ctypes() -> None:
    hits = scan_tree(EXAMPLES / "broken" / "segfault")
    assert "scan:ctypes" in flags_of(hits)
    assert {h.path for h in hits if h.rule == "ctypes"} == {"cann_bench/__init__.py"}
    assert lines_of(hits, "ctypes") >= {3}  # import ctypes

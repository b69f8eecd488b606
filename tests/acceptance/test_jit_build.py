"""Kernels compiled at import (``load_inline``), as their authors write them: compiled once in the build stage,
loaded prebuilt by the contained candidate worker, in both formats. Real compiles (C++ on the CPU, about 40 s
each on the 2-core machine); nothing is mocked.

``tests/fixtures/kernelbench/jit``: ``1_ReLU`` compiles two extensions (a pybind module and a TORCH_LIBRARY op),
``2_Matmul`` one (and keeps a builtin add beside it), ``3_Softmax`` one that does not compile.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from inner import InnerRun, make_wheel, run_inner

FIXTURES = Path(__file__).parents[1] / "fixtures"
BASE = ("-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-no-perf")

SOFTPLUS_CPP = r"""
#include <torch/extension.h>
#include <cmath>
torch::Tensor softplus_forward(torch::Tensor x, double beta, double threshold) {
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "softplus", [&] {
    const scalar_t* a = xc.data_ptr<scalar_t>();
    scalar_t* b = y.data_ptr<scalar_t>();
    for (int64_t i = 0; i < xc.numel(); ++i) {
      const double v = static_cast<double>(a[i]);
      b[i] = static_cast<scalar_t>(v * beta > threshold ? v : std::log1p(std::exp(v * beta)) / beta);
    }
  });
  return y;
}
"""

CANN_PACKAGE = f'''"""A cann_bench package whose kernel is compiled by load_inline when it is imported."""
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="cann_jit_softplus", cpp_sources={SOFTPLUS_CPP!r}, functions=["softplus_forward"],
                   extra_cflags=["-O1"])


def softplus(x, beta=1.0, threshold=20.0):
    return _ext.softplus_forward(x, float(beta), float(threshold))
'''


def statuses(run: InnerRun, problem: str) -> set[tuple]:
    return {(c.cann["status"], c.cann["failure_type"]) for name, c in run.cases.items() if name.startswith(problem)}


@pytest.fixture
def problems(pytester: pytest.Pytester) -> Path:
    shutil.copytree(FIXTURES / "kernelbench" / "problems" / "level1", pytester.path / "problems" / "level1")
    return pytester.path / "problems"


def test_kernelbench_modelnews_compiled_at_import_are_graded(pytester, capsys, problems):
    run = run_inner(pytester, capsys, problems, str(problems), *BASE, "--cann-kb-trials=1",
                    f"--cann-source={FIXTURES / 'kernelbench' / 'jit'}", "--cann-guard=block")
    assert statuses(run, "1_ReLU") == {("passed", None)}, run.text  # two extensions, one of them a torch op
    assert statuses(run, "2_Matmul") == {("passed", None)}, run.text
    flagged = [w for name, c in run.cases.items() if name.startswith("2_Matmul") for w in c.cann["warnings"]]
    assert any("builtin_compute" in w and "aten::add" in w for w in flagged), flagged  # reported, not failed
    assert statuses(run, "3_Softmax") == {("compile_failed", "compile_failed")}
    message = next(c.cann["message"] for n, c in run.cases.items() if n.startswith("3_Softmax"))
    assert "undeclared_softmax_helper" in message and "was not declared" in message  # the compiler's words
    log = run.root / "reports" / "logs" / "jit_build.log"
    assert "cannbench-jit: built kbjit_relu" in log.read_text() and "kbjit_copy" in log.read_text()


def test_a_modelnew_without_any_custom_kernel_fails_under_kernelbench_rule(pytester, capsys, problems):
    honest = FIXTURES / "kernelbench" / "honest"  # PyTorch-level rewrites: no kernel of their own
    run = run_inner(pytester, capsys, problems, str(problems), *BASE, "--cann-kb-trials=1",
                    f"--cann-source={honest}", "--cann-guard=block", "-k", "relu")
    assert statuses(run, "1_ReLU") == {("failed", "no_custom_kernel")}
    strict = run_inner(pytester, capsys, problems, str(problems), *BASE, "--cann-kb-trials=1",
                       f"--cann-source={honest}", "--cann-guard=strict", "-k", "relu")
    assert statuses(strict, "1_ReLU") == {("failed", "builtin_compute")}


def test_cann_package_compiling_at_import_passes_under_the_strict_guard(pytester, capsys, task_tree):
    tasks = task_tree("submission")
    source = Path(pytester.path) / "sub"
    make_wheel(source / "dist", {"cann_bench/__init__.py": CANN_PACKAGE})
    run = run_inner(pytester, capsys, tasks, "--cann-tasks=tasks", *BASE, f"--cann-source={source}",
                    "--cann-guard=block", "-k", "softplus")
    assert {name: c.cann["status"] for name, c in run.cases.items()} == {
        f"softplus[0{i}]": "passed" for i in range(1, 5)}, run.text
    log = run.root / "reports" / "logs" / "jit_build.log"
    assert "cannbench-jit: built cann_jit_softplus" in log.read_text()


def test_a_cann_package_whose_compile_fails_is_compile_failed(pytester, capsys, task_tree):
    tasks = task_tree("submission")
    source = Path(pytester.path) / "sub"
    broken = CANN_PACKAGE.replace("std::log1p(", "no_such_function(")
    make_wheel(source / "dist", {"cann_bench/__init__.py": broken})
    run = run_inner(pytester, capsys, tasks, "--cann-tasks=tasks", *BASE, f"--cann-source={source}",
                    "-k", "softplus")
    assert {c.cann["status"] for c in run.cases.values()} == {"compile_failed"}
    message = next(iter(run.cases.values())).cann["message"]
    assert "no_such_function" in message and "jit_build.log" in message


def test_the_worker_loads_only_what_the_build_stage_compiled(tmp_path):
    """An empty manifest: any load_inline in the worker fails with the build-stage message, and nothing runs
    a compiler (the router never calls torch's own load_inline)."""
    import subprocess
    import sys

    from pytest_cannbench.workers.jit_load import MANIFEST_ENV, Manifest

    manifest = tmp_path / "manifest.json"
    manifest.write_text(Manifest().to_json())
    code = ("from pytest_cannbench.workers.jit_load import route_from_environment; route_from_environment()\n"
            "from torch.utils.cpp_extension import load_inline\n"
            "try:\n    load_inline(name='x', cpp_sources='int f() { return 1; }', functions=['f'])\n"
            "except RuntimeError as e:\n    print(e)\n")
    env = {"PATH": "/nonexistent", MANIFEST_ENV: str(manifest), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"),
           **{k: v for k, v in __import__("os").environ.items() if k.startswith(("PYTHON", "HOME"))}}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert "this extension was not compiled at build time" in out.stdout, out.stderr
    assert not (tmp_path / "ext").exists()


def test_manifest_round_trip_and_keys_follow_sources(tmp_path):
    from torch.utils.cpp_extension import load_inline

    from pytest_cannbench.workers.jit_load import Extension, Manifest, call_key

    a = call_key(load_inline, "load_inline", ("ext",), {"cpp_sources": "int f();", "functions": ["f"]})
    b = call_key(load_inline, "load_inline", ("ext", "int f();"), {"functions": ["f"], "verbose": True})
    c = call_key(load_inline, "load_inline", ("ext", "int g();"), {"functions": ["f"]})
    assert a == b and a[0] != c[0] and a[1] == "ext" and a[2] is True  # verbose does not change the library
    manifest = Manifest(extensions=[Extension(a[0], "ext", "ext", "/d", True)], modules={"m.py": ""})
    path = tmp_path / "m.json"
    path.write_text(manifest.to_json())
    assert Manifest.read(path) == manifest and json.loads(path.read_text())["modules"] == {"m.py": ""}

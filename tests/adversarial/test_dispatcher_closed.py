"""Builtin kernels unreachable, attacked from C++: every dispatcher path to ATen's softplus meets the guard's
refusing kernel (guard/forbid.py), and the symbol allowlist (guard/torch_imports.py) refuses the dispatcher lookups
and torch's bundled Sleef before anything runs.

One fixture (guard_evidence/dispatcher_paths.cpp) holds a softplus per path: ``at::softplus``,
``at::_ops::softplus::call``, ``findSchemaOrThrow`` + a typed call, + ``callBoxed``, + ``redispatch`` on the CPU key
set; built with ``-DSLEEF_ONLY`` it is a softplus of its own loops that takes exp from torch's Sleef. Built once per
machine (tests/compiled.py) and packed into hand-made wheels.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from compiled import compile_library
from test_adversarial import assert_scores_zero, grade
from test_guard_evidence import HERE, binary_wheel

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
PATHS = ("softplus_function", "softplus_ops", "softplus_typed", "softplus_boxed", "softplus_redispatch")

PROBE = textwrap.dedent("""
    import json, os, sys, torch
    from pytest_cannbench.guard.runtime import Guard
    guard = Guard("block", "cpu", os.getcwd(), [])
    guard.close_builtin_kernels()
    torch.ops.load_library(sys.argv[1])
    x = torch.ones(1000)
    out = {}
    for name in sys.argv[2:]:
        try:
            getattr(torch.ops.cann_bench, name)(x, 1.0, 20.0)
            error = None
        except Exception as exc:
            error = str(exc)
        out[name] = [error, [p["detail"] for p in guard.report()]]
    print(json.dumps(out))
""")


def paths_library() -> Path:
    return compile_library("torch", HERE / "dispatcher_paths.cpp")


def test_every_cpp_path_to_a_builtin_kernel_is_refused_at_the_dispatcher():
    """In a worker-like process with the guard in block mode (no inner session: the symbol scan, which would
    refuse this library first, is left out, so the dispatcher is the only layer)."""
    done = subprocess.run([sys.executable, "-c", PROBE, str(paths_library()), *PATHS], capture_output=True,
                          text=True, timeout=300, cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for name in PATHS:
        error, findings = out[name]
        assert error is not None, f"{name} ran ATen's softplus"
        assert "aten::softplus is builtin compute" in error and "refused at the dispatcher" in error, (name, error)
        assert any(f.startswith("aten::softplus refused at the dispatcher") for f in findings), (name, findings)


LOAD = ("from pathlib import Path\n\nimport torch\n\n"
        "torch.ops.load_library(str(Path(__file__).with_name('_C.so')))\nsoftplus = torch.ops.cann_bench.{op}\n")


@pytest.mark.parametrize("variant", ["boxed_call_by_name", "sleef"])
def test_cpp_delegation_below_the_profiler_scores_zero(variant, pytester, capsys, task_tree):
    """Graded end to end in block mode: the boxed call by name is refused at the dispatcher and its imports
    are refused by the symbol scan; Sleef's exp is the submission's own loop calling torch's math, which only
    the symbol scan sees."""
    if variant == "sleef" and platform.machine() != "x86_64":
        pytest.skip("the fixture calls Sleef's AVX2 exp")
    if variant == "sleef":
        lib, op = compile_library("torch", HERE / "dispatcher_paths.cpp", "-DSLEEF_ONLY"), "softplus"
    else:
        lib, op = paths_library(), "softplus_boxed"
    source = binary_wheel(Path(pytester.path) / "sub", {"cann_bench/__init__.py": LOAD.format(op=op).encode(),
                                                        "cann_bench/_C.so": lib.read_bytes()})
    run, softplus, board = grade(pytester, capsys, task_tree, source, "--cann-guard=block")
    assert_scores_zero(run, softplus, {"builtin_compute"})
    message = run.cases["softplus[01]"].cann["message"]
    problems = board["submission"]["scan"]["symbols"]["problems"]
    if variant == "sleef":
        assert "_C.so imports Sleef_expf8_u10" in message, message
        assert [p for p in problems if "Sleef_expf8_u10" in p] and len(problems) == 1, problems
    else:
        assert "aten::softplus refused at the dispatcher" in message, message
        assert "c10::Dispatcher::findSchemaOrThrow" in message and "a dispatcher lookup" in message, message
        assert any("callBoxed" in p or "findSchemaOrThrow" in p for p in problems), problems

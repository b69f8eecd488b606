"""Delegation the in-worker profiler cannot see, caught by the judge's CPU sampling from outside the worker.

``redispatch`` on an explicit dispatch key set skips RecordFunction, so the op never appears in the worker's
profile; from Python (``OpOverload.redispatch``) and from C++ (``TypedOperatorHandle::redispatch``, only c10
symbols imported). The judge samples the worker's instruction pointers with ``perf_event_open`` and finds the
time in libtorch's kernels. In block mode both now meet the guard's refusing kernel at the dispatcher first
(guard/forbid.py): the C++ one fails naming the op it was refused. The cases are large enough (milliseconds) for
the samples to decide; the honest C++ example on the same cases keeps its full function marks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from inner import make_wheel, run_inner

from pytest_cannbench.guard.perf_sample import CallSampler, Unavailable

ARGS = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-repeat=3",
        "--cann-warmup=1", "--cann-case-timeout=120", "--cann-guard=block", "-k", "softplus")
CPP = Path(__file__).parent / "cpp"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cpp_cpu"
BIG_CASES = """cases:
- {operator: Softplus, case_id: 1, input_shape: [[2048, 1024]], dtype: [float32], attrs: {}, value_range: [-5, 5]}
- {operator: Softplus, case_id: 2, input_shape: [[1024, 2048]], dtype: [float32], attrs: {beta: 2.0},
  value_range: [-5, 5]}
- {operator: Softplus, case_id: 3, input_shape: [[4096, 512]], dtype: [float32], attrs: {beta: 0.5},
  value_range: [-8, 8]}
"""
PY_REDISPATCH = '''import torch
from torch._C import DispatchKey, DispatchKeySet

_CPU = DispatchKeySet(DispatchKey.CPU)


def softplus(x, beta=1.0, threshold=20.0):
    return torch.ops.aten.softplus.default.redispatch(_CPU, x, beta, threshold)
'''


def _sampling() -> str | None:
    import os

    opened = CallSampler.open(os.getpid())
    if isinstance(opened, Unavailable):
        return opened.reason
    opened.close()
    return None


pytestmark = pytest.mark.skipif(_sampling() is not None, reason=f"perf_event_open refused here: {_sampling()}")


def big_tree(task_tree) -> Path:
    tasks = task_tree("submission")
    (tasks / "level1" / "softplus" / "cases.yaml").write_text(BIG_CASES)
    return tasks


def grade(pytester, capsys, tasks: Path, source: Path):
    run = run_inner(pytester, capsys, tasks, *ARGS, f"--cann-source={source}")
    board = json.loads((Path(pytester.path) / "reports" / "leaderboard.json").read_text())
    return run, next(op for op in board["operators"] if op["rel_path"] == "level1/softplus")


def test_python_redispatch_is_caught_by_sampling(pytester, capsys, task_tree):
    tasks = big_tree(task_tree)
    source = Path(pytester.path) / "sub"
    make_wheel(source / "dist", {"cann_bench/__init__.py": PY_REDISPATCH})
    run, softplus = grade(pytester, capsys, tasks, source)
    found = [c.cann["failure_type"] for c in run.cases.values()]
    assert "builtin_compute" in found, [(c.cann["failure_type"], c.cann["message"][:300]) for c in run.cases.values()]
    # caught twice over: the guard's redispatch annotation in the worker, and the judge's samples
    assert softplus["score"] == 0 and softplus["status"] == "builtin_compute", softplus


def test_cpp_redispatch_is_refused_at_the_dispatcher(pytester, capsys, task_tree, prebuilt_source):
    tasks = big_tree(task_tree)
    run, softplus = grade(pytester, capsys, tasks, prebuilt_source(CPP / "redispatch"))
    # no RecordFunction, no ATen symbol imported: the kernel never runs (the CPU key's slot holds the guard's
    # refusal, guard/forbid.py), and the dispatcher lookup is refused by the symbol allowlist
    assert all("aten::softplus refused at the dispatcher" in c.cann["message"] for c in run.cases.values()), \
        [(c.cann["failure_type"], c.cann["message"][:300]) for c in run.cases.values()]
    assert softplus["score"] == 0 and softplus["status"] == "builtin_compute", \
        [(c.cann["failure_type"], c.cann["message"][:300]) for c in run.cases.values()]


def test_honest_cpp_example_is_not_flagged_on_the_same_cases(pytester, capsys, task_tree, prebuilt_source):
    tasks = big_tree(task_tree)
    run, softplus = grade(pytester, capsys, tasks, prebuilt_source(EXAMPLE))
    for name, case in run.cases.items():
        assert case.cann["status"] == "passed", (name, case.cann["message"])
    assert softplus["function_score"] == pytest.approx(30.0)

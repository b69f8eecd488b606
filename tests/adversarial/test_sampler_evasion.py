"""Delegation hidden from the judge's CPU sampler itself, by code that no other layer sees.

``cpp/found_in_memory`` finds libtorch_cpu.so in ``/proc/self/maps``, parses its ``.dynsym`` and calls its Sleef
functions through pointers, importing only libc (the dispatcher, the profiler and the symbol scan see nothing),
and each of its four operators hides that time from the samples a different way: the tick dodger (softplus:
work placed between two sampling interrupts), dilution in the call (silu), dilution in the output's finaliser
(gelu: after the worker's clock stops) and short-lived threads (log_softmax: each ends before a first sample). Against a
fixed-period sampler judging whole exchanges by share alone they pass (``benchmarks/perf_profile.py --attacks``);
random intervals, windows of the timed calls, the foreign budget per call and the CPU counted on threads no
sample saw each make them ``builtin_compute``. The honest C++ example on the same cases keeps its marks.
One inner session grades all four (the operators are judged apart).
"""

from __future__ import annotations

import json
import platform
import shutil
from pathlib import Path

import pytest
from inner import run_inner

from pytest_cannbench.guard.perf_sample import CallSampler, Unavailable

ROOT = Path(__file__).resolve().parents[2]
ATTACKS = Path(__file__).parent / "cpp" / "found_in_memory"
EXAMPLE = ROOT / "examples" / "cpp_cpu"
ARGS = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-repeat=3",
        "--cann-warmup=1", "--cann-case-timeout=120", "--cann-guard=block")
# 4 Mi float32 elements (silu 8 Mi): each call spends milliseconds in Sleef, well over the foreign budget per call
# even where the delegated part is a small share of the call (silu's own loads and stores outweigh its exp)
CASES = {
    "level1/softplus": ("Softplus", "[2048, 2048]", ["{}", "{beta: 2.0}"]),
    "level1/silu": ("Silu", "[4096, 2048]", ["{}", "{}"]),
    "level1/gelu": ("Gelu", "[2048, 2048]", ["{approximate: none}", "{approximate: tanh}"]),
    "level2/log_softmax": ("LogSoftmax", "[2048, 2048]", ["{}", "{dim: 1}"]),
}


def _unavailable() -> str | None:
    import os

    if platform.machine() != "x86_64" or "avx2" not in Path("/proc/cpuinfo").read_text():
        return "the attacks call libtorch's AVX2 Sleef functions"
    opened = CallSampler.open(os.getpid())
    if isinstance(opened, Unavailable):
        return f"perf_event_open refused here: {opened.reason}"
    opened.close()
    return None


pytestmark = pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable()))


def tasks_tree(root: Path) -> Path:
    """The four operators from the bundled tasks, with large cases of their own."""
    tasks = root / "tasks"
    for rel, (title, shape, attrs) in CASES.items():
        op = tasks / rel
        op.mkdir(parents=True)
        for file in ("golden.py", "proto.yaml"):
            shutil.copy(ROOT / "tasks" / rel / file, op / file)
        (op / "cases.yaml").write_text("cases:\n" + "".join(
            f"- {{operator: {title}, case_id: {i}, input_shape: [{shape}], dtype: [float32], attrs: {a}, "
            f"value_range: [-5, 5]}}\n" for i, a in enumerate(attrs, 1)))
    return tasks


def grade(pytester, capsys, source: Path):
    tasks = tasks_tree(Path(pytester.path))
    run = run_inner(pytester, capsys, tasks, *ARGS, f"--cann-source={source}")
    board = json.loads((Path(pytester.path) / "reports" / "leaderboard.json").read_text())
    return run, {op["rel_path"]: op for op in board["operators"]}


def test_delegation_hidden_from_the_sampler_scores_zero(pytester, capsys, prebuilt_source):
    run, operators = grade(pytester, capsys, prebuilt_source(ATTACKS))
    seen = [(name, c.cann["failure_type"], c.cann["message"][:400]) for name, c in run.cases.items()]
    for rel in CASES:
        op, name = operators[rel], rel.split("/")[1]
        assert op["score"] == 0 and op["status"] == "builtin_compute", (rel, op, seen)
        assert any(n.startswith(name) and "CPU samples taken by the judge" in m for n, _f, m in seen), (rel, seen)
    # the short threads are caught by the CPU the kernel counted on them, which no sample saw
    assert any(n.startswith("log_softmax") and "[unsampled]" in m for n, _f, m in seen), seen


def test_honest_cpp_example_keeps_its_marks_on_the_same_cases(pytester, capsys, prebuilt_source):
    run, operators = grade(pytester, capsys, prebuilt_source(EXAMPLE))
    for name, case in run.cases.items():
        assert case.cann["status"] == "passed", (name, case.cann["message"])
    for rel in CASES:
        assert operators[rel]["function_score"] == pytest.approx(30.0), operators[rel]

"""The attacks that only a CUDA GPU can carry, graded on one (``-m cuda``; skipped with a reason elsewhere).

Each runs in its own inner session with ``--cann-device=cuda``, timed like a real run with few calls:

* work hidden from the timer: on a side stream never joined back, or queued after the result is ready so it is
  still running when the call returns. The worker synchronises every stream before a call counts as over, so
  the work is in the time, whichever timer (the profiler's kernel union or events) measured it;
* delegation to the vendor's libraries: ATen's CUDA kernels and cuBLAS through torch (the profiler sees the op
  whatever kernel it lands in), and cuBLAS loaded by hand (ctypes is refused under ``block``).

``torch.cuda._sleep`` is the known cost: a kernel that spins for a number of cycles, measured in this process
with events before the inner sessions run.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pytest
import torch
from inner import make_wheel, run_inner

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA attacks need a CUDA GPU; none here")]

ARGS = ("-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-repeat=3", "--cann-warmup=1",
        "--cann-case-timeout=60", "--cann-device=cuda")
SOFTPLUS = ("softplus[01]", "softplus[02]", "softplus[03]", "softplus[04]")
REAL = "torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold).to(x.dtype)"
BUNDLED = Path(__file__).resolve().parents[2] / "tasks"
SLEEP_CYCLES = 4_000_000  # about 2 ms on a 2 GHz card


@pytest.fixture(scope="module")
def sleep_us() -> float:
    """What ``torch.cuda._sleep(SLEEP_CYCLES)`` costs on this card (median of 5, events)."""
    torch.cuda._sleep(1000)
    times = []
    for _ in range(5):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        torch.cuda._sleep(SLEEP_CYCLES)
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e3)
    return sorted(times)[2]


def softplus_submission(pytester, body: str) -> Path:
    source = Path(pytester.path) / "sub"
    code = f"import torch\n\nCYCLES = {SLEEP_CYCLES}\n\n\ndef softplus(x, beta=1.0, threshold=20.0):\n{body}"
    make_wheel(source / "dist", {"cann_bench/__init__.py": code})
    return source


def grade(pytester, capsys, tasks: Path, source: Path, *extra: str):
    run = run_inner(pytester, capsys, tasks, *ARGS, f"--cann-tasks={tasks}", f"--cann-source={source}", *extra)
    board = json.loads((Path(pytester.path) / "reports" / "leaderboard.json").read_text())
    return run, board


SIDE_STREAM_UNJOINED = f"""    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    out = torch.empty_like(x)
    with torch.cuda.stream(side):
        torch.cuda._sleep(CYCLES)
        out.copy_({REAL})
    return out  # the caller's stream never waits for the side stream
"""

DEFERRED_AFTER_RESULT = f"""    out = {REAL}
    torch.cuda._sleep(CYCLES)  # queued after the result: still running when the call returns
    return out
"""


HOST_WORK = f"""    import time
    y = {REAL.replace("x.float()", "x.cpu().float()")}  # stands for the submission's own loop on the host
    deadline = time.perf_counter() + HOST_S  # as long as the spin takes on this card: the card idles meanwhile
    while time.perf_counter() < deadline:
        pass
    return y.to(x.device)
"""


@pytest.mark.parametrize("body", [SIDE_STREAM_UNJOINED, DEFERRED_AFTER_RESULT, HOST_WORK],
                         ids=["side_stream", "deferred", "host_work"])
def test_work_hidden_from_the_timer_is_timed(body, pytester, capsys, task_tree, sleep_us):
    """Right answers, so the cases pass; but every timed call carries the spin, whichever stream ran it, whether
    or not it was still running when the call returned, and whether the card or the host did it (a timer that
    adds up kernels alone would see only the copy of a result the host computed)."""
    body = body.replace("HOST_S", repr(sleep_us / 1e6))
    run, _board = grade(pytester, capsys, task_tree("submission"), softplus_submission(pytester, body),
                        "--cann-guard=off")
    for name in SOFTPLUS:
        case = run.cases[name].cann
        assert case["status"] == "passed", (name, case["failure_type"], case["message"])
        t = case["timing"]
        assert t["device"] == "cuda:0" and t["timer"] in ("cuda_profiler", "cuda_events"), t
        assert t["t_cand_us"] >= 0.8 * sleep_us, (name, t["t_cand_us"], sleep_us, t["timer"])


def test_aten_cuda_kernels_are_builtin_compute(pytester, capsys, task_tree):
    run, board = grade(pytester, capsys, task_tree("submission"), softplus_submission(pytester, f"    return {REAL}\n"),
                       "--cann-guard=block")
    for name in SOFTPLUS:
        case = run.cases[name].cann
        assert case["failure_type"] == "builtin_compute", (name, case["failure_type"], case["message"])
        assert "aten::softplus" in case["message"], case["message"]
    softplus = next(op for op in board["operators"] if op["rel_path"] == "level1/softplus")
    assert softplus["score"] == 0


CUBLAS_BMM = """import torch


def batch_matmul(a, b):
    return torch.bmm(a, b)  # cuBLAS through ATen
"""

# the same place the test looks before it runs (a torch build with its own nvidia-cublas wheel)
CUBLAS_GLOB = "os.path.join(os.path.dirname(torch.__file__), '..', 'nvidia', '**', 'libcublas.so*')"
CUBLAS_BY_HAND = f"""import ctypes
import glob
import os

import torch


def batch_matmul(a, b):
    # cuBLAS loaded by hand, where the profiler's op tree would not show an aten op
    ctypes.CDLL(sorted(glob.glob({CUBLAS_GLOB}, recursive=True))[0])
    return torch.bmm(a, b)
"""


@pytest.mark.parametrize("code, expect, needle", [(CUBLAS_BMM, {"builtin_compute"}, "aten::bmm"),
                                                  (CUBLAS_BY_HAND, {"host_library"}, "ctypes")],
                         ids=["aten_bmm", "ctypes_cublas"])
def test_cublas_delegation_scores_zero(code, expect, needle, pytester, capsys, task_tree, tmp_path):
    here = os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "**", "libcublas.so*")
    if "ctypes" in code and not glob.glob(here, recursive=True):
        pytest.skip("this torch build has no libcublas of its own (nvidia-cublas wheel) to load by hand")
    source = Path(pytester.path) / "sub"
    make_wheel(source / "dist", {"cann_bench/__init__.py": code})
    tasks = BUNDLED / "level3" / "batch_matmul"
    run, board = grade(pytester, capsys, tasks, source, "--cann-guard=block", "--cann-no-perf")
    assert run.cases, run.text[-3000:]
    for name, c in run.cases.items():
        case = c.cann
        assert case["failure_type"] in expect, (name, case["failure_type"], case["message"])
        assert needle in case["message"], (name, case["message"])
    op = next(op for op in board["operators"] if op["rel_path"].endswith("batch_matmul"))
    assert op["score"] == 0

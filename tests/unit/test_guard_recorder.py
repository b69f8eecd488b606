"""The guard's own recorder in a real worker-like process: the canary proves recording alive on every call,
the Python switches are sealed, and rebinding a guard helper changes nothing but is reported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from pytest_cannbench.guard import builtin_ops, recorder

PROBE = textwrap.dedent("""
    import json, os, sys, torch
    from pytest_cannbench.guard.runtime import Guard
    switch = torch._C._autograd._enable_record_function  # what C++ could still reach after the seal
    guard = Guard("block", "cpu", os.getcwd(), [])
    x = torch.ones(64)
    def honest(x):
        out = torch.empty_like(x)
        out.copy_(x)
        return out
    def left_off(x):
        switch(False)
        return torch.exp(x)
    def python_switch(x):
        torch.autograd._enable_record_function(False)
        return torch.exp(x)
    def rebound(x):
        import pytest_cannbench.guard.builtin_ops as b, pytest_cannbench.guard.recorder as r
        b.is_allowed = lambda op, own=None: True
        r.read_trace = lambda events, allowed: r.Trace(1, 1, [])
        return torch.exp(x)
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    def redispatched(x):  # below RecordFunction: only the guard's wrapper names it
        return torch.ops.aten.exp.default.redispatch(keys, x)
    out = {}
    for fn in (honest, left_off, python_switch, redispatched, rebound):
        try:
            guard.call(fn, {"x": x})
        except PermissionError as exc:
            out[fn.__name__ + "_raised"] = str(exc)
        switch(True)
        out[fn.__name__] = guard.report()
    print(json.dumps(out))
""")


def run_probe() -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                          cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def kinds(found: list[dict]) -> dict[str, str]:
    return {f["kind"]: f["detail"] for f in found}


def test_canary_seal_and_pinned_helpers_in_a_real_process():
    out = run_probe()
    assert out["honest"] == []
    left_off = kinds(out["left_off"])  # recording off: no exp in the trace, and no canary either
    assert "canary" in left_off.get("api_tampered", "") and "builtin_compute" not in left_off
    assert "_enable_record_function" in out["python_switch_raised"]
    assert "_enable_record_function" in kinds(out["python_switch"])["api_tampered"]
    assert kinds(out["redispatched"]) == {"builtin_compute": "ran builtin op(s) aten::exp"}
    rebound = kinds(out["rebound"])  # the guard kept its own references: exp is still seen, the rebinding too
    assert "aten::exp" in rebound["builtin_compute"]
    assert "was replaced" in rebound["api_tampered"]


def test_read_trace_counts_canaries_per_marker():
    events = [(recorder.MARK, 0, 100, True, 1), ("aten::exp", 10, 20, False, 1),
              (recorder.CANARY_OP, 30, 40, False, 1),  # the submission's own fill_: not the last, allowed
              ("aten::neg_", 45, 48, False, 1),  # its compute: found
              ("aten::sigmoid", 50, 95, False, 2),  # a helper thread's op after the canary: still seen
              (recorder.CANARY_OP, 85, 90, False, 1),  # ours: the marker thread's last op
              (recorder.MARK, 200, 300, True, 1), (recorder.CANARY_OP, 210, 220, False, 1),
              ("aten::empty", 230, 240, False, 1)]  # the canary is not last: recording was off when it ran
    trace = recorder.read_trace(events, builtin_ops.is_allowed)
    assert (trace.marks, trace.canaries) == (2, 1)
    assert trace.ops == ["aten::exp", "aten::neg_", "aten::sigmoid"]


def test_own_namespaces_are_those_the_submission_brought():
    before = frozenset({"aten::exp", "prims::exp", "quantized::add"})
    now = before | {"myns::exp_kernel", "myns::other", "torchvision::nms", "aten::new_op", "quantized::mul"}
    own = builtin_ops.own_namespaces(before, now)
    assert own == {"myns", "cann_bench"}
    assert builtin_ops.is_allowed("myns::exp_kernel", own) and not builtin_ops.is_allowed("myns::exp_kernel")
    assert not builtin_ops.is_allowed("torchvision::nms", own) and not builtin_ops.is_allowed("aten::new_op", own)

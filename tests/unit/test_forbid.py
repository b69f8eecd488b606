"""Builtin kernels closed at the dispatcher (guard/forbid.py), in a real worker-like process: every path to a
forbidden op meets the refusal (and leaves a finding naming the op), allowed ops and the worker's own per-call work
still run, the libraries holding the registrations cannot be reached, and rewriting the refusal is tampering.
The C++ paths (at::exp, at::_ops, findSchema + call/callBoxed, redispatch) are in
tests/adversarial/test_dispatcher_closed.py, which compiles them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from pytest_cannbench.guard import forbid

PROBE = textwrap.dedent("""
    import gc, json, mmap, os, torch
    from pytest_cannbench.guard.runtime import Guard
    from pytest_cannbench.timing.in_worker import Flusher
    from pytest_cannbench.workers import tensor_wire
    def libraries():  # pybind objects are not tracked by gc: look among what every tracked object refers to
        return sum(type(r).__name__ == "_DispatchModule" for o in gc.get_objects() for r in gc.get_referents(o))
    guard = Guard("block", "cpu", os.getcwd(), [])
    before = libraries()  # torch's own Python registrations
    closed = guard.close_builtin_kernels()
    reachable = libraries() - before
    x = torch.rand(8, 8) if False else torch.ones(8, 8)
    K = torch._C.DispatchKeySet
    D = torch._C.DispatchKey
    paths = {
        "python": lambda: torch.exp(x),
        "tensor_method": lambda: x.sigmoid(),
        "operator": lambda: x + x,
        "torch_ops_aten": lambda: torch.ops.aten.exp.default(x),
        "softmax_composite": lambda: torch.softmax(x, 1),
        "gelu": lambda: torch.nn.functional.gelu(x),
        "matmul": lambda: x @ x,
        "linear": lambda: torch.nn.functional.linear(x, x),
        "conv2d_mkldnn": lambda: torch.nn.functional.conv2d(torch.ones(1, 1, 8, 8), torch.ones(1, 1, 3, 3)),
        "mkldnn_namespace": lambda: torch.ops.mkldnn._linear_pointwise(x, x, None, "none", [], ""),
        "fbgemm_composite": lambda: torch.fbgemm_pack_gemm_matrix_fp16(x),
        "redispatch_cpu": lambda: torch.ops.aten.exp.default.redispatch(K(D.CPU), x),
        "redispatch_privateuse1": lambda: torch.ops.aten.xlogy.Scalar_Self.redispatch(K(D.PrivateUse1), 2.0, x),
        "redispatch_xla": lambda: torch.ops.aten.xlogy.Scalar_Self.redispatch(K(D.XLA), 2.0, x),
        "call_boxed": lambda: torch._C._dispatch_call_boxed(torch._C._dispatch_find_schema_or_throw("aten::exp", ""),
                                                            x),
        "computed_kernel": lambda: torch._C._dispatch_get_computed_kernel_for_dispatch_key(
            "aten::exp", D.CPU).call_boxed(K(D.CPU), x),
        "repr": lambda: repr(x),
    }
    out = {"closed": [closed.ops, closed.registrations], "refused": {}, "findings": {}}
    for name, fn in paths.items():
        try:
            fn()
            out["refused"][name] = None
        except Exception as exc:
            out["refused"][name] = str(exc)
        out["findings"][name] = [p["detail"] for p in guard.report() if p["kind"] == "builtin_compute"]
    # what the worker itself does per call, and what honest code allocates, views and copies
    allowed = {
        "allocation": lambda: (torch.empty(4), torch.zeros(3), torch.ones_like(x), torch.full((2,), 3.0),
                               torch.tensor([1.0, 2.0]), torch.empty_strided((2, 2), (1, 2))),
        "views": lambda: (x.t().reshape(-1), x.view(64), x.split(2), x.chunk(2), x.flatten(), x.unbind(),
                          x.movedim(0, 1), x.narrow(0, 1, 2), x[1:3, ::2], x.expand(2, 8, 8), x.unsqueeze(0)),
        "copies": lambda: (x.clone(), x.t().contiguous(), x.to(torch.float64), x.to(torch.bool), torch.cat([x, x]),
                           torch.stack([x, x]), x[0, 0].item(), torch.empty(8, 8).copy_(x), x.detach().cpu()),
        "metadata": lambda: (x.is_floating_point(), x.is_complex(), x.untyped_storage().data_ptr(), x.numel()),
        "flusher": lambda: Flusher("cpu").flush(),
    }
    region = mmap.mmap(-1, 1 << 20)
    def wire():
        desc = tensor_wire.write_outputs(region, 1 << 20, [x.t()], 0, 1 << 19, {})
        tensor_wire.poison([x.clone()], [{"kind": "tensor"}])
        return desc
    allowed["wire"] = wire
    allowed["guard_call"] = lambda: guard.call(lambda x: torch.empty_like(x).copy_(x), {"x": x})
    out["allowed"] = {}
    for name, fn in allowed.items():
        try:
            fn()
            out["allowed"][name] = None
        except Exception as exc:
            out["allowed"][name] = f"{type(exc).__name__}: {exc}"
    out["allowed_findings"] = guard.report()
    out["reachable_libraries"] = reachable
    from pytest_cannbench.guard import forbid
    forbid.Refusal.__call__ = lambda self, *a, **k: None
    out["tampered"] = guard.report()
    print(json.dumps(out))
""")


def run_probe() -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300,
                          cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_path_to_a_forbidden_op_is_refused_and_allowed_work_still_runs():
    out = run_probe()
    ops, registrations = out["closed"]
    assert ops > 2000 and registrations >= ops
    named = {"python": "aten::exp", "tensor_method": "aten::sigmoid", "operator": "aten::add.Tensor",
             "torch_ops_aten": "aten::exp", "softmax_composite": "aten::softmax.int", "gelu": "aten::gelu",
             "matmul": "aten::matmul", "linear": "aten::linear", "conv2d_mkldnn": "aten::conv2d",
             "mkldnn_namespace": "mkldnn::_linear_pointwise", "fbgemm_composite": "aten::fbgemm_pack_gemm_matrix_fp16",
             "redispatch_cpu": "aten::exp", "redispatch_privateuse1": "aten::xlogy.Scalar_Self",
             "redispatch_xla": "aten::xlogy.Scalar_Self", "call_boxed": "aten::exp", "computed_kernel": "aten::exp"}
    for path, op in named.items():
        message = out["refused"][path]
        assert message is not None, f"{path} ran {op}"
        assert f"{op} is builtin compute" in message and "refused at the dispatcher" in message, (path, message)
        assert forbid.finding(op) in out["findings"][path], (path, out["findings"][path])
    assert out["refused"]["repr"] is not None  # printing a tensor computes (isfinite, abs, max...)
    assert all(error is None for error in out["allowed"].values()), out["allowed"]
    assert out["allowed_findings"] == [], out["allowed_findings"]
    assert out["reachable_libraries"] == 0
    assert any(p["kind"] == "api_tampered" and "Refusal.__call__" in p["detail"] for p in out["tampered"])


def test_what_is_closed_and_where():
    assert forbid.forbidden("aten::exp") and forbid.forbidden("aten::add.Tensor") and forbid.forbidden("mkldnn::x")
    assert not forbid.forbidden("aten::empty.memory_format") and not forbid.forbidden("aten::copy_")
    assert not forbid.forbidden("profiler::_record_function_enter_new")
    assert {"CPU", "CUDA", *forbid.ALIAS_KEYS} <= set(forbid.keys_for("cpu")) == set(forbid.keys_for("cuda:0"))
    assert "Meta" not in forbid.keys_for("cuda") and forbid.keys_for("npu:0") == ()

"""The native reference deferred on a case's further input sets (timed sets, the second pass; issue 22).

A timed set's or second pass's verdict only reads the native reference when MERE and MARE do not pass it, so the
golden worker is asked ``like`` the case's first reference and skips it; the judge runs it when a verdict needs
it. These tests hold the verdicts to those taken against the full reference, through a real golden worker.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from pytest_cannbench import outcome as oc
from pytest_cannbench.judge.case import OperatorCase
from pytest_cannbench.judge.goldens import GoldenService
from pytest_cannbench.taskformat.spec import load_operator
from pytest_cannbench.workers.golden_binding import describe
from pytest_cannbench.workers.golden_client import GoldenWorker
from pytest_cannbench.workers.golden_main import prepare

GOLDEN = textwrap.dedent("""
    import torch

    def soft(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return torch.nn.functional.gelu(x) * scale

    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def picks(x: torch.Tensor) -> torch.Tensor:
        return x[x > 0].contiguous()  # how many depends on the values: no input set describes another's shape
""")


def _task(tmp_path: Path, name: str = "soft", dtype: str = "float16", shape: str = "[[64, 129]]"):
    root = tmp_path / "tasks"
    op = root / "level1" / name
    op.mkdir(parents=True)
    (op / "golden.py").write_text(GOLDEN)
    attrs = "  attrs:\n  - {name: scale, type: float, default: 1.0, description: s}\n" if name == "soft" else ""
    (op / "proto.yaml").write_text(
        f"operator:\n  name: {name.title()}\n  category: Elementwise\n  difficulty: L1\n  formula: y = f(x)\n"
        f"  description: d\n  shape_support: any\n{attrs}"
        f"  inputs:\n  - {{name: x, dtype: [{dtype}], description: x}}\n"
        f"  outputs:\n  - {{name: y, dtype: [{dtype}], description: y}}\n"
        f"  schema: {name}(Tensor x) -> Tensor y\n")
    (op / "cases.yaml").write_text(
        f"cases:\n- {{operator: {name.title()}, case_id: 1, input_shape: {shape}, dtype: [{dtype}], "
        f"value_range: [-6, 6], note: a}}\n")
    return load_operator(op, root)


@pytest.fixture
def service(tmp_path):
    settings = SimpleNamespace(input_dist="uniform", input_compat="fixed", golden_precision="fp64_cpu",
                               golden_timeout_s=120.0, checker="relative_error", seed=0, secret="", self_check=False)
    svc = GoldenService(settings=settings, worker=GoldenWorker(log_path=tmp_path / "golden.log",  # type: ignore[arg-type]
                                                               memory_bytes=8 << 30, threads=1), cache=None)
    yield svc
    svc.close()


def _case(task, svc: GoldenService) -> OperatorCase:
    return OperatorCase(task=task, case=task.cases[0], settings=svc.settings, service=lambda: svc)  # type: ignore[arg-type]


def _asks(svc: GoldenService) -> int:
    return svc._replies // 2  # every prepare names a reply file and an inputs file


def _verdict(result) -> tuple:
    return (result.status, result.failure_type, result.message,
            [(a["passed"], a["rule"], a["failure_type"]) for a in result.accuracy])


def test_a_further_input_set_skips_the_reference_and_rounds_the_golden_the_same_way(tmp_path, service) -> None:
    task = _task(tmp_path)
    first = service.fetch(task, task.cases[0], 11)
    lean = service.fetch(task, task.cases[0], 22, like=first)
    full = service.fetch(task, task.cases[0], 22)
    assert first.native is not None and not first.native_deferred
    assert lean.native_deferred and lean.native is None and lean.expected == [torch.float16]
    assert not full.native_deferred and full.native is not None
    assert lean.seconds.get("native", 0.0) < 0.01  # the reference did not run
    (g_lean,), (g_full,) = lean.golden, full.golden
    assert g_lean.dtype == g_full.dtype == torch.float16  # the fp64 truth rounded to the native dtype
    assert torch.equal(g_lean.view(torch.int16), g_full.view(torch.int16))
    assert torch.equal(lean.inputs[0], full.inputs[0])


def test_a_verdict_the_relative_errors_pass_never_runs_the_reference(tmp_path, service) -> None:
    task = _task(tmp_path, name="twice", dtype="float32")
    source = _case(task, service)
    first = source.prepare(11)
    lean = source.prepare(22, like=first)
    full = service.fetch(task, task.cases[0], 22)
    assert lean.native_deferred
    good = [full.native[0].clone()]  # the native reference itself passes on MERE and MARE
    asked = _asks(service)
    result = source.judge(good, lean, stats=False)
    assert _asks(service) == asked, "the reference was run for a verdict MERE and MARE decide"
    assert _verdict(result) == _verdict(source.judge(good, full, stats=False))
    assert result.status == oc.PASSED and result.accuracy[0]["rule"] == "fast_path"


@pytest.mark.parametrize("wrong", ["scaled", "dtype", "nan"])
def test_any_other_verdict_is_taken_again_with_the_reference(tmp_path, service, wrong) -> None:
    task = _task(tmp_path)
    source = _case(task, service)
    first = source.prepare(11)
    lean = source.prepare(22, like=first)
    full = service.fetch(task, task.cases[0], 22)
    out = full.native[0].clone()
    if wrong == "scaled":
        out = out * 1.01
    elif wrong == "dtype":  # more precise than asked: only the expected dtype (from the first set) catches it
        out = full.golden[0].to(torch.float32)
    else:
        out[3, 5] = float("nan")
    asked = _asks(service)
    result = source.judge([out], lean, stats=False)
    assert result.status != oc.PASSED
    assert _asks(service) == asked + 1  # the reference ran once, for this verdict
    assert _verdict(result) == _verdict(source.judge([out], full, stats=False))


def test_a_pass_the_regions_decide_is_taken_with_the_reference(tmp_path, service) -> None:
    """gelu's flat tail: the native float16 output fails MERE/MARE against the truth, the regions pass it."""
    task = _task(tmp_path)
    source = _case(task, service)
    first = source.prepare(11)
    lean = source.prepare(22, like=first)
    full = service.fetch(task, task.cases[0], 22)
    native = [full.native[0].clone()]
    expected = source.judge(native, full, stats=False)
    if expected.accuracy[0]["rule"] != "region":
        pytest.skip(f"this torch decides the native output by {expected.accuracy[0]['rule']}, not the regions")
    asked = _asks(service)
    assert _verdict(source.judge(native, lean, stats=False)) == _verdict(expected)
    assert _asks(service) == asked + 1


def test_full_statistics_always_get_the_reference(tmp_path, service) -> None:
    task = _task(tmp_path, name="twice", dtype="float32")
    source = _case(task, service)
    lean = source.prepare(22, like=source.prepare(11))
    full = service.fetch(task, task.cases[0], 22)
    result = source.judge([full.native[0].clone()], lean)  # stats=True: the report reads the native figures
    assert result.accuracy[0]["native_mere"] is not None


def test_outputs_whose_shape_depends_on_the_values_run_the_reference(tmp_path) -> None:
    task = _task(tmp_path, name="picks", dtype="float32", shape="[[1000]]")
    req = {"op_dir": str(task.op_dir), "rel_path": task.rel_path, "function_name": "picks", "name_lower": "picks",
           "golden_sha256": "", "input_names": ["x"], "output_names": ["y"], "case": task.cases[0].raw,
           "dist": "uniform", "compat": "fixed", "precision": "fp64_cpu"}
    first = prepare({**req, "seed": 1})
    assert first["ok"] and not first["native_deferred"]
    second = prepare({**req, "seed": 2, "like": describe(first["native"])})
    assert second["ok"]
    assert second["golden"][0].shape != first["native"][0].shape  # another count of positive values
    assert not second["native_deferred"] and second["native"] is not None  # so the reference ran


def test_nothing_stands_in_for_outputs_that_are_not_tensors() -> None:
    assert describe([torch.ones(2, dtype=torch.bfloat16)]) == [["bfloat16", [2]]]
    assert describe([torch.ones(2), 3.0]) is None


def test_only_cases_whose_first_verdict_read_no_native_reference_defer_it() -> None:
    from pytest_cannbench.judge.precision import decided_without_native

    assert decided_without_native([{"passed": True, "rule": "fast_path"}, {"passed": True, "rule": "bit_exact"}])
    assert not decided_without_native([{"passed": True, "rule": "fast_path"}, {"passed": True, "rule": "region"}])
    assert not decided_without_native([{"passed": False, "rule": "fast_path"}])
    assert not decided_without_native([])  # no outputs judged: nothing says the sets are alike

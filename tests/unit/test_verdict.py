"""The verdict of one case is pure: ``judge`` on real tensors, with no golden service or worker.

The golden data is made here as the golden worker would (fp64 truth, float32 native reference) for the
``basic`` fixture's Axpy case 1 (``y = x1 + alpha * x2``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pytest_cannbench import outcome as oc
from pytest_cannbench.judge.case import apply_get_output, judge
from pytest_cannbench.judge.goldens import GoldenData
from pytest_cannbench.options import settings_from_config
from pytest_cannbench.taskformat.spec import load_operator

BASIC = Path(__file__).resolve().parents[1] / "fixtures" / "basic"


@pytest.fixture
def axpy():
    task = load_operator(BASIC / "level1" / "axpy", BASIC)
    case = next(c for c in task.cases if c.case_id == 1)
    gen = torch.Generator().manual_seed(0)
    x1, x2 = (torch.rand(32, 32, generator=gen) * 2 - 1 for _ in range(2))
    truth = x1.double() + 2.0 * x2.double()

    def data(has_get_output: bool = False) -> GoldenData:
        return GoldenData(make_inputs=lambda: [x1, x2], binding=(), golden=[truth], native=[truth.float()],
                          native_error=None, has_get_output=has_get_output, cached=False)

    return task, case, truth, data


def test_right_outputs_pass(axpy, pytestconfig):
    task, case, truth, data = axpy
    result = judge(task, case, data(), [truth.float()], settings_from_config(pytestconfig))
    assert result.status == oc.PASSED and result.failure_type is None
    assert result.key == "level1/axpy_1" and result.accuracy[0]["passed"]


def test_wrong_values_fail_on_precision(axpy, pytestconfig):
    task, case, truth, data = axpy
    result = judge(task, case, data(), [(truth + 0.5).float()], settings_from_config(pytestconfig))
    assert (result.status, result.failure_type) == (oc.FAILED, oc.PRECISION)


def test_wrong_shape_is_structural(axpy, pytestconfig):
    task, case, truth, data = axpy
    result = judge(task, case, data(), [truth.float()[:16]], settings_from_config(pytestconfig))
    assert (result.status, result.failure_type) == (oc.FAILED, oc.STRUCTURAL)


def test_a_get_output_task_is_judged_after_the_hook(axpy, pytestconfig):
    task, case, truth, data = axpy
    settings = settings_from_config(pytestconfig)
    with pytest.raises(ValueError, match="get_output"):
        judge(task, case, data(True), [truth.float()], settings)  # the hook's step was skipped

    def halve_all(outputs: dict) -> dict:  # a hook that changes every side alike
        return {k: None if v is None else [t / 2 for t in v] for k, v in outputs.items()}

    outputs = apply_get_output(data(True), [truth.float()], halve_all)
    assert torch.equal(outputs.golden[0], truth / 2) and outputs.raw[0] is not outputs.candidate[0]
    assert judge(task, case, data(True), outputs, settings).status == oc.PASSED

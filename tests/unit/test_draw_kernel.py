"""The input draw's compiled kernel (taskformat.draw_kernel): torch's float64 uniform draw, the same bits.

Inputs are compared bit for bit, kernel against torch, through the real generator (``generate_inputs``) and
through the generator's state afterwards, for sizes that make the kernel build and cross the engine's blocks."""

from __future__ import annotations

import pytest
import torch

from pytest_cannbench import cbuild
from pytest_cannbench.taskformat import draw_kernel
from pytest_cannbench.taskformat.generate import generate_inputs
from pytest_cannbench.taskformat.inputs import plan_inputs

needs_cc = pytest.mark.skipif(cbuild.compiler() is None, reason="no C compiler")


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8)


@pytest.fixture
def fresh(monkeypatch):
    """A process that has not decided yet (the decision is once per process)."""
    monkeypatch.setattr(draw_kernel, "_state", {})
    monkeypatch.delenv(draw_kernel.ENV_SWITCH, raising=False)


@needs_cc
def test_the_built_kernel_passes_its_self_test(fresh) -> None:
    kernel = draw_kernel.load()
    assert kernel is not None, draw_kernel.note()
    assert draw_kernel.note().startswith("kernel, built with ") and draw_kernel.self_test(kernel) == ""


@needs_cc
@pytest.mark.parametrize("dist", ["uniform", "normal"])
def test_generated_inputs_are_the_same_bits_with_and_without_it(dist, fresh, monkeypatch) -> None:
    big = 1 << 20  # MIN_DRAW: the first such draw builds the kernel
    plans = plan_inputs(["x", "y", "z", "n"], [[big + 311], [3, 7], [1025, 1023], [4]],
                        ["float32", "float16", "bfloat16", "int32"], [[-3, 5], [0, 1], [1e-3, 1e3], [-9, 9]])
    ours = generate_inputs(plans, 20261205, dist=dist, compat="official")
    used = draw_kernel.note()
    monkeypatch.setattr(draw_kernel, "_state", {})
    monkeypatch.setenv(draw_kernel.ENV_SWITCH, "0")
    theirs = generate_inputs(plans, 20261205, dist=dist, compat="official")
    if dist == "uniform":
        assert used.startswith("kernel") and draw_kernel.note() == "torch (CANNBENCH_DRAW_KERNEL=0)"
    else:  # normal draws never ask for it
        assert used == draw_kernel.note() == ""
    assert len(ours) == len(theirs) == 4
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def test_small_draws_never_build_it(fresh) -> None:
    plans = plan_inputs(["x"], [[64, 64]], ["float32"], [[-1, 1]])
    generate_inputs(plans, 1, dist="uniform", compat="official")
    assert "kernel" not in draw_kernel._state and draw_kernel.note() == ""


@needs_cc
def test_a_state_it_does_not_read_is_left_to_torch(fresh) -> None:
    kernel = draw_kernel.load()
    assert kernel is not None
    good = torch.Generator().manual_seed(5).get_state()
    out = torch.full((10,), -1.0, dtype=torch.float64)
    for bad_left in ([255, 255, 0, 0], [0, 0, 0, 0]):  # "left" beyond the engine's 624 words, or none
        state = good.clone()
        state[8:12] = torch.tensor(bad_left, dtype=torch.uint8)
        assert not kernel.fill(state, out)
        assert bool((out == -1.0).all()) and torch.equal(state[12:], good[12:])  # nothing drawn, nothing moved
    state = good.clone()
    state[24 + 4:24 + 8] = 1  # a state word over 32 bits
    assert not kernel.fill(state, out) and bool((out == -1.0).all())
    assert not kernel.fill(good[:100], out)  # shorter than an engine state
    assert kernel.fill(good.clone(), out) and bool((out >= 0).all())


def test_switched_off_or_without_a_compiler_torch_draws(fresh, monkeypatch) -> None:
    monkeypatch.setenv(draw_kernel.ENV_SWITCH, "0")
    assert draw_kernel.kernel_for(1 << 30) is None and draw_kernel.note() == "torch (CANNBENCH_DRAW_KERNEL=0)"
    monkeypatch.setattr(draw_kernel, "_state", {})
    monkeypatch.delenv(draw_kernel.ENV_SWITCH)
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert draw_kernel.load() is None
    assert draw_kernel.note().startswith("torch: /nonexistent/cc could not build it")

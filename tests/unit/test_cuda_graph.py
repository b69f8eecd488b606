"""CUDA-graph timing (timing/cuda_graph.py): the pure parts here, the graph itself on a GPU (marker ``cuda``)."""

from __future__ import annotations

import pytest
import torch

from pytest_cannbench.timing import cuda_graph as cg
from pytest_cannbench.timing.cuda_graph import (
    FALLBACK_TIMER,
    GRAPH_TIMER,
    LAUNCH_BOUND_S,
    graph_batch,
    subtract,
    wants_graph,
)
from pytest_cannbench.timing.in_worker import run_batch

NO_GPU = "CUDA graphs need a CUDA GPU; none here (run `pytest -m cuda` on one)"


@pytest.mark.parametrize("mode, device, median, expected", [
    ("on", "cuda:0", None, True),
    ("on", "cuda:0", 1.0, True),  # on: whatever the call costs
    ("auto", "cuda:0", 10e-6, True),
    ("auto", "cuda:0", LAUNCH_BOUND_S, False),  # at the bound: not launch-bound
    ("auto", "cuda:0", 2e-3, False),
    ("auto", "cuda:0", None, False),  # no eager median: eager
    ("auto", "cuda:0", 0.0, False),
    ("off", "cuda:0", 1e-6, False),
    ("on", "cpu", 1e-6, False),  # unreachable off CUDA
    ("on", "npu:0", 1e-6, False),
    ("auto", "npu:0", 1e-6, False),
    ("bogus", "cuda:0", 1e-6, False),
])
def test_the_auto_decision(mode, device, median, expected):
    assert wants_graph(mode, device, median) is expected


def test_subtraction_and_its_plausibility():
    calls, why = subtract([50e-6, 52e-6, 51e-6], [45e-6, 46e-6, 44e-6])
    assert calls == pytest.approx([5e-6, 7e-6, 6e-6]) and why == ""  # each total less the clears' median
    calls, why = subtract([50e-6, 45.5e-6], [45e-6, 46e-6])
    assert calls is None and "replay 2" in why and "not positive" in why  # the clear's jitter exceeds the call
    assert subtract([50e-6], [50e-6])[0] is None  # zero is not a time
    assert subtract([], [])[0] is None and subtract([1e-3], [])[0] is None


def test_fresh_sets_copy_into_the_capture_buffers_or_refuse():
    static = {"x": torch.zeros(4), "xs": [torch.zeros(2), torch.zeros(3)], "beta": 1.0}
    fresh = {"x": torch.arange(4.0), "xs": [torch.ones(2), torch.full((3,), 2.0)], "beta": 1.0}
    pointer = static["x"].data_ptr()
    assert cg._copy_into(static, fresh)
    assert torch.equal(static["x"], fresh["x"]) and static["x"].data_ptr() == pointer  # the same buffer
    assert torch.equal(static["xs"][1], fresh["xs"][1])
    assert not cg._copy_into(static, dict(fresh, x=torch.zeros(5)))  # another shape
    assert not cg._copy_into(static, dict(fresh, x=torch.zeros(4, dtype=torch.float64)))
    assert not cg._copy_into(static, dict(fresh, beta=2.0))  # a scalar frozen at capture
    assert not cg._copy_into(static, {"x": torch.zeros(4)})
    clone = cg._clone(fresh)
    assert clone["xs"][0].data_ptr() != fresh["xs"][0].data_ptr() and clone["beta"] == 1.0


def test_outputs_aliasing_inputs_are_seen_and_buffers_poisoned():
    x, other = torch.zeros(4), torch.zeros(4)
    assert cg._aliases((x[1:], torch.ones(1)), {"x": x})  # a view of the input
    assert not cg._aliases(other, {"x": x, "n": 3})
    out = (torch.ones(2), torch.ones(2, dtype=torch.int32), torch.ones(2, dtype=torch.bool))
    cg._poison(out)
    assert torch.isnan(out[0]).all() and (out[1] == 77).all() and out[2].all()


def test_graph_mode_is_unreachable_off_cuda():
    calls = []

    def fn(x):
        calls.append(x)
        return x + 1

    notes: list[str] = []
    assert graph_batch(fn, {"x": torch.ones(2)}, lambda i: {"x": torch.ones(2)}, 2, "cpu", "on",
                       lambda: None, lambda i, r: None, notes) is None
    assert graph_batch(fn, {"x": torch.ones(2)}, lambda i: {"x": torch.ones(2)}, 2, "npu:0", "on",
                       lambda: None, lambda i, r: None, notes) is None
    assert calls == [] and notes == []
    outs: dict[int, torch.Tensor] = {}
    times = run_batch(fn, {"x": torch.ones(2)}, lambda i: {"x": torch.full((2,), float(i))}, 3, 1, "cpu",
                      __import__("time").perf_counter, None, lambda i, r: outs.__setitem__(i, r.clone()),
                      graph="on")
    assert times.timer == "cpu_clock" and len(times.seconds) == 3 and torch.equal(outs[2], torch.full((2,), 3.0))


# --------------------------------------------------------------------------------------------
# on a GPU


def _batch(fn, mode: str, count: int = 4):
    from pytest_cannbench.timing.in_worker import Flusher

    sets = [{"x": torch.randn(1024, device="cuda")} for _ in range(count)]
    fetched: list[int] = []
    outs: dict[int, torch.Tensor] = {}

    def fetch(i):
        fetched.append(i)
        return sets[i]

    notes: list[str] = []
    got = graph_batch(fn, {"x": torch.randn(1024, device="cuda")}, fetch, count, "cuda:0", mode,
                      Flusher("cuda:0").flush, lambda i, r: outs.__setitem__(i, r.clone()), notes)
    return got, sets, outs, fetched, notes


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_graph_replays_are_timed_and_each_output_is_its_own_sets():
    got, sets, outs, fetched, notes = _batch(lambda x: torch.nn.functional.softplus(x) * 2, "on")
    assert got is not None, notes
    seconds, timer = got
    assert timer == GRAPH_TIMER and len(seconds) == 4 and all(0 < s < 1e-3 for s in seconds)
    assert fetched == [0, 1, 2, 3]
    for i, s in enumerate(sets):  # the replay read the set copied into the capture's buffers
        torch.testing.assert_close(outs[i], torch.nn.functional.softplus(s["x"]) * 2)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_a_call_that_syncs_falls_back_before_any_set_is_fetched():
    def syncing(x):
        if x.sum().item() > 1e30:  # a value read to the host: not capturable
            return x
        return x * 2

    got, _, _, fetched, notes = _batch(syncing, "on")
    assert got is None and fetched == [] and "capture failed" in notes[0]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_auto_leaves_a_long_call_eager():
    def long(x):
        y = x
        for _ in range(400):
            y = y * 1.0000001
        return y

    got, _, _, fetched, notes = _batch(long, "auto")
    assert got is None and fetched == [] and "not launch-bound" in notes[0]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_an_in_place_call_is_left_to_the_eager_contract():
    got, _, _, fetched, notes = _batch(lambda x: x.mul_(2), "on")
    assert got is None and fetched == [] and "shares memory" in notes[0]


def test_the_fallback_timer_is_distinct():
    assert FALLBACK_TIMER != GRAPH_TIMER and FALLBACK_TIMER.startswith("cuda_graph")

"""Kernel coverage (guard.coverage): the share of a KernelBench forward in the submission's own kernels, from the
worker's op trace, the judge's CPU samples and a CUDA timing trace; the rule that fails a decoy under the floor."""

from __future__ import annotations

import pytest

from pytest_cannbench.guard import builtin_ops
from pytest_cannbench.guard.coverage import (
    Coverage,
    Ledger,
    TraceRecord,
    device_time,
    from_samples,
    judge,
    op_time,
    records_of,
    time_record,
)
from pytest_cannbench.guard.perf_profile import CallProfile, ObjectSamples
from pytest_cannbench.guard.policy import (
    BLOCK,
    COVERAGE_FLOOR,
    KERNEL,
    KERNEL_COVERAGE,
    WARN,
    coverage_floor,
    guard_verdict,
    mode_for,
)
from pytest_cannbench.guard.recorder import CANARY_OP, MARK, REDISPATCH
from pytest_cannbench.outcome import LOW_KERNEL_COVERAGE

LABEL = builtin_ops.CUSTOM_PREFIX + "kbdecoy_softmax.softmax_rows"
ALLOWED = builtin_ops.is_allowed


def test_op_time_counts_own_kernels_against_builtin_compute_inside_the_markers():
    # a decoy's call as the guard records it (ns): its kernel on one element, then torch.softmax doing the work
    decoy = [(MARK, 1_000, 60_000, True, 1),
             (LABEL, 2_000, 5_000, True, 1), ("aten::contiguous", 2_100, 2_300, False, 1),
             ("aten::empty_like", 2_400, 2_600, False, 1),
             ("aten::softmax", 6_000, 56_000, False, 1), ("aten::_softmax", 6_100, 55_900, False, 1),
             (CANARY_OP, 57_000, 58_000, False, 1),  # the judge's own op: never the submission's
             ("aten::exp", 70_000, 90_000, False, 1)]  # outside the marker: not the call's
    own, builtin = op_time(decoy, ALLOWED)
    assert (own, builtin) == (3_000, 50_000)
    # the honest one: the kernel does it all, a view around it
    honest = [(MARK, 0, 50_000, True, 1), ("aten::reshape", 100, 200, False, 1), (LABEL, 300, 48_000, True, 1),
              ("aten::view", 48_100, 48_200, False, 1), (CANARY_OP, 49_000, 49_500, False, 1)]
    assert op_time(honest, ALLOWED) == (47_700, 0)


def test_builtin_ops_an_own_kernel_calls_are_not_its_own_and_threads_add_up():
    events = [(MARK, 0, 100_000, True, 1),
              (LABEL, 1_000, 81_000, True, 1), ("aten::softmax", 11_000, 71_000, False, 1),  # delegated inside
              (REDISPATCH + "aten::exp", 82_000, 90_000, True, 1),  # a redispatched op: builtin too
              ("aten::add", 20_000, 30_000, False, 2), (LABEL, 40_000, 50_000, True, 2)]  # a helper thread
    own, builtin = op_time(events, ALLOWED)
    assert own == 20_000 + 10_000 and builtin == 60_000 + 8_000 + 10_000
    assert op_time([(LABEL, 0, 10, True, 1)], ALLOWED) == (0, 0)  # no marker, no call


def test_samples_judge_from_the_minimum_up_with_a_glue_allowance_per_call():
    assert from_samples(own=30, foreign=9, calls=1, period_ns=1_000_000) is None  # inconclusive
    found = from_samples(own=90, foreign=20, calls=100, period_ns=1_000_000)  # 100 calls x 30 us: 3 forgiven
    assert found is not None and found.source == "cpu_samples" and found.share == pytest.approx(90 / 107)
    decoy = from_samples(own=0, foreign=200, calls=4, period_ns=1_000_000)
    assert decoy is not None and decoy.share == 0.0


def test_under_the_floor_fails_as_low_kernel_coverage_and_every_call_gets_the_flag():
    low = Coverage(0.04, "op_time", 3_000.0, 53_000.0, 1)
    problems = judge(low, COVERAGE_FLOOR)
    assert [kind for kind, _ in problems] == [LOW_KERNEL_COVERAGE, KERNEL_COVERAGE]
    assert "4% of the forward's work" in problems[0][1] and "under the 50%" in problems[0][1]
    assert guard_verdict(problems, KERNEL)[0] == LOW_KERNEL_COVERAGE
    assert guard_verdict(problems, WARN)[0] is None  # --cann-guard warn: a flag
    lenient = judge(low, None)  # --cann-guard kernelbench: KernelBench's own rule, coverage as a flag
    assert [kind for kind, _ in lenient] == [KERNEL_COVERAGE] and "no floor" in lenient[0][1]
    high = judge(Coverage(0.97, "cpu_samples", 97.0, 100.0, 3), COVERAGE_FLOOR)
    assert [kind for kind, _ in high] == [KERNEL_COVERAGE]
    for mode in (BLOCK, KERNEL, WARN):  # the flag never decides
        assert guard_verdict(high, mode) == (None, "", [f"{KERNEL_COVERAGE}: {high[0][1]}"])
    assert judge(None, COVERAGE_FLOOR) == []


def test_the_default_kernelbench_rule_has_the_floor_and_kernelbench_s_own_is_kept_by_name():
    assert mode_for("kernelbench", BLOCK, "coverage") == mode_for("kernelbench", BLOCK, "kernelbench") == KERNEL
    assert coverage_floor("kernelbench", BLOCK, "coverage") == COVERAGE_FLOOR
    assert coverage_floor("kernelbench", BLOCK, "kernelbench") is None
    assert coverage_floor("kernelbench", BLOCK, "cann") is None and coverage_floor("kernelbench", WARN, "coverage") \
        is None
    assert coverage_floor("candidate", BLOCK, "coverage") is None  # CANN tasks: their own, strict rule


def test_the_worker_s_op_time_record_is_validated():
    good = {"guard": [{"kind": "builtin_compute", "detail": "x"},
                      {"kind": "kernel_time", "own_ns": 3_000, "builtin_ns": 50_000, "calls": 1}]}
    assert time_record(good) == (3_000.0, 50_000.0, 1)
    for bad in ({"guard": [{"kind": "kernel_time", "own_ns": -1, "builtin_ns": 0, "calls": 1}]},
                {"guard": [{"kind": "kernel_time", "own_ns": True, "builtin_ns": 0, "calls": 1}]},
                {"guard": [{"kind": "kernel_time", "own_ns": "9", "builtin_ns": 0, "calls": 1}]},
                {"guard": "nope"}, {}):
        assert time_record(bad) is None


def _profile(own: int, builtin: int, runtime: int, calls: int) -> CallProfile:
    """A sampled profile; the runtime (libm here: a kernel's exp) counts for neither side."""
    profile = CallProfile(period_ns=1_000_000, calls=calls)
    profile.objects = {"/site/_cannbench_jit/k/kbcov.so": ObjectSamples("own", own),
                       "/venv/torch/lib/libtorch_cpu.so": ObjectSamples("builtin", builtin),
                       "/usr/lib/x86_64-linux-gnu/libm.so.6": ObjectSamples("runtime", runtime)}
    return profile


def test_the_ledger_takes_samples_when_conclusive_and_op_time_otherwise():
    ledger = Ledger(COVERAGE_FLOOR)
    keys = ("case:/r/logs/cases/level1/3_Softmax.py_1.log", "op:level1/3_Softmax.py")
    reply = {"ok": True, "guard": [{"kind": "kernel_time", "own_ns": 3_000, "builtin_ns": 50_000, "calls": 1},
                                   {"kind": "builtin_compute", "detail": "ran builtin op(s) aten::softmax"}]}
    few = {keys[0]: _profile(1, 10, 2, 1), keys[1]: _profile(1, 10, 2, 1)}  # 13 work samples: too few
    problems = ledger.judge(keys, reply, few, [("builtin_compute", "ran builtin op(s) aten::softmax")])
    assert problems[0][0] == LOW_KERNEL_COVERAGE and "op_time" in problems[0][1]
    record = ledger.records[keys[0]]
    assert record["coverage"]["source"] == "op_time" and record["coverage"]["share"] == pytest.approx(0.0566, 1e-2)
    assert any(f.startswith("builtin_compute: ") for f in record["flags"])
    assert any(f.startswith(LOW_KERNEL_COVERAGE) for f in record["flags"])
    # the problem's samples across its items decide once there are enough (the case's alone are still too few)
    pooled = {keys[0]: _profile(1, 10, 2, 1), keys[1]: _profile(40, 8, 300, 6)}
    assert ledger.judge(keys, {"ok": True}, pooled, [])[0][0] == KERNEL_COVERAGE
    assert ledger.records[keys[0]]["coverage"]["source"] == "cpu_samples"
    assert ledger.op_times[keys[1]] == [3_000.0, 50_000.0, 1.0]  # added per key


# ---------------------------------------------------------------- CUDA: device time from the timing trace

def _trace() -> list[TraceRecord]:
    """Two timed calls of the decoy as torch.autograd.profiler's function_events gives them on a CUDA card (ids
    are correlation ids; a kernel's ``link`` is the CPU op its launch is linked to): the range of the call, drawn
    on the card's timeline too, the custom kernel on one element, torch.softmax's kernel, and the flush between
    the calls (outside the windows)."""
    records = []
    for i, base in enumerate((0.0, 1_000.0)):
        records += [
            TraceRecord(f"cannbench_call_{i}", base + 10, base + 400, False, id=100 + i, annotation=True),
            TraceRecord(f"cannbench_call_{i}", base + 12, base + 390, True, annotation=True),  # gpu annotation
            TraceRecord(LABEL, base + 20, base + 40, False, id=200 + i, annotation=True),
            TraceRecord("aten::empty_like", base + 21, base + 23, False, id=210 + i),
            TraceRecord("cudaLaunchKernel", base + 30, base + 35, False, link=200 + i),
            TraceRecord("softmax_naive_kernel(float const*, float*, long, long)", base + 50, base + 52, True,
                        link=200 + i),
            TraceRecord("aten::softmax", base + 60, base + 90, False, id=300 + i),
            TraceRecord("aten::_softmax", base + 61, base + 89, False, id=310 + i),
            TraceRecord("cudaLaunchKernel", base + 70, base + 75, False, link=310 + i),
            TraceRecord("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
                        "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
                        base + 95, base + 295, True, link=310 + i),
            TraceRecord("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
                        base + 500, base + 900, True, link=400 + i),  # the flush: between the windows
        ]
    return records


def test_device_time_credits_only_the_kernels_its_own_code_launched():
    windows = [(10.0, 400.0), (1_010.0, 1_400.0)]
    own, total = device_time(_trace(), windows)
    assert (own, total) == (4.0, 404.0)  # 2 us of its kernel per call against torch's 200 us
    honest = [r for r in _trace() if "cunn_SoftMax" not in r.name]
    assert device_time(honest, windows) == (4.0, 4.0)
    builtin_ops.OWN_OPS.add("kbcov::softmax")  # a TORCH_LIBRARY op of its own launches its own kernels too
    try:
        fused = [TraceRecord("kbcov::softmax", 5, 9, False, id=7), TraceRecord("k", 20, 30, True, link=7)]
        assert device_time(fused, [(0.0, 100.0)]) == (10.0, 10.0)
    finally:
        builtin_ops.OWN_OPS.discard("kbcov::softmax")


def test_records_come_from_the_profiler_s_own_function_events():
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    events = [FunctionEvent(id=200, name=LABEL, thread=1, start_us=20, end_us=40, is_user_annotation=True),
              FunctionEvent(id=0, name="softmax_naive_kernel", thread=0, start_us=50, end_us=52,
                            device_type=DeviceType.CUDA, linked_correlation_id=200),
              FunctionEvent(id=310, name="aten::_softmax", thread=1, start_us=61, end_us=89),
              FunctionEvent(id=0, name="cunn_SoftMaxForward", thread=0, start_us=95, end_us=295,
                            device_type=DeviceType.CUDA, linked_correlation_id=310)]
    records = records_of(events, DeviceType.CUDA)
    assert [(r.device, r.id, r.link, r.annotation) for r in records] == [
        (False, 200, 0, True), (True, 0, 200, False), (False, 310, 0, False), (True, 0, 310, False)]
    assert device_time(records, [(10.0, 400.0)]) == (2.0, 202.0)


def test_the_problem_s_coverage_is_its_lowest_item_s():
    from pytest_cannbench.report.kernelbench import section, summary_lines

    def case(cid: int, share: float | None) -> dict:
        return {"key": f"l1/a.py_{cid}", "rel_path": "l1/a.py", "operator": "a", "case_id": cid, "status": "passed",
                "timing": {}, "kernel_coverage": {} if share is None else {"share": share, "source": "op_time"}}

    kb = section([case(1, 0.98), case(2, None), case(3, 0.91)])
    assert kb is not None
    problem = kb["problems"][0]
    assert problem["kernel_coverage"] == 0.91 and problem["coverage_source"] == "op_time"
    assert summary_lines(kb)[2].rstrip().endswith("91%")


def test_on_a_card_only_the_device_trace_measures_the_work():
    keys = ("case:/r/t.log", "op:level1/3_Softmax.py")
    ledger = Ledger(COVERAGE_FLOOR, host=False)
    launches = {"ok": True, "guard": [{"kind": "kernel_time", "own_ns": 70_000, "builtin_ns": 15_000, "calls": 1}]}
    assert ledger.judge(keys, launches, {}, []) == [] and ledger.records[keys[0]]["coverage"] == {}
    timed = {"ok": True, "device_kernel_time": {"own_us": 4.0, "all_us": 404.0, "calls": 2}}
    problems = ledger.judge(keys, timed, {}, [])
    assert problems[0][0] == LOW_KERNEL_COVERAGE and ledger.records[keys[0]]["coverage"]["source"] == "device_time"

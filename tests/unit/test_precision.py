"""Unit tests for pytest_cannbench.judge.precision: one hand-computed case per rule.

Most float cases use golden = 1.0 and errors that are powers of two, so every
relative error is d / (1 + 1e-7) and can be checked by hand.  Cases marked
"official: pass" are ones the official harness accepts and this judge rejects.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from pytest_cannbench.judge.precision import OutputVerdict, compare_output, compare_outputs
from pytest_cannbench.judge.thresholds import ALLCLOSE_TOLERANCES, THRESHOLDS, DtypeThresholds, thresholds_for
from pytest_cannbench.outcome import PRECISION, STRUCTURAL

F64 = torch.float64
T32 = 2**-13  # fp32 MERE threshold
DEN = 1 + 1e-7  # |g| + eps for golden 1.0


def ones(n=100):
    return torch.ones(n, dtype=F64)


def cand(golden, dtype, **changes):
    """Truncated golden in ``dtype`` with given positions replaced."""
    a = golden.to(dtype).clone()
    for i, val in changes.items():
        a[int(i[1:])] = val
    return a


# ---------------------------------------------------------------------------------------------
# Threshold table and overrides
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, mere, small_thr, small_err, cancel", [
    ("float16", 2**-10, 2**-11, 2**-16, 2**-5),
    ("bfloat16", 2**-7, 2**-8, 2**-16, 2**-3),
    ("float32", 2**-13, 2**-14, 2**-30, 2**-8),
    ("float64", 2**-13, 2**-14, 2**-30, 2**-8),
    ("hifloat32", 2**-11, 2**-12, 2**-28, 2**-8),
    ("float8_e4m3fn", 2**-3, 2**-4, 2**-6, 2**-1),
    ("float8_e5m2", 2**-2, 2**-3, 2**-5, 2**0),
])
def test_float_rows(name, mere, small_thr, small_err, cancel):
    row = THRESHOLDS[name]
    assert row == DtypeThresholds(mere, 10 * mere, small_thr, small_err, cancel, False)


def test_mare_is_exactly_ten_t_not_the_docs_power_of_two():
    assert THRESHOLDS["float16"].mare == 0.009765625
    assert THRESHOLDS["float32"].mare == 0.001220703125
    assert THRESHOLDS["float8_e5m2"].mare == 2.5


@pytest.mark.parametrize("name", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"])
def test_exact_rows(name):
    assert THRESHOLDS[name].exact and THRESHOLDS[name].mere == 0


@pytest.mark.parametrize("dtype, overrides, expected", [
    (torch.float32, None, THRESHOLDS["float32"]),
    ("float16", None, THRESHOLDS["float16"]),
    ("torch.bfloat16", None, THRESHOLDS["bfloat16"]),
    ("half", None, THRESHOLDS["float16"]),
    ("complex64", None, THRESHOLDS["float32"]),  # unknown -> float32 row
    (torch.float32, {"float32": 0.005}, DtypeThresholds(0.005, 0.05, 2**-14, 2**-30, 2**-8, False)),
    (torch.float32, {"Float32": 0.005}, DtypeThresholds(0.005, 0.05, 2**-14, 2**-30, 2**-8, False)),
    (torch.float16, {"float32": 0.005}, THRESHOLDS["float16"]),  # override of another dtype
    ("roi_custom", {"roi_custom": 0.1}, DtypeThresholds(0.1, 1.0, 2**-14, 2**-30, 2**-8, False)),
    (torch.float32, {"float32": 0}, DtypeThresholds(0.0, 0.0, 2**-14, 2**-30, 2**-8, True)),
    (torch.int8, {"int8": 1}, DtypeThresholds(1.0, 1.0, 0.0, 0.0, 0.0, False)),
    (torch.int8, None, DtypeThresholds(0.0, 0.0, 0.0, 0.0, 0.0, True)),
    (torch.bool, {"bool": 1}, DtypeThresholds(1.0, 1.0, 0.0, 0.0, 0.0, False)),
    ("int4", None, DtypeThresholds(0.0, 0.0, 0.0, 0.0, 0.0, True)),
])
def test_thresholds_for(dtype, overrides, expected):
    assert thresholds_for(dtype, overrides) == expected


@pytest.mark.parametrize("bad", [{"float32": -1}, {"float32": "x"}, {"float32": float("nan")}, {"int8": True}])
def test_bad_override_rejected(bad):
    with pytest.raises(ValueError, match="precision_thresholds"):
        thresholds_for(torch.float32, bad)


# ---------------------------------------------------------------------------------------------
# Fast path and its boundaries (fp32, golden 1.0)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d, passed, rule", [
    (2**-14, True, "fast_path"),                  # r = T/2
    (2**-13, True, "fast_path"),                  # r = T/(1+1e-7) < T: eps keeps it below
    (2**-13 + 2**-23, False, "mere_gate"),        # one fp32 ulp more: r > T, still < 10T
])
def test_fast_path_mere_boundary(d, passed, rule):
    v = compare_output(torch.full((100,), 1 + d, dtype=torch.float32), ones())
    assert (v.passed, v.rule) == (passed, rule)
    assert v.mere == pytest.approx(d / DEN, rel=1e-12)
    assert v.mare == pytest.approx(d / DEN, rel=1e-12)
    assert v.max_abs_err == d
    assert v.threshold == T32


@pytest.mark.parametrize("d, passed, rule", [
    (10 * T32, True, "fast_path"),                # single point at 10T/(1+1e-7) < 10T
    (10 * T32 + 2**-23, False, "region"),         # just over: normal error, native perfect
])
def test_fast_path_mare_boundary(d, passed, rule):
    v = compare_output(cand(ones(1000), torch.float32, i7=1 + d), ones(1000))
    assert (v.passed, v.rule) == (passed, rule)
    assert v.mare == pytest.approx(d / DEN, rel=1e-12)
    assert v.mere == pytest.approx(d / DEN / 1000, rel=1e-12)
    assert v.normal_err == (0 if passed else 1)
    assert v.mismatch_count == (0 if passed else 1)


def test_fast_path_is_strict_at_exact_boundary():
    # float64 output, golden g0 = 2^-3 - 1e-7 so |g0| + 1e-7 = 2^-3 exactly: r is exactly T or 10T
    g0 = 2**-3 - 1e-7
    g = torch.full((1000,), g0, dtype=F64)
    v = compare_output(g + T32 * 2**-3, g)
    assert v.mere == T32 and (v.passed, v.rule) == (False, "mere_gate")      # MERE == T fails
    a = g.clone()
    a[0] = g0 + 10 * T32 * 2**-3
    v = compare_output(a, g)
    assert v.mare == 10 * T32 and v.normal_err == 0                           # r == 10T is no error
    assert (v.passed, v.rule) == (True, "region")                             # ...but not the fast path


def test_stats_recorded_on_fast_path():
    g = ones(10)
    g[0] = 0.0  # small-value point, exact
    v = compare_output(g.to(torch.float32), g)
    assert v.rule == "fast_path"
    assert (v.small_value_count, v.small_value_err, v.cancel_count, v.normal_count) == (1, 0, 0, 9)
    assert v.small_value_max_abs_err == 0.0 and v.cancel_max_abs_err is None
    assert (v.mere, v.mare, v.max_abs_err, v.mean_abs_err, v.normal_mere) == (0.0, 0.0, 0.0, 0.0, 0.0)
    assert v.native_mere is None  # no native given


def test_override_changes_verdict():
    a = torch.full((10,), 1 + 2**-8, dtype=torch.float32)  # r = 0.0039
    assert not compare_output(a, ones(10)).passed
    v = compare_output(a, ones(10), overrides={"float32": 0.005})
    assert (v.passed, v.rule, v.threshold) == (True, "fast_path", 0.005)


# ---------------------------------------------------------------------------------------------
# Truncated golden
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, golden_value, cand_value", [
    (torch.float16, 1.0004, 1.0),     # fp16 ulp at 1 is 2^-10: golden rounds to 1.0
    (torch.bfloat16, 1.001, 1.0),     # bf16 ulp at 1 is 2^-7
    (torch.float32, 1 + 2**-30, 1.0),
])
def test_golden_truncated_to_candidate_dtype(dtype, golden_value, cand_value):
    v = compare_output(torch.full((4,), cand_value, dtype=dtype), torch.full((4,), golden_value, dtype=F64))
    assert v.passed and v.mere == 0.0 and v.max_abs_err == 0.0


# ---------------------------------------------------------------------------------------------
# NaN / Inf rules
# ---------------------------------------------------------------------------------------------

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize("dtype, a, g, passed, rule, nan_count, inf_count, mere", [
    # NaN position mismatch, both directions
    (torch.float32, [NAN, 1, 2], [1, 1, 2], False, "nan_positions", 1, 0, 0.0),
    (torch.float32, [1, 1, 2], [NAN, 1, 2], False, "nan_positions", 0, 0, 0.0),
    # matched NaN excluded from the statistics
    (torch.float32, [NAN, 1, 2], [NAN, 1, 2], True, "fast_path", 1, 0, 0.0),
    # one-sided inf: golden 70000 is inf in fp16, candidate saturated to 65504 -> equal
    (torch.float16, [65504, 1], [70000, 1], True, "fast_path", 0, 0, 0.0),
    # one-sided inf: candidate inf, golden 65504 -> candidate saturated to 65504 -> equal
    (torch.float16, [INF, 1], [65504, 1], True, "fast_path", 0, 1, 0.0),
    # both inf, same sign: excluded
    (torch.float32, [INF, -INF, 1], [INF, -INF, 1], True, "fast_path", 0, 2, 0.0),
    # both inf, opposite sign
    (torch.float32, [INF, 1], [-INF, 1], False, "inf_sign", 0, 1, 0.0),
    # everything excluded
    (torch.float32, [NAN, INF, -INF], [NAN, INF, -INF], True, "all_excluded", 1, 2, None),
])
def test_nan_inf_rules(dtype, a, g, passed, rule, nan_count, inf_count, mere):
    v = compare_output(torch.tensor(a, dtype=dtype), torch.tensor(g, dtype=F64))
    assert (v.passed, v.rule, v.nan_count, v.inf_count, v.mere) == (passed, rule, nan_count, inf_count, mere)
    assert v.failure_type == (None if passed else PRECISION)


def test_one_sided_inf_saturated_then_compared():
    # candidate inf where golden is 1.0: inf -> 65504, error 65503 in the normal region
    v = compare_output(torch.tensor([INF, 1.0], dtype=torch.float16), torch.tensor([1.0, 1.0], dtype=F64))
    assert not v.passed and v.rule == "region"
    assert v.max_abs_err == 65503.0 and v.normal_err == 1


def test_nan_mismatch_message_names_output_and_count():
    v = compare_output(torch.tensor([NAN, 1.0]), torch.tensor([1.0, 1.0], dtype=F64), name="out")
    assert v.message == "out [float32]: NaN positions differ from the golden at 1 of 2 elements"


def test_empty_output_passes():
    v = compare_output(torch.empty(0, 3), torch.empty(0, 3, dtype=F64))
    assert v.passed and v.total_count == 0 and v.rule == "all_excluded"


# ---------------------------------------------------------------------------------------------
# Bit-exact (threshold 0 on a float dtype)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, a, g, passed, mismatches", [
    (torch.float32, [0.0, 1.0], [-0.0, 1.0], False, 1),   # +-0.0 differ in bits
    (torch.float32, [0.0, 1.0], [0.0, 1.0], True, 0),
    (torch.float32, [1.0 + 2**-23], [1.0], False, 1),      # one ulp
    (torch.float16, [1.0], [1.0004], True, 0),             # vs truncated golden
    (torch.bfloat16, [-0.0], [0.0], False, 1),
    (torch.float8_e4m3fn, [1.0], [1.0], True, 0),          # fp8 via uint8 view
    (torch.float8_e4m3fn, [-0.0], [0.0], False, 1),
])
def test_bit_exact(dtype, a, g, passed, mismatches):
    v = compare_output(torch.tensor(a).to(dtype), torch.tensor(g, dtype=F64),
                       overrides={str(dtype).removeprefix("torch."): 0})
    assert (v.passed, v.rule, v.mismatch_count, v.threshold) == (passed, "bit_exact", mismatches, 0.0)


# ---------------------------------------------------------------------------------------------
# Integer and bool outputs
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("a, g, dtype, overrides, passed, mismatch, max_abs", [
    ([1, 2, 3], [1, 2, 3], torch.int32, None, True, 0, 0.0),
    ([1, 2, 3], [1, 2, 4], torch.int32, None, False, 1, 1.0),
    ([1, 2, 3], [1, 2, 4], torch.int32, {"int32": 1}, True, 0, 1.0),
    ([1, 2, 3], [1, 2, 5], torch.int32, {"int32": 1}, False, 1, 2.0),
    ([-128, 0], [-127, 0], torch.int8, {"int8": 1}, True, 0, 1.0),
    ([-128, 0], [-127, 0], torch.int8, {"int32": 1}, False, 1, 1.0),  # override is per dtype
    ([5, 7], [5, 7], torch.uint8, None, True, 0, 0.0),
])
def test_integer_outputs(a, g, dtype, overrides, passed, mismatch, max_abs):
    v = compare_output(torch.tensor(a, dtype=dtype), torch.tensor(g, dtype=torch.int64), overrides=overrides)
    assert (v.passed, v.rule, v.mismatch_count, v.max_abs_err) == (passed, "integer", mismatch, max_abs)
    assert v.mere is None and v.mare is None


def test_integer_message():
    v = compare_output(torch.tensor([1, 2, 3], dtype=torch.int32), torch.tensor([1, 2, 4]), name="idx")
    assert v.message == "idx [int32]: 1 of 3 elements differ (max |a-g| 1; must match exactly)"
    assert v.mean_abs_err == pytest.approx(1 / 3)


def test_bool_single_flip_fails():
    # official: pass (bool goes down the float path, one small-value error <= 2)
    golden = torch.zeros(100, dtype=torch.bool)
    a = golden.clone()
    a[17] = True
    v = compare_output(a, golden)
    assert (v.passed, v.rule, v.mismatch_count, v.failure_type) == (False, "integer", 1, PRECISION)


def test_bool_exact_pass_and_override():
    golden = torch.tensor([True, False, True])
    assert compare_output(golden.clone(), golden).passed
    flipped = torch.tensor([True, True, True])
    assert compare_output(flipped, golden, overrides={"bool": 1}).passed


# ---------------------------------------------------------------------------------------------
# FIX mere-gate: systematic error between T and 10T
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, factor, rel", [
    (torch.float32, 1.001, 0.0010000467300415039),     # fp32(1.001) - 1
    (torch.bfloat16, 1.07, 0.0703125),                  # bf16(1.07) = 1 + 9 * 2^-7
    (torch.float16, 1.005, 0.0048828125),               # fp16(1.005) = 1 + 5 * 2^-10
])
def test_systematic_error_fails_mere_gate(dtype, factor, rel):
    # official: pass (fast path fails on MERE, every region passes on counts)
    v = compare_output(torch.full((256,), factor, dtype=dtype), ones(256))
    th = THRESHOLDS[str(dtype).removeprefix("torch.")]
    assert th.mere < rel < th.mare
    assert (v.passed, v.rule, v.failure_type) == (False, "mere_gate", PRECISION)
    assert (v.normal_err, v.small_value_err, v.cancel_err) == (0, 0, 0)
    assert v.mere == pytest.approx(rel / DEN, rel=1e-12)
    assert v.normal_mere == pytest.approx(rel / DEN, rel=1e-12)
    assert "MERE" in v.message and "systematic" in v.message


@pytest.mark.parametrize("native_d, cand_d, passed, rule", [
    (2**-12, 2**-11, True, "region"),             # native fails MERE (2T): cand 4T <= 2 x native
    (2**-12, 2**-11 + 2**-23, False, "mere_gate"),  # just above 2 x native
    (2**-14, 2**-12, False, "mere_gate"),         # native passes MERE: strict < T for candidate
    (2**-14, 2**-14, True, "fast_path"),
])
def test_mere_relaxation_when_native_fails(native_d, cand_d, passed, rule):
    g = ones()
    native = torch.full((100,), 1 + native_d, dtype=torch.float32)
    v = compare_output(torch.full((100,), 1 + cand_d, dtype=torch.float32), g, native)
    assert (v.passed, v.rule) == (passed, rule)
    assert v.native_mere == pytest.approx(native_d / DEN, rel=1e-12)
    assert v.native_normal_mere == pytest.approx(native_d / DEN, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Small-value region (fp32: |g_t| < 2^-14, error if |a-g| > 2^-30)
# ---------------------------------------------------------------------------------------------

def test_small_value_single_huge_error_fails():
    # official: pass (one small-value error, count rule 1 <= 2)
    g = ones()
    g[5] = 1e-6
    a = cand(g, torch.float16, i5=65504.0)
    v = compare_output(a, g)
    assert (v.passed, v.rule) == (False, "region")
    assert (v.small_value_count, v.small_value_err, v.small_value_native_err) == (1, 1, 0)
    assert v.small_value_max_abs_err == pytest.approx(65504 - 1.0132789611816406e-06, rel=1e-15)
    assert "small-value region: |a-g| 6.55e+04" in v.message and "exceeds bound 0.0004883" in v.message
    assert "ratio" not in v.message  # the count rule alone would have passed


@pytest.mark.parametrize("n_err, passed", [(2, True), (3, False)])
def test_small_value_count_rule(n_err, passed):
    g = ones()
    g[:n_err] = 0.0
    a = g.to(torch.float32)
    a[:n_err] = 2**-20  # > small_error 2^-30, < small_threshold 2^-14
    v = compare_output(a, g)
    assert (v.passed, v.rule) == (passed, "region")
    assert (v.small_value_count, v.small_value_err) == (n_err, n_err)
    # overall MERE is dominated by 2^-20 / 1e-7 per small point; the gate uses the normal region
    assert v.mere == pytest.approx(n_err * (2**-20 / 1e-7) / 100, rel=1e-12)
    assert v.normal_mere == 0.0


@pytest.mark.parametrize("n_err, passed", [(4, True), (5, False)])
def test_small_value_ratio_uses_native(n_err, passed):
    g = ones()
    g[:5] = 0.0
    native = g.to(torch.float32)
    native[:2] = 2**-21
    a = g.to(torch.float32)
    a[:n_err] = 2**-20
    v = compare_output(a, g, native)
    assert v.passed is passed
    assert (v.small_value_err, v.small_value_native_err) == (n_err, 2)


@pytest.mark.parametrize("cand_err, passed", [(2**-9, True), (2**-9 + 2**-20, False)])
def test_small_value_bound_scales_with_native(cand_err, passed):
    # bound = max(2^-14, 2 * native max 2^-10) = 2^-9
    g = ones()
    g[0] = 0.0
    native = cand(g, torch.float32, i0=2**-10)
    v = compare_output(cand(g, torch.float32, i0=cand_err), g, native)
    assert (v.passed, v.rule) == (passed, "region")


# ---------------------------------------------------------------------------------------------
# Cancellation region (fp32: |a| < 2^-8 and 2^-14 <= |g_t| < 2^-8)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("a0, passed, message_part", [
    (0.0, True, None),                           # |a-g| = 0.003 <= boundary 0.0039
    (-0.003, False, "cancellation region: |a-g| 0.006 at golden 0.003 exceeds bound 0.003906"),
])
def test_cancellation_bound(a0, passed, message_part):
    # official: both pass (one cancellation error <= 2)
    g = ones()
    g[0] = 0.003
    v = compare_output(cand(g, torch.float32, i0=a0), g)
    assert (v.passed, v.rule) == (passed, "region")
    assert (v.cancel_count, v.cancel_err, v.cancel_native_err) == (1, 1, 0)
    assert v.cancel_max_abs_err == pytest.approx(abs(a0 - 0.003), rel=1e-7)
    if message_part:
        assert message_part in v.message


@pytest.mark.parametrize("n_err, passed", [(2, True), (3, False)])
def test_cancellation_count_rule(n_err, passed):
    g = ones()
    g[:n_err] = 0.003
    a = g.to(torch.float32)
    a[:n_err] = 0.0
    v = compare_output(a, g)
    assert (v.passed, v.cancel_err) == (passed, n_err)


# ---------------------------------------------------------------------------------------------
# Normal region
# ---------------------------------------------------------------------------------------------

BAD = 1 + 2**-9  # r = 2^-9 / (1 + 1e-7) > 10T for fp32


def test_normal_region_strict_when_native_perfect():
    g = ones()
    v = compare_output(cand(g, torch.float32, i0=BAD), g, g.to(torch.float32))
    assert (v.passed, v.rule, v.normal_err, v.normal_native_err) == (False, "region", 1, 0)
    assert "normal region: 1 of 100 points exceed rel 0.001221" in v.message


@pytest.mark.parametrize("errs, passed", [((0, 2), True), ((0, 2, 3), False)])
def test_normal_region_relaxed_when_native_has_errors(errs, passed):
    g = ones()
    native = cand(g, torch.float32, i1=BAD)
    a = g.to(torch.float32)
    for i in errs:
        a[i] = BAD
    v = compare_output(a, g, native)
    assert (v.passed, v.rule) == (passed, "region")
    assert (v.normal_err, v.normal_native_err) == (len(errs), 1)
    assert v.normal_mere == pytest.approx(len(errs) * 2**-9 / DEN / 100, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Structure before numbers
# ---------------------------------------------------------------------------------------------

class SubTensor(torch.Tensor):
    pass


@pytest.mark.parametrize("actual, golden, kwargs, message", [
    (torch.zeros(2, 3), torch.zeros(3, 2, dtype=F64), {}, "y: shape (2, 3) != golden shape (3, 2)"),
    (torch.zeros(3), torch.zeros(3, dtype=F64), {"expected_dtype": torch.float16},
     "y: dtype float32 != expected float16"),
    (torch.zeros(3), torch.zeros(3, dtype=F64), {"expected_dtype": "bfloat16"},
     "y: dtype float32 != expected bfloat16"),
    (torch.zeros(3), torch.zeros(3, dtype=F64), {"native": torch.zeros(3, dtype=torch.float16)},
     "y: dtype float32 != expected float16"),
    (torch.zeros(3, 2).t(), torch.zeros(2, 3, dtype=F64), {},
     "y: output is not contiguous (shape (2, 3), stride (1, 2)); return a contiguous tensor, not a view of an input"),
    (torch.zeros(3).as_subclass(SubTensor), torch.zeros(3, dtype=F64), {},
     "y: output is a SubTensor (a torch.Tensor subclass); return a plain torch.Tensor"),
    (torch.nn.Parameter(torch.zeros(3)), torch.zeros(3, dtype=F64), {},
     "y: output is a Parameter (a torch.Tensor subclass); return a plain torch.Tensor"),
    ([0.0, 0.0, 0.0], torch.zeros(3, dtype=F64), {}, "y: expected a torch.Tensor, got list"),
    (None, torch.zeros(3, dtype=F64), {}, "y: candidate returned None where the golden has a tensor"),
    (torch.zeros(3), None, {}, "y: candidate returned float32 where the golden has no output"),
    (torch.zeros(3, device="meta"), torch.zeros(3, dtype=F64), {},
     "y: output is on device meta; the judge expects CPU tensors"),
])
def test_structural_failures(actual, golden, kwargs, message):
    v = compare_output(actual, golden, **kwargs)
    assert (v.passed, v.failure_type, v.message) == (False, STRUCTURAL, message)
    assert v.mere is None and v.total_count == 0


def test_structure_checked_before_numbers():
    # wrong dtype AND wrong values: reported as structural, not precision
    v = compare_output(torch.full((3,), 5.0), torch.zeros(3, dtype=F64), expected_dtype=torch.float16)
    assert v.failure_type == STRUCTURAL


def test_both_none_passes():
    v = compare_output(None, None)
    assert (v.passed, v.compared, v.dtype, v.rule) == (True, False, "none", "both_none")


def test_reference_side_faults_raise():
    with pytest.raises(TypeError):
        compare_output(torch.zeros(3), [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="native"):
        compare_output(torch.zeros(3), torch.zeros(3, dtype=F64), torch.zeros(4))
    with pytest.raises(ValueError, match="checker"):
        compare_output(torch.zeros(3), torch.zeros(3, dtype=F64), checker="nope")


def test_count_mismatch_single_structural_verdict():
    vs = compare_outputs([torch.zeros(3)], [torch.zeros(3, dtype=F64)] * 2, None, names=["y", "z"])
    assert len(vs) == 1
    v = vs[0]
    assert (v.passed, v.failure_type, v.rule) == (False, STRUCTURAL, "count")
    assert v.message == "output count mismatch: candidate returned 1, golden has 2"


def test_native_count_mismatch_raises():
    with pytest.raises(ValueError, match="native"):
        compare_outputs([torch.zeros(3)], [torch.zeros(3, dtype=F64)], [], names=["y"])


def test_compare_outputs_positions():
    g = [torch.ones(3, dtype=F64), None, torch.tensor([0, 1, 2]), torch.ones(2, dtype=F64)]
    a = [torch.ones(3), None, torch.tensor([2, 0, 1]), torch.ones(2, dtype=torch.float16)]
    vs = compare_outputs(a, g, None, names=["y", "opt", "idx", "z"],
                         expected_dtypes=[torch.float32, None, torch.int64, "float32"],
                         compare_flags=[True, True, False, True])
    assert [(v.index, v.name, v.passed, v.compared, v.rule) for v in vs] == [
        (0, "y", True, True, "fast_path"),
        (1, "opt", True, False, "both_none"),
        (2, "idx", True, False, "not_compared"),
        (3, "z", False, True, "structural"),
    ]
    assert vs[3].message == "z: dtype float16 != expected float32"


def test_one_sided_none_in_list():
    vs = compare_outputs([None], [torch.zeros(2, dtype=F64)], None, names=["y"])
    assert (vs[0].passed, vs[0].failure_type) == (False, STRUCTURAL)


# ---------------------------------------------------------------------------------------------
# compare: false
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("actual, golden, kwargs, passed", [
    (torch.tensor([3, 1, 2]), torch.tensor([0, 1, 2]), {}, True),                     # values ignored
    (torch.zeros(3, 2).t(), torch.zeros(2, 3, dtype=F64), {}, True),                  # layout not checked
    (torch.tensor([0, 1]), torch.tensor([0, 1, 2]), {}, False),                       # shape checked
    (torch.tensor([0, 1, 2], dtype=torch.int32), torch.tensor([0, 1, 2]), {"expected_dtype": "int64"}, False),
    (torch.zeros(3).as_subclass(SubTensor), torch.zeros(3, dtype=F64), {}, False),    # type checked
])
def test_compare_false(actual, golden, kwargs, passed):
    v = compare_output(actual, golden, compare=False, **kwargs)
    assert v.passed is passed and v.compared is False
    assert v.rule == ("not_compared" if passed else "structural")


# ---------------------------------------------------------------------------------------------
# allclose checker
# ---------------------------------------------------------------------------------------------

def test_allclose_table_is_torch_testing_defaults():
    assert ALLCLOSE_TOLERANCES["float16"] == (1e-3, 1e-5)
    assert ALLCLOSE_TOLERANCES["bfloat16"] == (1.6e-2, 1e-5)
    assert ALLCLOSE_TOLERANCES["float32"] == (1.3e-6, 1e-5)
    assert ALLCLOSE_TOLERANCES["float64"] == (1e-7, 1e-7)


@pytest.mark.parametrize("dtype, a, g, passed, rule, mismatch", [
    (torch.float32, [1 + 2**-20] * 4, [1.0] * 4, True, "allclose", 0),                # 9.5e-7 <= 1.13e-5
    (torch.float32, [1.0, 1.0, 1.0, 1 + 2**-13], [1.0] * 4, False, "allclose", 1),    # 1.2e-4 > 1.13e-5
    (torch.bfloat16, [1.0078125], [1.0], True, "allclose", 0),                          # 2^-7 <= 0.016001
    (torch.float16, [1 + 2**-9], [1.0], False, "allclose", 1),                          # 0.00195 > 0.00101
    (torch.float32, [NAN, 1.0], [NAN, 1.0], True, "allclose", 0),                       # equal_nan
    (torch.float32, [NAN, 1.0], [1.0, 1.0], False, "nan_positions", 1),
    (torch.float32, [INF, 1.0], [-INF, 1.0], False, "inf_sign", 1),
    (torch.float16, [65504.0], [70000.0], True, "allclose", 0),                         # saturation
])
def test_allclose_checker(dtype, a, g, passed, rule, mismatch):
    v = compare_output(torch.tensor(a, dtype=dtype), torch.tensor(g, dtype=F64), checker="allclose")
    assert (v.passed, v.rule, v.mismatch_count, v.checker) == (passed, rule, mismatch, "allclose")
    assert (v.rtol, v.atol) == ALLCLOSE_TOLERANCES[str(dtype).removeprefix("torch.")]
    assert v.mere is not None  # same statistics recorded


def test_allclose_structural_and_integer():
    v = compare_output(torch.zeros(3, 2).t(), torch.zeros(2, 3, dtype=F64), checker="allclose")
    assert v.failure_type == STRUCTURAL
    v = compare_output(torch.tensor([1, 2]), torch.tensor([1, 3]), checker="allclose")
    assert (v.passed, v.rule) == (False, "integer")


# ---------------------------------------------------------------------------------------------
# Verdict serialisation
# ---------------------------------------------------------------------------------------------

def test_to_dict_is_json_ready():
    v = compare_output(torch.full((4,), 1.0), torch.ones(4, dtype=F64), native=torch.ones(4), index=2, name="y")
    d = v.to_dict()
    assert json.loads(json.dumps(d)) == d
    for key in ("index", "name", "dtype", "expected_dtype", "passed", "compared", "failure_type", "message",
                "checker", "threshold", "total_count", "mismatch_count", "mere", "mare", "max_abs_err",
                "mean_abs_err", "nan_count", "inf_count", "small_value_count", "small_value_err",
                "small_value_native_err", "cancel_count", "cancel_err", "cancel_native_err", "normal_count",
                "normal_err", "normal_native_err", "small_value_max_abs_err", "cancel_max_abs_err", "native_mere"):
        assert key in d
    assert (d["index"], d["expected_dtype"], d["total_count"], d["native_mere"]) == (2, "float32", 4, 0.0)
    assert isinstance(v, OutputVerdict)

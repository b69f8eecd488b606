"""The CANN Bench precision standard, as the judge applies it to one case.

The numbers (threshold table, truncated golden, MERE/MARE, NaN/Inf rules, the
small-value / cancellation / normal region analysis) follow the official
harness wherever that harness is sound.  Where it is not, this module applies a
stricter rule; every such rule is marked ``FIX`` below and in docs/precision.md:

* FIX mere-gate: MERE is enforced on every path.  The official harness only
  looks at MERE on its fast path, so a systematic error between T and 10*T
  (fp32 0.1 %, bf16 7 %, fp16 0.5 %) passed once the region analysis ran.
* FIX small-bound / cancel-bound: the small-value and cancellation regions
  bound the *size* of each error, not only the count, so one 65504 where the
  golden is 1e-6 can no longer hide among "at most two" tolerated errors.
* FIX exact-int-bool: bool outputs are exact like integers (the official
  harness sent bool down the float path and tolerated two flipped bits).
* FIX structure: type (no subclasses), shape, dtype, contiguity and device are
  checked before any number and reported as structural failures
  (``outcome.STRUCTURAL``); the official harness never checked dtype or device.
* FIX bit-exact-fp8: threshold 0 is bit-exact for every float dtype, fp8 too
  (the official bit view only covered fp16/bf16/fp32/fp64).

Numeric failures carry ``outcome.PRECISION``, so a verdict speaks the same vocabulary as the case it
belongs to.  The table lives in :mod:`~pytest_cannbench.judge.thresholds`, the chunked error statistics
in :mod:`~pytest_cannbench.judge.error_scan`, the ``index_gather`` checks in
:mod:`~pytest_cannbench.judge.index_checks`; this module holds the rules and the per-output verdict.

This module imports torch at top level; the plugin imports it lazily.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from pytest_cannbench.judge.error_analysis import chunks
from pytest_cannbench.judge.error_scan import Stats, relative_errors, scan
from pytest_cannbench.judge.thresholds import (
    DtypeThresholds,
    allclose_tolerances,
    dtype_name,
    is_exact_family,
    thresholds_for,
)
from pytest_cannbench.outcome import PRECISION, STRUCTURAL
from pytest_cannbench.vocab.registry import CHECKER_ALIASES, DEFAULT_CHECKER, resolve_checker
from pytest_cannbench.workers.tensor_wire import OutputProblem

__all__ = ["OutputVerdict", "compare_output", "compare_outputs"]


# --------------------------------------------------------------------------------------------
# Verdict
# --------------------------------------------------------------------------------------------


@dataclass
class OutputVerdict:
    """The judge's verdict on one flattened output; ``to_dict`` is JSON-ready.

    Numbers describe the candidate against the truncated golden; ``*_native_*``
    describe the same-precision reference.  ``rule`` names the check that
    decided the verdict (e.g. ``fast_path``, ``region``, ``mere_gate``).
    """

    index: int
    name: str
    dtype: str
    expected_dtype: str
    passed: bool
    compared: bool
    failure_type: str | None = None
    message: str = ""
    checker: str = DEFAULT_CHECKER
    threshold: float | None = None
    total_count: int = 0
    mismatch_count: int = 0
    mere: float | None = None
    mare: float | None = None
    max_abs_err: float | None = None
    mean_abs_err: float | None = None
    nan_count: int = 0
    inf_count: int = 0
    small_value_count: int = 0
    small_value_err: int = 0
    small_value_native_err: int = 0
    cancel_count: int = 0
    cancel_err: int = 0
    cancel_native_err: int = 0
    normal_count: int = 0
    normal_err: int = 0
    normal_native_err: int = 0
    small_value_max_abs_err: float | None = None
    cancel_max_abs_err: float | None = None
    native_mere: float | None = None
    # Additions beyond the brief's field list (all optional):
    normal_mere: float | None = None
    native_normal_mere: float | None = None
    rule: str = ""
    rtol: float | None = None
    atol: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _f(t: torch.Tensor) -> float:
    return float(t.item())


def _n(mask: torch.Tensor) -> int:
    return int(mask.sum().item())


def _structural_error(actual: Any, golden: torch.Tensor, name: str, expected: str, *, full: bool) -> str | None:
    """First structural defect of ``actual`` or None.  Order: type, layout, shape, dtype,
    then (full only) contiguity and device.  FIX structure: dtype and device are checked."""
    if isinstance(actual, OutputProblem):  # found while decoding the candidate worker's reply
        return f"{name}: {actual.message}"
    if type(actual) is not torch.Tensor:
        if isinstance(actual, torch.Tensor):
            return (f"{name}: output is a {type(actual).__name__} (a torch.Tensor subclass); "
                    f"return a plain torch.Tensor")
        return f"{name}: expected a torch.Tensor, got {type(actual).__name__}"
    if actual.layout != torch.strided:
        return f"{name}: output layout {actual.layout} is not torch.strided"
    if tuple(actual.shape) != tuple(golden.shape):
        return f"{name}: shape {tuple(actual.shape)} != golden shape {tuple(golden.shape)}"
    if expected and dtype_name(actual.dtype) != expected:
        return f"{name}: dtype {dtype_name(actual.dtype)} != expected {expected}"
    if not full:
        return None
    if not actual.is_contiguous():
        return (f"{name}: output is not contiguous (shape {tuple(actual.shape)}, stride "
                f"{tuple(actual.stride())}); return a contiguous tensor, not a view of an input")
    if actual.device.type != "cpu":
        return f"{name}: output is on device {actual.device}; the judge expects CPU tensors"
    return None



def _record_stats(v: OutputVerdict, st: Stats, actual: torch.Tensor, has_native: bool) -> None:
    """Fill every numeric field, whichever rule ends up deciding."""
    c = st.count
    v.total_count = actual.numel()
    v.nan_count = c.get("nan", 0)
    v.inf_count = c.get("inf", 0)
    v.mismatch_count = c.get("nan_mismatch", 0) + c.get("inf_sign_mismatch", 0) + c.get("valid_err", 0)
    v.mere = st.mean("rel", "valid")
    v.mare = st.top.get("rel")
    v.max_abs_err = st.top.get("diff")
    v.mean_abs_err = st.mean("diff", "valid")
    v.native_mere = st.mean("nrel", "valid") if has_native else None
    v.normal_mere = st.mean("normal_rel", "normal")
    v.native_normal_mere = st.mean("normal_nrel", "normal") if has_native else None
    v.small_value_count = c.get("small", 0)
    v.small_value_err = c.get("small_err", 0)
    v.small_value_native_err = c.get("small_native_err", 0)
    v.small_value_max_abs_err = st.top.get("small_diff")
    v.cancel_count = c.get("cancel", 0)
    v.cancel_err = c.get("cancel_err", 0)
    v.cancel_native_err = c.get("cancel_native_err", 0)
    v.cancel_max_abs_err = st.top.get("cancel_diff")
    v.normal_count = c.get("normal", 0)
    v.normal_err = c.get("normal_err", 0)
    v.normal_native_err = c.get("normal_native_err", 0)


_BIT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bit_mismatches(actual: torch.Tensor, golden: torch.Tensor) -> int:
    """Positions whose bytes differ from the truncated golden (+0.0 vs -0.0, NaN payloads).
    FIX bit-exact-fp8: the view is chosen by element size, so fp8 is covered too."""
    view = _BIT_VIEW[actual.element_size()]
    a_bits = actual.detach().contiguous().view(view)
    g_bits = golden.detach().cpu().to(actual.dtype).contiguous().view(view)
    return _n(a_bits != g_bits)


def _region_failures(v: OutputVerdict, st: Stats, th: DtypeThresholds, actual: torch.Tensor,
                     golden: torch.Tensor, native: torch.Tensor | None) -> list[str]:
    """Region analysis: count ratio err_cand / max(err_native, 1) <= 2 per region, plus
    the magnitude bounds of FIX small-bound / cancel-bound, plus the strict normal rule."""
    out: list[str] = []
    bounded = (  # region, label, (count, candidate errors, native errors), error rule, size floor
        ("small", "small-value", (v.small_value_count, v.small_value_err, v.small_value_native_err),
         f"|a-g| > {_fmt(th.small_error)}", th.small_threshold, "small_threshold"),
        ("cancel", "cancellation", (v.cancel_count, v.cancel_err, v.cancel_native_err),
         f"rel > {_fmt(th.mare)}", th.cancel_boundary, "cancel_boundary"),
    )
    for region, label, (count, err, native_err), rule, floor, floor_name in bounded:
        if not count:
            continue
        if err / max(native_err, 1) > 2:
            out.append(f"{label} region: {err} errors ({rule}) vs native {native_err}, ratio > 2")
        out.extend(_bound_failure(region, label, st, floor, floor_name, actual, golden, native, th))
    if v.normal_err:
        if v.normal_native_err == 0:
            out.append(f"normal region: {v.normal_err} of {v.normal_count} points exceed rel "
                       f"{_fmt(th.mare)} (MARE {_fmt(st.top.get('normal_rel'))}) and the native "
                       f"reference has none")
        elif v.normal_err / v.normal_native_err > 2:
            out.append(f"normal region: {v.normal_err} points exceed rel {_fmt(th.mare)} vs native "
                       f"{v.normal_native_err}, ratio > 2")
    return out


def _bound_failure(region: str, label: str, st: Stats, floor: float, floor_name: str, actual: torch.Tensor,
                   golden: torch.Tensor, native: torch.Tensor | None, th: DtypeThresholds) -> list[str]:
    """Every point of the region must satisfy |a - g_t| <= max(floor, 2 * native max there)."""
    native_max = st.top.get(f"{region}_ndiff") or 0.0
    bound = max(floor, 2 * native_max)
    if (st.top.get(f"{region}_diff") or 0.0) <= bound:
        return []
    over_count, worst_diff, worst_golden = 0, -1.0, 0.0
    for _, an in chunks(actual, golden, native, th):  # second pass only when a point is over
        over = getattr(an, region) & (an.diff > bound)
        over_count += int(over.sum())
        if bool(over.any()):
            i = int(torch.argmax(torch.where(over, an.diff, -1.0)))
            if float(an.diff[i]) > worst_diff:
                worst_diff, worst_golden = float(an.diff[i]), float(an.g[i])
    return [f"{label} region: |a-g| {_fmt(worst_diff)} at golden {_fmt(worst_golden)} exceeds bound "
            f"{_fmt(bound)} (max({floor_name} {_fmt(floor)}, 2 x native max {_fmt(native_max)})); "
            f"{over_count} point(s) over"]


def _mere_gate_failure(v: OutputVerdict, th: DtypeThresholds) -> str | None:
    """FIX mere-gate.  Gated MERE = mean relative error over the normal region (the
    small-value and cancellation regions have their own absolute bounds, and their
    relative errors are ill-conditioned).  Strict < T unless the native itself has
    MERE >= T there (deep-reduction relaxation): then candidate <= 2 x native."""
    cand = v.normal_mere
    if cand is None:
        return None
    native = v.native_normal_mere or 0.0
    if native >= th.mere:
        if cand <= 2 * native:
            return None
        return (f"MERE {_fmt(cand)} (normal region) > 2 x native MERE {_fmt(native)} "
                f"(native itself fails T {_fmt(th.mere)})")
    if cand < th.mere:
        return None
    return (f"MERE {_fmt(cand)} (normal region) >= T {_fmt(th.mere)} after the region analysis "
            f"passed (systematic error; native normal-region MERE {_fmt(v.native_normal_mere)})")


def _fail(v: OutputVerdict, failure_type: str, rule: str, message: str) -> OutputVerdict:
    v.passed = False
    v.failure_type = failure_type
    v.rule = rule
    v.message = message
    return v


def _ok(v: OutputVerdict, rule: str, detail: str) -> OutputVerdict:
    v.passed = True
    v.failure_type = None
    v.rule = rule
    v.message = f"{v.name} [{v.dtype}]: passed ({detail})"
    return v


def _nan_inf_failure(v: OutputVerdict, st: Stats) -> OutputVerdict | None:
    k = st.count.get("nan_mismatch", 0)
    if k:
        return _fail(v, PRECISION, "nan_positions",
                     f"{v.name} [{v.dtype}]: NaN positions differ from the golden at {k} of "
                     f"{v.total_count} elements")
    k = st.count.get("inf_sign_mismatch", 0)
    if k:
        return _fail(v, PRECISION, "inf_sign",
                     f"{v.name} [{v.dtype}]: Inf sign differs from the golden at {k} of "
                     f"{v.total_count} elements")
    return None


# --------------------------------------------------------------------------------------------
# Per-dtype-family judges
# --------------------------------------------------------------------------------------------


def _judge_integer(v: OutputVerdict, actual: torch.Tensor, golden: torch.Tensor,
                   th: DtypeThresholds) -> OutputVerdict:
    """FIX exact-int-bool: integers and bool pass iff max |a - g| <= override (0 = exact)."""
    allowed = th.mere
    v.threshold = allowed
    v.total_count = actual.numel()
    g = golden.detach().cpu()
    if g.is_floating_point():
        diff = torch.nan_to_num((actual.detach().double() - g.double()).abs(), nan=math.inf)
    else:
        diff = (actual.detach().long() - g.long()).abs()
    if diff.numel():
        v.max_abs_err = _f(diff.max().double())
        v.mean_abs_err = _f(diff.double().mean())
    over = diff > allowed
    v.mismatch_count = _n(over)
    if v.mismatch_count == 0:
        return _ok(v, "integer",
                   "exact match" if allowed == 0 else f"max |a-g| {_fmt(v.max_abs_err)} <= {_fmt(allowed)}")
    need = "must match exactly" if allowed == 0 else f"allowed max |a-g| {_fmt(allowed)}"
    return _fail(v, PRECISION, "integer",
                 f"{v.name} [{v.dtype}]: {v.mismatch_count} of {v.total_count} elements differ "
                 f"(max |a-g| {_fmt(v.max_abs_err)}; {need})")


NATIVE_RULES = frozenset({"region"})  # the passes whose verdict read the native reference's errors


def decided_without_native(accuracy: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a passing verdict (its outputs' records) read no native reference: then the case's further input
    sets are likely decided the same way, and their references may defer it (judge.case.OperatorCase.judge)."""
    return bool(accuracy) and all(a.get("passed") and a.get("rule") not in NATIVE_RULES for a in accuracy)


def _passed_on_mere_mare(v: OutputVerdict, th: DtypeThresholds) -> OutputVerdict:
    """The pass both the full statistics and the verdict alone give when MERE and MARE are under T and 10 T."""
    return _ok(v, "fast_path", f"MERE {_fmt(v.mere)} < {_fmt(th.mere)}, MARE {_fmt(v.mare)} < {_fmt(th.mare)}")


def _judge_relative(v: OutputVerdict, actual: torch.Tensor, golden: torch.Tensor,
                    native: torch.Tensor | None, th: DtypeThresholds, stats: bool = True) -> OutputVerdict:
    v.threshold = th.mere
    if not stats and not th.exact:  # the verdict alone: MERE and MARE decide it when both pass
        quick = relative_errors(actual, golden, th.mare)
        if quick is not None:
            count, total, top = quick
            if total / count < th.mere and top < th.mare:
                v.total_count, v.mere, v.mare = actual.numel(), total / count, top
                return _passed_on_mere_mare(v, th)
    st = scan(actual, golden, native, th)
    _record_stats(v, st, actual, native is not None)
    if th.exact:
        bad = _bit_mismatches(actual, golden)
        v.mismatch_count = bad
        if bad == 0:
            return _ok(v, "bit_exact", "bit-exact")
        return _fail(v, PRECISION, "bit_exact",
                     f"{v.name} [{v.dtype}]: threshold 0 requires bit-exact output; {bad} of "
                     f"{v.total_count} elements differ in bits (incl. +-0.0 and NaN payloads)")
    failed = _nan_inf_failure(v, st)
    if failed is not None:
        return failed
    if not st.count.get("valid"):
        return _ok(v, "all_excluded", f"all {v.total_count} elements are matched NaN/Inf or empty")
    assert v.mere is not None and v.mare is not None  # mean and max over the valid elements, and there are some
    if v.mere < th.mere and v.mare < th.mare:
        return _passed_on_mere_mare(v, th)
    reasons = _region_failures(v, st, th, actual, golden, native)
    if reasons:
        return _fail(v, PRECISION, "region",
                     f"{v.name} [{v.dtype}]: MERE {_fmt(v.mere)} / MARE {_fmt(v.mare)} over T "
                     f"{_fmt(th.mere)} / {_fmt(th.mare)}; " + "; ".join(reasons))
    gate = _mere_gate_failure(v, th)
    if gate is not None:
        return _fail(v, PRECISION, "mere_gate", f"{v.name} [{v.dtype}]: {gate}")
    return _ok(v, "region", f"region analysis: small {v.small_value_err}/{v.small_value_native_err}, "
                            f"cancel {v.cancel_err}/{v.cancel_native_err}, normal {v.normal_err}/"
                            f"{v.normal_native_err} (candidate/native errors), normal MERE "
                            f"{_fmt(v.normal_mere)}")


def _judge_allclose(v: OutputVerdict, actual: torch.Tensor, golden: torch.Tensor,
                    native: torch.Tensor | None, th: DtypeThresholds,
                    overrides: Mapping[str, float] | None) -> OutputVerdict:
    """|a - g_t| <= atol + rtol * |g_t| everywhere (equal_nan), after the NaN/Inf rules."""
    rtol, atol = allclose_tolerances(v.dtype, overrides)
    v.rtol, v.atol = rtol, atol
    st = scan(actual, golden, native, th, (rtol, atol))
    _record_stats(v, st, actual, native is not None)
    failed = _nan_inf_failure(v, st)
    if failed is not None:
        return failed
    v.mismatch_count = st.count.get("far", 0)
    if v.mismatch_count == 0:
        return _ok(v, "allclose", f"allclose rtol={rtol:g} atol={atol:g}, max |a-g| {_fmt(v.max_abs_err)}")
    return _fail(v, PRECISION, "allclose",
                 f"{v.name} [{v.dtype}]: {v.mismatch_count} of {v.total_count} elements not close "
                 f"(rtol={rtol:g}, atol={atol:g}; max |a-g| {_fmt(v.max_abs_err)})")


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------

def _relative(v: OutputVerdict, actual: torch.Tensor, golden: torch.Tensor, native: torch.Tensor | None,
              th: DtypeThresholds, overrides: Mapping[str, float] | None, stats: bool) -> OutputVerdict:
    return _judge_relative(v, actual, golden, native, th, stats)


def _allclose(v: OutputVerdict, actual: torch.Tensor, golden: torch.Tensor, native: torch.Tensor | None,
              th: DtypeThresholds, overrides: Mapping[str, float] | None, stats: bool) -> OutputVerdict:
    return _judge_allclose(v, actual, golden, native, th, overrides)


FloatJudge = Callable[[OutputVerdict, torch.Tensor, torch.Tensor, "torch.Tensor | None", DtypeThresholds,
                       "Mapping[str, float] | None", bool], OutputVerdict]
# One judge of floating outputs per registered checker (vocab.registry.CHECKERS; the two are held equal by a test).
JUDGES: Mapping[str, FloatJudge] = {"relative_error": _relative, "allclose": _allclose}


def compare_output(actual: Any, golden: Any, native: Any = None, *, index: int = 0, name: str = "y",
                   expected_dtype: Any = None, overrides: Mapping[str, float] | None = None,
                   checker: str = DEFAULT_CHECKER, compare: bool = True, stats: bool = True) -> OutputVerdict:
    """Judge one output: structure first, then numbers by its own dtype's rule.

    ``stats=False`` asks for the verdict alone: an output that passes on MERE and MARE then carries only those
    two figures (``error_scan.relative_errors``); any other gets the full statistics. The verdict is the same.

    ``golden`` is the fp64 truth (or an int/bool tensor); ``native`` the same-precision
    reference or None (then native error counts are 0, i.e. strict).  A golden that is
    not a tensor, or a native whose shape differs from the golden, raises
    TypeError/ValueError: those are reference-side faults the caller must not charge
    to the candidate.
    """
    checker = resolve_checker(checker)  # ValueError naming the choices
    if expected_dtype is not None:
        expected = dtype_name(expected_dtype)
    elif isinstance(native, torch.Tensor):
        expected = dtype_name(native.dtype)
    else:
        expected = ""
    dtype = dtype_name(actual.dtype) if isinstance(actual, torch.Tensor) else (
        "none" if actual is None else getattr(actual, "type_name", type(actual).__name__))
    v = OutputVerdict(index=index, name=name, dtype=dtype, expected_dtype=expected,
                      passed=False, compared=compare, checker=checker)

    if actual is None and golden is None:
        v.compared = False
        return _ok(v, "both_none", "both candidate and golden are None")
    if golden is None:
        return _fail(v, STRUCTURAL, "none", f"{name}: candidate returned {dtype} where the golden has no output")
    if not isinstance(golden, torch.Tensor):
        raise TypeError(f"golden output {name!r} must be a torch.Tensor or None, got {type(golden).__name__}")
    if actual is None:
        return _fail(v, STRUCTURAL, "none", f"{name}: candidate returned None where the golden has a tensor")
    if native is not None:
        if not isinstance(native, torch.Tensor):
            raise TypeError(f"native output {name!r} must be a torch.Tensor or None, got {type(native).__name__}")
        if tuple(native.shape) != tuple(golden.shape):
            raise ValueError(f"native output {name!r} shape {tuple(native.shape)} != golden {tuple(golden.shape)}")

    err = _structural_error(actual, golden, name, expected, full=compare)
    if err is not None:
        return _fail(v, STRUCTURAL, "structural", err)
    if not compare:
        v.total_count = actual.numel()
        return _ok(v, "not_compared", "compare: false, structure only")

    th = thresholds_for(actual.dtype, overrides)
    if is_exact_family(dtype):
        return _judge_integer(v, actual, golden, th)
    return JUDGES[checker](v, actual, golden, native, th, overrides, stats)


def compare_outputs(actual: Sequence[Any], golden: Sequence[Any], native: Sequence[Any] | None, *,
                    names: Sequence[str], expected_dtypes: Sequence[Any] | None = None,
                    overrides: Mapping[str, float] | None = None,
                    compare_flags: Sequence[bool] | None = None,
                    checker: str = DEFAULT_CHECKER, stats: bool = True) -> list[OutputVerdict]:
    """Judge already-flattened outputs position by position.

    A count mismatch yields one structural verdict (nothing can be paired safely).
    A native list of the wrong length raises ValueError (reference-side fault).
    """
    actual, golden = list(actual), list(golden)
    if len(actual) != len(golden):
        v = OutputVerdict(index=0, name="outputs", dtype="", expected_dtype="", passed=False,
                          compared=True, checker=CHECKER_ALIASES.get(checker, checker))
        return [_fail(v, STRUCTURAL, "count",
                      f"output count mismatch: candidate returned {len(actual)}, golden has {len(golden)}")]
    if native is not None and len(native) != len(golden):
        raise ValueError(f"native reference returned {len(native)} outputs, golden {len(golden)}")
    verdicts = []
    for i, (a, g) in enumerate(zip(actual, golden)):
        verdicts.append(compare_output(
            a, g, native[i] if native is not None else None,
            index=i,
            name=names[i] if i < len(names) else f"output{i}",
            expected_dtype=expected_dtypes[i] if expected_dtypes and i < len(expected_dtypes) else None,
            overrides=overrides,
            checker=checker,
            compare=compare_flags[i] if compare_flags and i < len(compare_flags) else True,
            stats=stats,
        ))
    return verdicts

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
  checked before any number and reported as ``"structural"`` failures; the
  official harness never checked dtype or device.
* FIX bit-exact-fp8: threshold 0 is bit-exact for every float dtype, fp8 too
  (the official bit view only covered fp16/bf16/fp32/fp64).

This module imports torch at top level; the plugin imports it lazily.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping, Sequence

import torch

from pytest_cannbench.workers.tensor_wire import OutputProblem

__all__ = [
    "THRESHOLDS",
    "DtypeThresholds",
    "OutputVerdict",
    "thresholds_for",
    "compare_output",
    "compare_outputs",
    "check_index_gather",
    "ALLCLOSE_TOLERANCES",
]

# Denominator guard of the relative error, as in the official standard.
_EPS = 1e-7


# --------------------------------------------------------------------------------------------
# Threshold table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DtypeThresholds:
    """One row of the precision table.

    Float rows: ``mere`` is T, ``mare`` is 10*T, the region constants are the
    official ones and ``exact`` is True only when T == 0 (bit-exact).
    Integer/bool rows: ``mere`` and ``mare`` both carry the allowed
    max |a - g| (0 unless the proto overrides it) and ``exact`` means 0.
    """

    mere: float
    mare: float
    small_threshold: float
    small_error: float
    cancel_boundary: float
    exact: bool


def _float_row(t: float, small_threshold: float, small_error: float, cancel: float) -> DtypeThresholds:
    # MARE limit is exactly 10*T in code (the official doc rounds it to a power of two).
    return DtypeThresholds(t, 10 * t, small_threshold, small_error, cancel, t == 0)


_INT_NAMES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_EXACT_ROW = DtypeThresholds(0.0, 0.0, 0.0, 0.0, 0.0, True)

THRESHOLDS: dict[str, DtypeThresholds] = {
    "float16": _float_row(2**-10, 2**-11, 2**-16, 2**-5),
    "bfloat16": _float_row(2**-7, 2**-8, 2**-16, 2**-3),
    "float32": _float_row(2**-13, 2**-14, 2**-30, 2**-8),
    "float64": _float_row(2**-13, 2**-14, 2**-30, 2**-8),
    "hifloat32": _float_row(2**-11, 2**-12, 2**-28, 2**-8),
    "float8_e4m3fn": _float_row(2**-3, 2**-4, 2**-6, 2**-1),
    "float8_e5m2": _float_row(2**-2, 2**-3, 2**-5, 2**0),
    **{n: _EXACT_ROW for n in _INT_NAMES},
    "bool": _EXACT_ROW,
}

# Short spellings seen in protos and torch aliases; everything else is taken literally.
_ALIASES = {
    "half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32", "fp32": "float32",
    "double": "float64", "fp64": "float64", "int": "int32", "long": "int64", "short": "int16",
    "byte": "uint8", "char": "int8",
}

_INT_NAME_RE = re.compile(r"^u?int\d+$")


def _dtype_name(dtype: Any) -> str:
    """Lower-case torch dtype name ("float16") for a torch.dtype or a string."""
    if isinstance(dtype, torch.dtype):
        return str(dtype).removeprefix("torch.")
    if isinstance(dtype, str):
        name = dtype.strip().lower().removeprefix("torch.")
        return _ALIASES.get(name, name)
    raise TypeError(f"dtype must be a torch.dtype or a str, got {type(dtype).__name__}")


def _is_exact_family(name: str) -> bool:
    """Integers and bool: compared as whole numbers, never by relative error."""
    return name == "bool" or bool(_INT_NAME_RE.match(name))


def _normalise_overrides(overrides: Mapping[str, Any] | None) -> dict[str, float]:
    if not overrides:
        return {}
    out: dict[str, float] = {}
    for key, value in overrides.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"precision_thresholds[{key!r}] must be a non-negative number, got {value!r}")
        out[_dtype_name(key)] = float(value)
    return out


def thresholds_for(dtype: Any, overrides: Mapping[str, float] | None = None) -> DtypeThresholds:
    """The row that governs an output of ``dtype`` (its own dtype, not the case's).

    An override T (proto ``precision_thresholds``) on a float dtype gives
    MERE T and MARE 10*T and keeps the region constants; on an integer or bool
    dtype it is the allowed max |a - g|.  Unknown float dtypes use the float32 row.
    """
    name = _dtype_name(dtype)
    ov = _normalise_overrides(overrides)
    if _is_exact_family(name):
        allowed = ov.get(name, 0.0)
        return DtypeThresholds(allowed, allowed, 0.0, 0.0, 0.0, allowed == 0)
    row = THRESHOLDS.get(name, THRESHOLDS["float32"])
    if name in ov:
        t = ov[name]
        row = replace(row, mere=t, mare=10 * t, exact=t == 0)
    return row


# allclose checker: (rtol, atol) per dtype.  fp16/bf16/fp32/fp64 are torch.testing's
# defaults; fp8 rows are ours (rtol = one mantissa step, atol = the small_error constant).
ALLCLOSE_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "float8_e4m3fn": (2**-3, 2**-6),
    "float8_e5m2": (2**-2, 2**-5),
}


def _allclose_tolerances(name: str, overrides: Mapping[str, float] | None) -> tuple[float, float]:
    """Override T on a float dtype sets rtol = atol = T (0 means exact equality)."""
    ov = _normalise_overrides(overrides)
    if name in ov:
        return ov[name], ov[name]
    return ALLCLOSE_TOLERANCES.get(name, ALLCLOSE_TOLERANCES["float32"])


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
    checker: str = "relative_error"
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

    def to_dict(self) -> dict:
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
    if expected and _dtype_name(actual.dtype) != expected:
        return f"{name}: dtype {_dtype_name(actual.dtype)} != expected {expected}"
    if not full:
        return None
    if not actual.is_contiguous():
        return (f"{name}: output is not contiguous (shape {tuple(actual.shape)}, stride "
                f"{tuple(actual.stride())}); return a contiguous tensor, not a view of an input")
    if actual.device.type != "cpu":
        return f"{name}: output is on device {actual.device}; the judge expects CPU tensors"
    return None


# Outputs are scanned in chunks: every statistic is a count, a sum or a max, and working on
# 1 Mi elements at a time keeps the fp64 temporaries in the allocator's cache instead of
# page-faulting a dozen full-size copies (16 Mi-element outputs went from 8 s to well under 1 s).
_CHUNK = 1 << 20


@dataclass
class _Analysis:
    """The float rules' view of one chunk: saturated fp64 values, errors and region masks."""

    a: torch.Tensor            # candidate, fp64, one-sided inf saturated
    g: torch.Tensor            # truncated golden, fp64, one-sided inf saturated
    diff: torch.Tensor
    rel: torch.Tensor
    ndiff: torch.Tensor        # native |n - g_t| (zeros without a native)
    nrel: torch.Tensor
    valid: torch.Tensor
    nan_mismatch: torch.Tensor
    inf_sign_mismatch: torch.Tensor
    small: torch.Tensor
    cancel: torch.Tensor
    normal: torch.Tensor
    has_native: bool


def _all_finite(x: torch.Tensor) -> bool:
    """One reduction instead of isfinite's three passes: a NaN or Inf anywhere makes the fp64 sum
    non-finite, and finite values of any dtype up to fp32 cannot overflow an fp64 sum of a chunk."""
    return math.isfinite(float(x.sum(dtype=torch.float64)))


def _analyse(actual: torch.Tensor, golden: torch.Tensor, native: torch.Tensor | None,
             th: DtypeThresholds) -> _Analysis:
    dt = actual.dtype
    a = actual.detach().double()
    # Truncated golden: the fp64 truth as the candidate's dtype can represent it.
    g = golden.detach().cpu().to(dt).double()
    fmax = float(torch.finfo(dt).max)
    finite = _all_finite(a) and _all_finite(g)
    if finite:  # the common case: no NaN/Inf bookkeeping at all
        no = torch.zeros(a.shape, dtype=torch.bool)
        valid, nan_mismatch, inf_sign_mismatch = ~no, no, no
    else:
        nan_a, nan_g = torch.isnan(a), torch.isnan(g)
        inf_a, inf_g = torch.isinf(a), torch.isinf(g)
        both_inf = inf_a & inf_g
        inf_sign_mismatch = both_inf & (torch.sign(a) != torch.sign(g))
        # One-sided inf (e.g. fp16 saturation) -> +-dtype max, then compared numerically.
        a = torch.where(inf_a & ~inf_g & ~nan_g, torch.sign(a) * fmax, a)
        g = torch.where(inf_g & ~inf_a & ~nan_a, torch.sign(g) * fmax, g)
        valid = ~(nan_a | nan_g | both_inf)
        nan_mismatch = nan_a ^ nan_g
    diff = (a - g).abs_()
    gabs = g.abs()
    inv = (gabs + _EPS).reciprocal_()
    rel = diff * inv
    if native is not None:
        n = native.detach().cpu().double()
        native_finite = _all_finite(n)
        if not native_finite:
            n = torch.where(torch.isinf(n) & torch.isfinite(g), torch.sign(n) * fmax, n)
        ndiff = (n - g).abs_()
        if not (native_finite and finite):
            # A native NaN is not counted as a native error (as officially: NaN compares False),
            # which keeps the candidate's allowance strict.
            ndiff = torch.nan_to_num_(ndiff, nan=0.0)
        if not finite:
            ndiff = torch.where(valid, ndiff, 0.0)
        nrel = ndiff * inv
    else:
        ndiff = nrel = torch.zeros_like(diff)
    small = gabs < th.small_threshold
    near_zero = gabs < th.cancel_boundary
    if bool(near_zero.any()):
        cancel = near_zero & ~small & (a.abs() < th.cancel_boundary)
    else:
        cancel = near_zero
    if not finite:
        small &= valid
        cancel &= valid
    normal = valid & ~(small | cancel)
    return _Analysis(a, g, diff, rel, ndiff, nrel, valid, nan_mismatch, inf_sign_mismatch,
                     small, cancel, normal, native is not None)


def _chunks(actual: torch.Tensor, golden: torch.Tensor, native: torch.Tensor | None,
            th: DtypeThresholds):
    a, g = actual.detach().reshape(-1), golden.detach().reshape(-1)
    n = native.detach().reshape(-1) if native is not None else None
    for start in range(0, a.numel(), _CHUNK):
        stop = start + _CHUNK
        yield start, _analyse(a[start:stop], g[start:stop], None if n is None else n[start:stop], th)


@dataclass
class _Stats:
    """Counts, sums and maxima over all chunks; everything the verdict and the report need."""

    count: dict[str, int]
    total: dict[str, float]
    top: dict[str, float | None]

    def add(self, key: str, mask: torch.Tensor) -> int:
        k = int(torch.count_nonzero(mask))
        self.count[key] = self.count.get(key, 0) + k
        return k

    def sum(self, key: str, values: torch.Tensor, mask: torch.Tensor, k: int) -> None:
        """Sum of ``values`` where ``mask``; ``k`` = mask's count, so empty and full masks cost little."""
        if k == 0:
            return
        part = values.sum() if k == mask.numel() else torch.where(mask, values, 0.0).sum()
        self.total[key] = self.total.get(key, 0.0) + float(part)

    def max(self, key: str, values: torch.Tensor, mask: torch.Tensor, k: int) -> None:
        if k == 0:
            return
        m = float(values.max() if k == mask.numel() else torch.where(mask, values, -math.inf).max())
        old = self.top.get(key)
        self.top[key] = m if old is None else max(old, m)

    def mean(self, key: str, count_key: str) -> float | None:
        n = self.count.get(count_key, 0)
        return self.total.get(key, 0.0) / n if n else None


def _scan(actual: torch.Tensor, golden: torch.Tensor, native: torch.Tensor | None, th: DtypeThresholds,
          tolerances: tuple[float, float] | None = None) -> _Stats:
    lim = th.mare
    st = _Stats({}, {}, {})
    for _, an in _chunks(actual, golden, native, th):
        st.add("nan_mismatch", an.nan_mismatch)
        st.add("inf_sign_mismatch", an.inf_sign_mismatch)
        k = {region: st.add(region, getattr(an, region)) for region in ("valid", "small", "cancel", "normal")}
        over, nover = an.rel > lim, an.nrel > lim
        st.add("valid_err", an.valid & over)
        if k["small"]:
            st.add("small_err", an.small & (an.diff > th.small_error))
            st.add("small_native_err", an.small & (an.ndiff > th.small_error))
        if k["cancel"]:
            st.add("cancel_err", an.cancel & over)
            st.add("cancel_native_err", an.cancel & nover)
        normal = an.valid if k["normal"] == k["valid"] else an.normal  # same set: reuse the cheaper mask
        st.add("normal_err", normal & over)
        st.add("normal_native_err", normal & nover)
        st.sum("rel", an.rel, an.valid, k["valid"])
        st.sum("diff", an.diff, an.valid, k["valid"])
        st.max("rel", an.rel, an.valid, k["valid"])
        st.max("diff", an.diff, an.valid, k["valid"])
        st.sum("normal_rel", an.rel, normal, k["normal"])
        st.max("normal_rel", an.rel, normal, k["normal"])
        if an.has_native:
            st.sum("nrel", an.nrel, an.valid, k["valid"])
            st.sum("normal_nrel", an.nrel, normal, k["normal"])
        for region in ("small", "cancel"):
            st.max(f"{region}_diff", an.diff, getattr(an, region), k[region])
            st.max(f"{region}_ndiff", an.ndiff, getattr(an, region), k[region])
        if tolerances is not None:
            rtol, atol = tolerances
            st.add("far", an.valid & (an.diff > atol + rtol * an.g.abs()))
    raw = actual.detach().reshape(-1)
    for start in range(0, raw.numel(), _CHUNK):
        part = raw[start:start + _CHUNK]
        if part.dtype.itemsize == 1 and part.is_floating_point():
            part = part.double()  # fp8 has no isnan/isinf kernels
        if not _all_finite(part):
            st.add("nan", torch.isnan(part))
            st.add("inf", torch.isinf(part))
    return st


def _record_stats(v: OutputVerdict, st: _Stats, actual: torch.Tensor, has_native: bool) -> None:
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


def _region_failures(v: OutputVerdict, st: _Stats, th: DtypeThresholds, actual: torch.Tensor,
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


def _bound_failure(region: str, label: str, st: _Stats, floor: float, floor_name: str, actual: torch.Tensor,
                   golden: torch.Tensor, native: torch.Tensor | None, th: DtypeThresholds) -> list[str]:
    """Every point of the region must satisfy |a - g_t| <= max(floor, 2 * native max there)."""
    native_max = st.top.get(f"{region}_ndiff") or 0.0
    bound = max(floor, 2 * native_max)
    if (st.top.get(f"{region}_diff") or 0.0) <= bound:
        return []
    over_count, worst_diff, worst_golden = 0, -1.0, 0.0
    for _, an in _chunks(actual, golden, native, th):  # second pass only when a point is over
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


def _nan_inf_failure(v: OutputVerdict, st: _Stats) -> OutputVerdict | None:
    k = st.count.get("nan_mismatch", 0)
    if k:
        return _fail(v, "precision", "nan_positions",
                     f"{v.name} [{v.dtype}]: NaN positions differ from the golden at {k} of "
                     f"{v.total_count} elements")
    k = st.count.get("inf_sign_mismatch", 0)
    if k:
        return _fail(v, "precision", "inf_sign",
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
    return _fail(v, "precision", "integer",
                 f"{v.name} [{v.dtype}]: {v.mismatch_count} of {v.total_count} elements differ "
                 f"(max |a-g| {_fmt(v.max_abs_err)}; {need})")


def _judge_relative(v: OutputVerdict, actual: torch.Tensor, golden: torch.Tensor,
                    native: torch.Tensor | None, th: DtypeThresholds) -> OutputVerdict:
    v.threshold = th.mere
    st = _scan(actual, golden, native, th)
    _record_stats(v, st, actual, native is not None)
    if th.exact:
        bad = _bit_mismatches(actual, golden)
        v.mismatch_count = bad
        if bad == 0:
            return _ok(v, "bit_exact", "bit-exact")
        return _fail(v, "precision", "bit_exact",
                     f"{v.name} [{v.dtype}]: threshold 0 requires bit-exact output; {bad} of "
                     f"{v.total_count} elements differ in bits (incl. +-0.0 and NaN payloads)")
    failed = _nan_inf_failure(v, st)
    if failed is not None:
        return failed
    if not st.count.get("valid"):
        return _ok(v, "all_excluded", f"all {v.total_count} elements are matched NaN/Inf or empty")
    if v.mere < th.mere and v.mare < th.mare:
        return _ok(v, "fast_path", f"MERE {_fmt(v.mere)} < {_fmt(th.mere)}, MARE {_fmt(v.mare)} < {_fmt(th.mare)}")
    reasons = _region_failures(v, st, th, actual, golden, native)
    if reasons:
        return _fail(v, "precision", "region",
                     f"{v.name} [{v.dtype}]: MERE {_fmt(v.mere)} / MARE {_fmt(v.mare)} over T "
                     f"{_fmt(th.mere)} / {_fmt(th.mare)}; " + "; ".join(reasons))
    gate = _mere_gate_failure(v, th)
    if gate is not None:
        return _fail(v, "precision", "mere_gate", f"{v.name} [{v.dtype}]: {gate}")
    return _ok(v, "region", f"region analysis: small {v.small_value_err}/{v.small_value_native_err}, "
                            f"cancel {v.cancel_err}/{v.cancel_native_err}, normal {v.normal_err}/"
                            f"{v.normal_native_err} (candidate/native errors), normal MERE "
                            f"{_fmt(v.normal_mere)}")


def _judge_allclose(v: OutputVerdict, actual: torch.Tensor, golden: torch.Tensor,
                    native: torch.Tensor | None, th: DtypeThresholds,
                    overrides: Mapping[str, float] | None) -> OutputVerdict:
    """|a - g_t| <= atol + rtol * |g_t| everywhere (equal_nan), after the NaN/Inf rules."""
    rtol, atol = _allclose_tolerances(v.dtype, overrides)
    v.rtol, v.atol = rtol, atol
    st = _scan(actual, golden, native, th, (rtol, atol))
    _record_stats(v, st, actual, native is not None)
    failed = _nan_inf_failure(v, st)
    if failed is not None:
        return failed
    v.mismatch_count = st.count.get("far", 0)
    if v.mismatch_count == 0:
        return _ok(v, "allclose", f"allclose rtol={rtol:g} atol={atol:g}, max |a-g| {_fmt(v.max_abs_err)}")
    return _fail(v, "precision", "allclose",
                 f"{v.name} [{v.dtype}]: {v.mismatch_count} of {v.total_count} elements not close "
                 f"(rtol={rtol:g}, atol={atol:g}; max |a-g| {_fmt(v.max_abs_err)})")


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------

_CHECKERS = {"relative_error": "relative_error", "cann_default": "relative_error", "allclose": "allclose"}


def compare_output(actual: Any, golden: Any, native: Any = None, *, index: int = 0, name: str = "y",
                   expected_dtype: Any = None, overrides: Mapping[str, float] | None = None,
                   checker: str = "relative_error", compare: bool = True) -> OutputVerdict:
    """Judge one output: structure first, then numbers by its own dtype's rule.

    ``golden`` is the fp64 truth (or an int/bool tensor); ``native`` the same-precision
    reference or None (then native error counts are 0, i.e. strict).  A golden that is
    not a tensor, or a native whose shape differs from the golden, raises
    TypeError/ValueError: those are reference-side faults the caller must not charge
    to the candidate.
    """
    if checker not in _CHECKERS:
        raise ValueError(f"unknown checker {checker!r}; expected one of {sorted(_CHECKERS)}")
    checker = _CHECKERS[checker]
    if expected_dtype is not None:
        expected = _dtype_name(expected_dtype)
    elif isinstance(native, torch.Tensor):
        expected = _dtype_name(native.dtype)
    else:
        expected = ""
    dtype = _dtype_name(actual.dtype) if isinstance(actual, torch.Tensor) else (
        "none" if actual is None else getattr(actual, "type_name", type(actual).__name__))
    v = OutputVerdict(index=index, name=name, dtype=dtype, expected_dtype=expected,
                      passed=False, compared=compare, checker=checker)

    if actual is None and golden is None:
        v.compared = False
        return _ok(v, "both_none", "both candidate and golden are None")
    if golden is None:
        return _fail(v, "structural", "none", f"{name}: candidate returned {dtype} where the golden has no output")
    if not isinstance(golden, torch.Tensor):
        raise TypeError(f"golden output {name!r} must be a torch.Tensor or None, got {type(golden).__name__}")
    if actual is None:
        return _fail(v, "structural", "none", f"{name}: candidate returned None where the golden has a tensor")
    if native is not None:
        if not isinstance(native, torch.Tensor):
            raise TypeError(f"native output {name!r} must be a torch.Tensor or None, got {type(native).__name__}")
        if tuple(native.shape) != tuple(golden.shape):
            raise ValueError(f"native output {name!r} shape {tuple(native.shape)} != golden {tuple(golden.shape)}")

    err = _structural_error(actual, golden, name, expected, full=compare)
    if err is not None:
        return _fail(v, "structural", "structural", err)
    if not compare:
        v.total_count = actual.numel()
        return _ok(v, "not_compared", "compare: false, structure only")

    th = thresholds_for(actual.dtype, overrides)
    if _is_exact_family(dtype):
        return _judge_integer(v, actual, golden, th)
    if checker == "allclose":
        return _judge_allclose(v, actual, golden, native, th, overrides)
    return _judge_relative(v, actual, golden, native, th)


def compare_outputs(actual: Sequence[Any], golden: Sequence[Any], native: Sequence[Any] | None, *,
                    names: Sequence[str], expected_dtypes: Sequence[Any] | None = None,
                    overrides: Mapping[str, float] | None = None,
                    compare_flags: Sequence[bool] | None = None,
                    checker: str = "relative_error") -> list[OutputVerdict]:
    """Judge already-flattened outputs position by position.

    A count mismatch yields one structural verdict (nothing can be paired safely).
    A native list of the wrong length raises ValueError (reference-side fault).
    """
    actual, golden = list(actual), list(golden)
    if len(actual) != len(golden):
        v = OutputVerdict(index=0, name="outputs", dtype="", expected_dtype="", passed=False,
                          compared=True, checker=_CHECKERS.get(checker, checker))
        return [_fail(v, "structural", "count",
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
        ))
    return verdicts


# --------------------------------------------------------------------------------------------
# index_gather
# --------------------------------------------------------------------------------------------

_INDEX_SPEC_KEYS = ("input", "dim_attr", "value_output", "value_reduce", "keepdim_attr")
_REDUCERS = {"amax": torch.amax, "amin": torch.amin}
_INDEX_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _spec_problem(spec: Any) -> str | None:
    """Why an ``index_gather`` proto entry is malformed, naming the field; None if fine."""
    if not isinstance(spec, Mapping):
        return (f"spec must be a mapping with 'input', 'dim_attr' and 'value_output' or "
                f"'value_reduce', got {type(spec).__name__} {spec!r}")
    unknown = sorted(str(k) for k in spec if k not in _INDEX_SPEC_KEYS)
    if unknown:
        return f"unknown field(s) {unknown}; allowed {list(_INDEX_SPEC_KEYS)}"
    for key in ("input", "dim_attr", "value_output", "keepdim_attr"):
        val = spec.get(key)
        if val is not None and (not isinstance(val, str) or not val):
            return f"field {key!r} must be a non-empty string, got {val!r}"
    if spec.get("input") is None:
        return "field 'input' is required (the proto input the indices point into)"
    has_out, has_red = spec.get("value_output") is not None, spec.get("value_reduce") is not None
    if has_out == has_red:
        return "exactly one of fields 'value_output' and 'value_reduce' must be given"
    if has_red and spec["value_reduce"] not in _REDUCERS:
        return f"field 'value_reduce' must be 'amax' or 'amin', got {spec['value_reduce']!r}"
    if has_out and spec.get("keepdim_attr") is not None:
        return "field 'keepdim_attr' only applies with 'value_reduce'"
    return None


def _nan_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise equality in which NaN equals NaN (all-NaN cases have valid indices)."""
    common = torch.promote_types(a.dtype, b.dtype)
    a, b = a.to(common), b.to(common)
    eq = a == b
    if common.is_floating_point:
        eq |= torch.isnan(a) & torch.isnan(b)
    return eq


def _bounds_problem(idx: torch.Tensor, size: int) -> str | None:
    if idx.numel() == 0:
        return None
    lo, hi = int(idx.min().item()), int(idx.max().item())
    if lo < 0 or hi >= size:
        return f"index out of bounds: range [{lo}, {hi}] but the gathered dimension has size {size}"
    return None


def check_index_gather(spec: Any, *, inputs: Mapping[str, Any], attrs: Mapping[str, Any],
                       outputs: Mapping[str, Any], index_output: str) -> tuple[bool, str]:
    """Tie-order-independent index validation from the proto's ``index_gather``.

    Pairing form ``{input, dim_attr, value_output}``: input.gather(dim, idx) must equal
    the candidate's own value output.  Reduce form ``{input, dim_attr, value_reduce,
    keepdim_attr}``: input.gather(dim, idx) must equal input.amax/amin(dim).  Any tied
    index is accepted; NaN == NaN.  A missing dim attribute fails (no silent default).
    """
    tag = f"index_gather[{index_output}]"
    problem = _spec_problem(spec)
    if problem is not None:
        return False, f"{tag}: malformed spec: {problem}"
    src = spec["input"]
    dim_attr = spec.get("dim_attr") or "dim"
    x = inputs.get(src)
    if not isinstance(x, torch.Tensor):
        return False, f"{tag}: input {src!r} is not a tensor among the case inputs"
    idx = outputs.get(index_output)
    if not isinstance(idx, torch.Tensor):
        return False, f"{tag}: index output {index_output!r} is missing or not a tensor"
    if idx.dtype not in _INDEX_DTYPES:
        return False, f"{tag}: index output dtype {_dtype_name(idx.dtype)} is not an integer dtype"
    if dim_attr not in attrs:
        return False, f"{tag}: case attrs lack the dim attribute {dim_attr!r}"
    dim = attrs[dim_attr]
    if isinstance(dim, bool) or not isinstance(dim, int):
        return False, f"{tag}: dim attribute {dim_attr!r} must be an int, got {dim!r}"
    x = x.detach().cpu()
    idx = idx.detach().cpu().long()
    if x.dim() == 0:
        return False, f"{tag}: input {src!r} is 0-d; nothing to index"
    d = dim + x.dim() if dim < 0 else dim
    if not 0 <= d < x.dim():
        return False, f"{tag}: dim {dim} out of range for a {x.dim()}-d input"

    if spec.get("value_output") is not None:
        return _check_pairing(tag, x, d, idx, outputs, spec["value_output"])
    return _check_reduce(tag, x, d, idx, attrs, spec["value_reduce"], spec.get("keepdim_attr"))


def _gather_check(tag: str, x: torch.Tensor, d: int, idx: torch.Tensor, target: torch.Tensor,
                  what: str) -> tuple[bool, str]:
    """In bounds, and ``x.gather(d, idx)`` equal to ``target`` (NaN == NaN): the tie-order-free test."""
    bounds = _bounds_problem(idx, x.size(d))
    if bounds:
        return False, f"{tag}: {bounds}"
    eq = _nan_equal(torch.gather(x, d, idx), target)
    bad = _n(~eq)
    if bad:
        return False, f"{tag}: {bad} of {eq.numel()} indices do not point at {what}"
    return True, f"{tag}: all {eq.numel()} indices point at {what}"


def _check_pairing(tag: str, x: torch.Tensor, d: int, idx: torch.Tensor,
                   outputs: Mapping[str, Any], value_name: str) -> tuple[bool, str]:
    values = outputs.get(value_name)
    if not isinstance(values, torch.Tensor):
        return False, f"{tag}: value output {value_name!r} is missing or not a tensor"
    values = values.detach().cpu()
    if idx.dim() != x.dim():
        return False, f"{tag}: index has {idx.dim()} dims, input has {x.dim()}"
    if tuple(idx.shape) != tuple(values.shape):
        return False, f"{tag}: index shape {tuple(idx.shape)} != value output shape {tuple(values.shape)}"
    for k in range(x.dim()):
        if k != d and idx.size(k) > x.size(k):
            return False, f"{tag}: index size {idx.size(k)} on dim {k} exceeds input size {x.size(k)}"
    return _gather_check(tag, x, d, idx, values, f"the value in {value_name!r}")


def _check_reduce(tag: str, x: torch.Tensor, d: int, idx: torch.Tensor, attrs: Mapping[str, Any],
                  reduce: str, keepdim_attr: str | None) -> tuple[bool, str]:
    keepdim = attrs.get(keepdim_attr, False) if keepdim_attr else False
    if keepdim not in (True, False, 0, 1):
        return False, f"{tag}: keepdim attribute {keepdim_attr!r} must be a bool, got {keepdim!r}"
    if x.size(d) == 0:
        return False, f"{tag}: cannot reduce an empty dimension {d}"
    if not keepdim:
        if idx.dim() != x.dim() - 1:
            return False, f"{tag}: keepdim=False expects a {x.dim() - 1}-d index, got {idx.dim()}-d"
        idx = idx.unsqueeze(d)
    elif idx.dim() != x.dim():
        return False, f"{tag}: keepdim=True expects a {x.dim()}-d index, got {idx.dim()}-d"
    ref = _REDUCERS[reduce](x, dim=d, keepdim=True)
    if tuple(idx.shape) != tuple(ref.shape):
        return False, (f"{tag}: index shape {tuple(idx.shape)} != {reduce} result shape {tuple(ref.shape)} "
                       "(keepdim form)")
    return _gather_check(tag, x, d, idx, ref, f"a slice {reduce}")

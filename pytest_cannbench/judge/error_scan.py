"""Error statistics of one float output against its truncated golden, computed chunk by chunk.

The precision rules need counts, sums and maxima of the absolute and relative errors over the whole
output and over its small-value, cancellation and normal regions (for the candidate and for the
same-precision native reference).  :func:`scan` computes them all in one pass over 1 Mi-element
chunks; :func:`chunks` gives the per-chunk view for the rare second pass that locates a worst point.
This module imports torch at top level; the plugin imports it lazily.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pytest_cannbench.judge.thresholds import DtypeThresholds

__all__ = ["CHUNK", "Analysis", "Stats", "all_finite", "analyse", "chunks", "scan"]

# Denominator guard of the relative error, as in the official standard.
_EPS = 1e-7

# Outputs are scanned in chunks: every statistic is a count, a sum or a max, and working on
# 1 Mi elements at a time keeps the fp64 temporaries in the allocator's cache instead of
# page-faulting a dozen full-size copies (16 Mi-element outputs went from 8 s to well under 1 s).
CHUNK = 1 << 20


@dataclass
class Analysis:
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


def all_finite(x: torch.Tensor) -> bool:
    """One reduction instead of isfinite's three passes: a NaN or Inf anywhere makes the fp64 sum
    non-finite, and finite values of any dtype up to fp32 cannot overflow an fp64 sum of a chunk."""
    return math.isfinite(float(x.sum(dtype=torch.float64)))


def analyse(actual: torch.Tensor, golden: torch.Tensor, native: torch.Tensor | None,
             th: DtypeThresholds) -> Analysis:
    dt = actual.dtype
    a = actual.detach().double()
    # Truncated golden: the fp64 truth as the candidate's dtype can represent it.
    g = golden.detach().cpu().to(dt).double()
    fmax = float(torch.finfo(dt).max)
    finite = all_finite(a) and all_finite(g)
    if finite:  # the common case: no NaN/Inf bookkeeping at all
        no = torch.zeros(a.shape, dtype=torch.bool)
        valid, nan_mismatch, inf_sign_mismatch = ~no, no, no
    else:
        nan_a, nan_g = torch.isnan(a), torch.isnan(g)
        inf_a, inf_g = torch.isinf(a), torch.isinf(g)
        both_inf = inf_a & inf_g
        # (each rewrite below is skipped when its mask is empty: the same values without a full-size pass)
        inf_sign_mismatch = both_inf & (torch.sign(a) != torch.sign(g)) if bool(both_inf.any()) else both_inf
        # One-sided inf (e.g. fp16 saturation) -> +-dtype max, then compared numerically.
        one_a, one_g = inf_a & ~inf_g & ~nan_g, inf_g & ~inf_a & ~nan_a
        if bool(one_a.any()):
            a = torch.where(one_a, torch.sign(a) * fmax, a)
        if bool(one_g.any()):
            g = torch.where(one_g, torch.sign(g) * fmax, g)
        valid = ~(nan_a | nan_g | both_inf)
        nan_mismatch = nan_a ^ nan_g
    diff = (a - g).abs_()
    gabs = g.abs()
    inv = (gabs + _EPS).reciprocal_()
    rel = diff * inv
    if native is not None:
        n = native.detach().cpu().double()
        native_finite = all_finite(n)
        if not native_finite:
            one_n = torch.isinf(n) & torch.isfinite(g)
            if bool(one_n.any()):
                n = torch.where(one_n, torch.sign(n) * fmax, n)
        ndiff = (n - g).abs_()
        if not (native_finite and finite):
            # A native NaN is not counted as a native error (as officially: NaN compares False),
            # which keeps the candidate's allowance strict.
            ndiff = torch.nan_to_num_(ndiff, nan=0.0)
        if not finite and not bool(valid.all()):
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
    return Analysis(a, g, diff, rel, ndiff, nrel, valid, nan_mismatch, inf_sign_mismatch,
                     small, cancel, normal, native is not None)


def chunks(actual: torch.Tensor, golden: torch.Tensor, native: torch.Tensor | None,
            th: DtypeThresholds):
    a, g = actual.detach().reshape(-1), golden.detach().reshape(-1)
    n = native.detach().reshape(-1) if native is not None else None
    for start in range(0, a.numel(), CHUNK):
        stop = start + CHUNK
        yield start, analyse(a[start:stop], g[start:stop], None if n is None else n[start:stop], th)


@dataclass
class Stats:
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


def scan(actual: torch.Tensor, golden: torch.Tensor, native: torch.Tensor | None, th: DtypeThresholds,
          tolerances: tuple[float, float] | None = None) -> Stats:
    lim = th.mare
    st = Stats({}, {}, {})
    for _, an in chunks(actual, golden, native, th):
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
    for start in range(0, raw.numel(), CHUNK):
        part = raw[start:start + CHUNK]
        if part.dtype.itemsize == 1 and part.is_floating_point():
            part = part.double()  # fp8 has no isnan/isinf kernels
        if not all_finite(part):
            st.add("nan", torch.isnan(part))
            st.add("inf", torch.isinf(part))
    return st

"""The general path's view of one chunk of a float output: its values, errors and region masks (:func:`analyse`).

This is the definition the precision rules are written against; :mod:`error_scan` sums its figures over chunks and
has a fast path that must give the same figures bit for bit. This module imports torch at top level; the plugin
imports it lazily.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pytest_cannbench.judge.thresholds import DtypeThresholds
from pytest_cannbench.taskformat.memory_need import COMPARISON_CHUNK as CHUNK

__all__ = ["EPS", "Analysis", "all_finite", "analyse", "chunks"]

# Denominator guard of the relative error, as in the official standard.
EPS = 1e-7


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
    inv = (gabs + EPS).reciprocal_()
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


def chunks(actual: torch.Tensor, golden: torch.Tensor, native: torch.Tensor | None, th: DtypeThresholds):
    """:func:`analyse` of each ``CHUNK``-element chunk, with its start: the view that locates a worst point."""
    a, g = actual.detach().reshape(-1), golden.detach().reshape(-1)
    n = native.detach().reshape(-1) if native is not None else None
    for start in range(0, a.numel(), CHUNK):
        stop = start + CHUNK
        yield start, analyse(a[start:stop], g[start:stop], None if n is None else n[start:stop], th)

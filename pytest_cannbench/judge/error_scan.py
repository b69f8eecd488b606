"""Error statistics of one float output against its truncated golden, computed chunk by chunk.

The precision rules need counts, sums and maxima of the absolute and relative errors over the whole output and
over its small-value, cancellation and normal regions (for the candidate and for the same-precision native
reference). :func:`scan` computes them all in one pass over 1 Mi-element chunks (``CHUNK``: the fp64 temporaries
stay in the allocator's cache instead of a dozen full-size copies, and the memory plan charges that dozen,
``taskformat.memory_need``): through :func:`analyse` (the general path, the definition: :mod:`error_analysis`),
or for float32 and narrower outputs through a fast path (:mod:`error_fast`) that gives the same figures bit for
bit at about half the cost, whose element-wise work a compiled kernel does where the judge could build one (a
third of the torch path's time again: :mod:`scan_kernel`); the tests compare all three. This module imports torch
at top level; the plugin imports it lazily.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import torch

from pytest_cannbench.judge import scan_kernel
from pytest_cannbench.judge.error_analysis import EPS, Analysis, all_finite, analyse
from pytest_cannbench.judge.error_fast import (
    SUB,
    Buffers,
    Part,
    as_dtype,
    fast_chunk,
    fast_eligible,
    slice_diff,
    slice_rel,
)
from pytest_cannbench.judge.scan_kernel import Kernel
from pytest_cannbench.judge.thresholds import DtypeThresholds
from pytest_cannbench.taskformat.memory_need import COMPARISON_CHUNK as CHUNK

__all__ = ["CHUNK", "Analysis", "Stats", "all_finite", "analyse", "compiled", "kernel_line", "relative_errors", "scan"]
AUTO = "auto"  # the ``kernel`` argument's default: the process's compiled kernel, where it has one


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
          tolerances: tuple[float, float] | None = None, *, fast: bool = True, kernel: Any = AUTO) -> Stats:
    """All statistics of one output. ``fast=False`` forces the general path everywhere (the tests compare the
    two; the fast path must give the same counts, sums and maxima, bit for bit). ``kernel``: the fast path's
    compiled kernel (:mod:`scan_kernel`), None for the torch path alone; by default the process's own."""
    st, lim = Stats({}, {}, {}), th.mare
    a_all, g_all = actual.detach().reshape(-1), golden.detach().reshape(-1)
    n_all = native.detach().reshape(-1) if native is not None else None
    fast = fast and fast_eligible(actual, golden, native)
    bufs = Buffers(min(a_all.numel(), CHUNK), has_native=n_all is not None) if fast else None
    k = _kernel_for(kernel, a_all, n_all) if fast else None
    for start in range(0, a_all.numel(), CHUNK):
        stop = min(start + CHUNK, a_all.numel())
        a, g = a_all[start:stop], g_all[start:stop]
        n = None if n_all is None else n_all[start:stop]
        if bufs is not None:
            _add(st, fast_chunk(a, g, n, th, tolerances, bufs, k))
            continue
        _general_chunk(st, analyse(a, g, n, th), th, lim, tolerances)
        raw = a.double() if a.dtype.itemsize == 1 and a.is_floating_point() else a  # fp8: no isnan/isinf kernels
        if not all_finite(raw):
            st.add("nan", torch.isnan(raw))
            st.add("inf", torch.isinf(raw))
    return st


def relative_errors(actual: torch.Tensor, golden: torch.Tensor, limit: float = math.inf, *,
                    kernel: Any = AUTO) -> tuple[int, float, float] | None:
    """MERE's count and sum and MARE, exactly as :func:`scan` computes them, when every value is finite, the
    fast path applies and every relative error is under ``limit``; None otherwise (then only :func:`scan` can
    say), as soon as a slice shows it.

    A verdict that only needs to know whether an output passes (a timed output, already judged in full on the
    case's own inputs) passes on MERE and MARE alone whenever both are under their thresholds. This reads
    neither the native reference nor the regions (a third of the fast path's work) and gives up at the first
    slice with a relative error at MARE's threshold. The figures are :func:`scan`'s bits: the same element-wise
    operations, slices, chunk sums and order (the tests compare them)."""
    if not fast_eligible(actual, golden, None) or actual.numel() == 0:
        return None
    a_all, g_all = actual.detach().reshape(-1), golden.detach().reshape(-1)
    dt, size_all = actual.dtype, a_all.numel()
    rel, A, G, D, INV = _verdict_buffers()
    total, top = 0.0, -math.inf
    k = _kernel_for(kernel, a_all, None)
    for start in range(0, size_all, CHUNK):
        stop = min(start + CHUNK, size_all)
        a, g, size = a_all[start:stop], g_all[start:stop], stop - start
        if k is not None:
            m_chunk = k.rel_chunk(a, as_dtype(g, dt), SUB, limit, EPS, rel)
            if m_chunk is None:
                return None
            top = max(top, m_chunk)
            total = total + float(rel[:size].sum())
            continue
        for s in range(0, size, SUB):
            e = min(s + SUB, size)
            w = e - s
            R = rel[s:e]
            slice_diff(a[s:e], g[s:e], dt, A[:w], G[:w], D[:w])
            slice_rel(G[:w], D[:w], G[:w], INV[:w], R)  # |G| in place: nothing else reads G here
            m = float(R.max())
            if not m < limit:  # over the limit, or a NaN/Inf in the candidate or the golden: the full rules
                return None     # decide (an output with zeros meets a near-zero point in its first slices)
            top = max(top, m)
        total = total + float(rel[:size].sum())
    return size_all, total, top


_local = threading.local()


def _verdict_buffers() -> tuple[torch.Tensor, ...]:
    """:func:`relative_errors`' float64 temporaries (a chunk for the sums, four slices), made once per thread: it
    runs for every timed set, and fresh 10 MiB each time were new pages, dear on a VM that reports freed memory to
    its host (benchmarks/results/performance-rounds.md, Round 13). Every call writes what it reads, so nothing carries
    over."""
    buffers = getattr(_local, "verdict", None)
    if buffers is None:
        f64 = torch.float64
        buffers = _local.verdict = (torch.empty(CHUNK, dtype=f64), *(torch.empty(SUB, dtype=f64) for _ in range(4)))
    return buffers


def _general_chunk(st: Stats, an: Analysis, th: DtypeThresholds, lim: float,
                   tolerances: tuple[float, float] | None) -> None:
    """One chunk's statistics from its full :class:`Analysis` (any values: NaN, Inf, saturation)."""
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


def _add(st: Stats, part: Part) -> None:
    """A fast-path chunk's figures into the statistics."""
    for key, k in part.count.items():
        st.count[key] = st.count.get(key, 0) + k
    for key, v in part.total.items():
        st.total[key] = st.total.get(key, 0.0) + v
    for key, m in part.top.items():
        old = st.top.get(key)
        st.top[key] = m if old is None else max(old, m)


def _kernel_for(kernel: Any, a: torch.Tensor, n: torch.Tensor | None) -> Kernel | None:
    """``kernel`` (the process's by default) where it reads these flattened tensors, else None (goldens: as_dtype)."""
    k = compiled() if kernel is AUTO else kernel
    return k if k is not None and k.takes(a, n) else None


def compiled() -> Kernel | None:
    """This process's compiled kernel, built and self-tested on first use; None where the torch path works."""
    return _loaded().kernel


def kernel_line() -> str:
    """The session header's line on the comparison's kernel (builds it, in the process that asks)."""
    return scan_kernel.describe(_loaded())


def _loaded() -> scan_kernel.Loaded:
    return scan_kernel.load(lambda k: scan_kernel.self_test(k, scan, relative_errors))  # against this torch path

"""The comparison's fast path: :func:`error_scan.scan`'s figures for float32 and narrower outputs, the same bit
for bit at about half the general path's cost, slice by slice in cache-sized temporaries; the compiled kernel
(:mod:`scan_kernel`) takes the slices it can, the torch code here the rest. Imports torch at top level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pytest_cannbench.judge import scan_kernel
from pytest_cannbench.judge.error_analysis import EPS, Analysis, analyse
from pytest_cannbench.judge.scan_kernel import Kernel
from pytest_cannbench.judge.thresholds import DtypeThresholds

# The fast path (the comparison was the largest phase, ~15x the floor's streamed MERE/MARE). The
# general path makes a dozen fresh 8 MiB float64 temporaries per 1 Mi-element chunk and ~60 passes over them,
# all memory-bound. The fast path does the same element-wise arithmetic on SUB-element slices whose
# temporaries stay in cache and are reused, and keeps only what the sums need at chunk size: the sums are then
# taken with the same ``Tensor.sum`` over the same 1 Mi-element float64 values as before (the masked-out points
# zeroed, as ``torch.where(mask, values, 0.0)`` does), so they are bit-identical; counts and maxima do not depend
# on how they are split. A slice whose values are all finite (candidate, truncated golden, native) skips the
# NaN/Inf bookkeeping, which is then a no-op; any other slice goes through :func:`analyse` itself. Every
# decision :func:`analyse` takes for a whole chunk (saturate, ``nan_to_num``, mask by ``valid``) changes no
# element when the values are finite, so taking it per slice gives the same elements. That argument needs
# dtypes whose finite values cannot overflow a float64 sum or difference: float32 and narrower, not float64
# (or fp8, which has no kernels), which keep the general path.
SUB = 1 << 16
_FAST_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_COUNTS = ("nan_mismatch", "inf_sign_mismatch", "valid", "small", "cancel", "normal", "valid_err", "small_err",
           "small_native_err", "cancel_err", "cancel_native_err", "normal_err", "normal_native_err", "far",
           "nan", "inf")


def fast_eligible(actual: torch.Tensor, golden: torch.Tensor, native: torch.Tensor | None) -> bool:
    return (actual.dtype in _FAST_DTYPES and actual.device.type == golden.device.type == "cpu"
            and golden.numel() == actual.numel()
            and (native is None or (native.dtype in _FAST_DTYPES and native.numel() == actual.numel()
                                    and native.device.type == "cpu")))


class Buffers:
    """Reused temporaries: chunk-sized for what is summed, SUB-sized for the rest."""

    def __init__(self, chunk: int, has_native: bool) -> None:
        f64, sub = torch.float64, min(chunk, SUB)
        self.rel, self.diff = torch.empty(chunk, dtype=f64), torch.empty(chunk, dtype=f64)
        self.nrel = torch.empty(chunk, dtype=f64) if has_native else None
        self.normal_rel = torch.empty(chunk, dtype=f64)  # rel with the points outside the normal region zeroed
        self.normal_nrel = torch.empty(chunk, dtype=f64) if has_native else None
        self.a, self.g, self.gabs, self.inv, self.n, self.ndiff, self.tmp = (
            torch.empty(sub, dtype=f64) for _ in range(7))
        self.zeros = None if has_native else torch.zeros(sub, dtype=f64)
        self.mask = torch.empty(sub, dtype=torch.bool)
        # masks as float64 0/1: comparisons write them twice as fast as bool, sums count them faster than
        # count_nonzero, and a product with one is exact (and zeroes a non-negative value to +0.0)
        self.over, self.nover, self.small, self.cancel, self.t2 = (torch.empty(sub, dtype=f64) for _ in range(5))
        self.zero, self.neg = torch.zeros((), dtype=f64), torch.full((), -math.inf, dtype=f64)


@dataclass
class Part:
    """One chunk's contribution, in the general path's keys: counts and maxima as they are found, the sums
    once the chunk's buffers are full."""

    count: dict[str, int]
    total: dict[str, float]
    top: dict[str, float]
    nonfinite: bool = False  # the raw candidate holds a NaN/Inf: the general path then reports nan/inf counts

    def put_max(self, key: str, value: float) -> None:
        old = self.top.get(key)
        self.top[key] = value if old is None else max(old, value)


def fast_chunk(a: torch.Tensor, g: torch.Tensor, n: torch.Tensor | None, th: DtypeThresholds,
                tolerances: tuple[float, float] | None, b: Buffers, kern: Kernel | None = None) -> Part:
    """The general path's statistics for one chunk, slice by slice: those the compiled kernel ``kern`` takes in
    one call, the others (and all without a kernel) with torch."""
    dt, lim, size = a.dtype, th.mare, a.numel()
    near_bound = max(th.small_threshold, th.cancel_boundary)  # at or above both: a normal point
    part = Part(dict.fromkeys(_COUNTS, 0), {}, {})
    count, put_max = part.count, part.put_max
    all_normal: list[tuple[int, int]] = []  # slices whose points are all in the normal region
    status = _kernel_chunk(kern, a, as_dtype(g, dt), n, th, tolerances, b, part) if kern is not None else None
    for s in range(0, size, SUB):
        e = min(s + SUB, size)
        w = e - s
        if status is not None and status[s // SUB] != scan_kernel.LEFT:  # taken by the kernel
            if status[s // SUB] == scan_kernel.ALL_NORMAL:
                all_normal.append((s, e))
            continue
        A, G, GA, INV, T, m = b.a[:w], b.g[:w], b.gabs[:w], b.inv[:w], b.tmp[:w], b.mask[:w]
        D, R = b.diff[s:e], b.rel[s:e]
        slice_diff(a[s:e], g[s:e], dt, A, G, D)
        diff_max = float(D.max())
        if n is not None:
            N, ND = b.n[:w], b.ndiff[:w]
            N.copy_(n[s:e])
            torch.sub(N, G, out=ND).abs_()
        k_out_of_rules = 0
        if not math.isfinite(diff_max):  # a NaN/Inf in the candidate or the golden
            k = _matching_specials(part, th, tolerances, b, s, e, None if n is None else ND)
            if k is None:
                _general_slice(part, a, g, n, th, tolerances, b, s, e)
            if k is None or k == w:  # decided by the general path, or nothing in the slice is compared
                continue
            k_out_of_rules, diff_max = k, float(D.max())
        slice_rel(G, D, GA, INV, R)
        # counts over MARE's threshold from the maxima where those say there are none (one pass instead of a
        # comparison and a sum); the 0/1 masks themselves only where the dense regions read them
        rel_max = float(R.max())
        if n is not None:
            assert b.nrel is not None
            NR = b.nrel[s:e]
            torch.mul(ND, INV, out=NR)
            nrel_max = float(NR.max())  # finite unless the native alone holds a NaN/Inf (INV is finite, > 0)
            if not math.isfinite(nrel_max):
                _general_slice(part, a, g, n, th, tolerances, b, s, e)
                continue
            k_nover = _count_over(NR, nrel_max, lim, b.nover[:w])
        else:  # the general path's native errors are zeros
            assert b.zeros is not None
            ND = NR = b.zeros[:w]
            k_nover = _count_over(NR, 0.0, lim, b.nover[:w])
        count["valid"] += w - k_out_of_rules
        k_over = _count_over(R, rel_max, lim, b.over[:w])
        count["valid_err"] += k_over
        put_max("rel", rel_max)
        put_max("diff", diff_max)
        if tolerances is not None:
            rtol, atol = tolerances
            torch.mul(GA, rtol, out=T).add_(atol)
            count["far"] += int(torch.gt(D, T, out=b.t2[:w]).sum())
        if float(GA.min()) >= near_bound:  # all normal (one pass; the near-zero mask is not needed)
            count["normal"] += w
            count["normal_err"] += k_over
            count["normal_native_err"] += k_nover
            put_max("normal_rel", rel_max)
            all_normal.append((s, e))  # the normal sums' buffers get R and NR only if the chunk needs them
            continue
        near = torch.nonzero(torch.lt(GA, near_bound, out=m)).squeeze_(1)  # the points near zero, in order
        if 8 * near.numel() < w:
            _sparse_regions(part, th, b, s, e, near, k_over, k_nover, rel_max, ND, NR, k_out_of_rules)
        else:
            for k_mask, mask in ((k_over, b.over[:w]), (k_nover, b.nover[:w])):
                if k_mask == 0:  # counted from its maximum: the dense regions read the mask
                    mask.zero_()
            _dense_regions(part, th, b, s, e, k_over, k_nover, ND, NR, k_out_of_rules)
    if all_normal and part.count["normal"] != size:  # _finish sums the normal buffers, not rel and nrel
        for s, e in all_normal:
            b.normal_rel[s:e].copy_(b.rel[s:e])
            if b.normal_nrel is not None:
                assert b.nrel is not None
                b.normal_nrel[s:e].copy_(b.nrel[s:e])
    _finish(part, b, size, n is not None, tolerances)
    return part


def _kernel_chunk(k: Kernel, a: torch.Tensor, g: torch.Tensor, n: torch.Tensor | None, th: DtypeThresholds,
                  tolerances: tuple[float, float] | None, b: Buffers, part: Part) -> list[int]:
    """The compiled kernel on one chunk: its counts and maxima into ``part``, its values into the chunk buffers;
    returns each slice's status (``scan_kernel.LEFT``: the torch path's to do)."""
    taken = k.scan_chunk(a, g, n, SUB, (th.mare, th.small_threshold, th.small_error, th.cancel_boundary),
                         tolerances, _specials_ok(th, tolerances), EPS, b.rel, b.diff, b.nrel, b.normal_rel,
                         b.normal_nrel)
    part.count.update({key: part.count[key] + value for key, value in taken.count.items()})
    part.top.update({key: max(m, part.top.get(key, m)) for key, m in taken.top.items()})
    part.nonfinite = part.nonfinite or bool(taken.count["nan"] or taken.count["inf"])
    return taken.status


def as_dtype(g: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    """A chunk of the golden in the candidate's dtype, contiguous (as ``slice_diff`` truncates each slice)."""
    return (g if g.dtype == dt else g.to(dt)).contiguous()


def _general_slice(part: Part, a: torch.Tensor, g: torch.Tensor, n: torch.Tensor | None, th: DtypeThresholds,
                   tolerances: tuple[float, float] | None, b: Buffers, s: int, e: int) -> None:
    """Slice ``[s, e)`` of the chunk through :func:`analyse` (a NaN/Inf the fast path does not take)."""
    an = analyse(a[s:e], g[s:e], None if n is None else n[s:e], th)
    _masked_slice(part, a[s:e], an, th, tolerances, b, s, e)


def _count_over(values: torch.Tensor, top: float, lim: float, mask: torch.Tensor) -> int:
    """How many of ``values`` (finite, >= 0) are over ``lim``: none when their maximum ``top`` is not, else
    counted through ``mask`` (0/1, left holding them). A mask left unwritten must be zeroed before it is read."""
    if not top > lim:
        return 0
    return int(torch.gt(values, lim, out=mask).sum())


def slice_diff(a: torch.Tensor, g: torch.Tensor, dt: torch.dtype, A: torch.Tensor, G: torch.Tensor,
                D: torch.Tensor) -> None:
    """One slice into float64 buffers: the candidate into ``A``, the golden truncated to the candidate's dtype
    into ``G``, ``|A - G|`` into ``D``. Shared by the fast path and :func:`relative_errors`, whose figures must
    be the same bits."""
    A.copy_(a)
    G.copy_(g if g.dtype == dt else g.to(dt))
    torch.sub(A, G, out=D).abs_()


def slice_rel(G: torch.Tensor, D: torch.Tensor, GA: torch.Tensor, INV: torch.Tensor, R: torch.Tensor) -> None:
    """The slice's relative errors: ``|G|`` into ``GA`` (may be ``G`` itself), ``1 / (|G| + eps)`` into ``INV``
    and ``D * INV`` into ``R``, as :func:`analyse` computes them."""
    torch.abs(G, out=GA)
    torch.add(GA, EPS, out=INV).reciprocal_()
    torch.mul(D, INV, out=R)


def _sparse_regions(part: Part, th: DtypeThresholds, b: Buffers, s: int, e: int, idx: torch.Tensor,
                    k_over: int, k_nover: int, rel_max: float, ND: torch.Tensor, NR: torch.Tensor,
                    excluded: int = 0) -> None:
    """A finite slice with few points near zero (``idx``, their positions in the slice, ascending): only those
    are gathered and classified; the normal region's counts are the slice's less theirs. ``excluded``: points
    :func:`_matching_specials` zeroed, which land in the small-value region with no error and are taken out of
    it here."""
    count, put_max, lim, w = part.count, part.put_max, th.mare, e - s
    D, R = b.diff[s:e], b.rel[s:e]
    gz, dz, rz, ndz, nrz = b.gabs[:w][idx], D[idx], R[idx], ND[idx], NR[idx]
    small = gz < th.small_threshold
    cancel = (gz < th.cancel_boundary) & ~small & (b.a[:w][idx].abs() < th.cancel_boundary)
    over, nover = rz > lim, nrz > lim
    k_small, k_cancel = int(torch.count_nonzero(small)) - excluded, int(torch.count_nonzero(cancel))
    count["small"] += k_small
    count["cancel"] += k_cancel
    if k_small:
        count["small_err"] += int(torch.count_nonzero(small & (dz > th.small_error)))
        count["small_native_err"] += int(torch.count_nonzero(small & (ndz > th.small_error)))
        put_max("small_diff", float((dz * small).max()))  # errors are >= 0: the points outside add +0.0
        put_max("small_ndiff", float((ndz * small).max()))
    if k_cancel:
        count["cancel_err"] += int(torch.count_nonzero(cancel & over))
        count["cancel_native_err"] += int(torch.count_nonzero(cancel & nover))
        put_max("cancel_diff", float((dz * cancel).max()))
        put_max("cancel_ndiff", float((ndz * cancel).max()))
    outside = small | cancel
    k_out = int(torch.count_nonzero(outside))
    count["normal"] += w - k_out
    count["normal_err"] += k_over - int(torch.count_nonzero(outside & over))
    count["normal_native_err"] += k_nover - int(torch.count_nonzero(outside & nover))
    drop = idx[outside]
    b.normal_rel[s:e].copy_(R).index_fill_(0, drop, 0.0)
    if b.normal_nrel is not None:
        b.normal_nrel[s:e].copy_(NR).index_fill_(0, drop, 0.0)
    if not k_out:
        put_max("normal_rel", rel_max)
    elif k_out < w:  # relative errors are >= 0, and the points outside are +0.0 there
        put_max("normal_rel", float(b.normal_rel[s:e].max()))


def _dense_regions(part: Part, th: DtypeThresholds, b: Buffers, s: int, e: int, k_over: int, k_nover: int,
                   ND: torch.Tensor, NR: torch.Tensor, excluded: int = 0) -> None:
    """A finite slice with many points near zero (an activation's flat tail): the regions as full 0/1 masks.
    Counts are sums and dot products of 0/1 values (exact), and a region's maximum of a non-negative quantity
    (errors, relative errors) is the maximum of its product with the mask, since the points outside become +0.0.
    ``excluded``: as in :func:`_sparse_regions`."""
    count, put_max, w = part.count, part.put_max, e - s
    D, R, GA, T, T2 = b.diff[s:e], b.rel[s:e], b.gabs[:w], b.tmp[:w], b.t2[:w]
    small, cancel, over, nover = b.small[:w], b.cancel[:w], b.over[:w], b.nover[:w]
    torch.lt(GA, th.small_threshold, out=small)
    torch.lt(GA, th.cancel_boundary, out=cancel)  # near zero, ...
    cancel.mul_(torch.lt(torch.abs(b.a[:w], out=T), th.cancel_boundary, out=T2))  # ... the candidate too, ...
    cancel.mul_(torch.ge(GA, th.small_threshold, out=T2))  # ... and not small
    k_small, k_cancel = int(small.sum()) - excluded, int(cancel.sum())
    count["small"] += k_small
    count["cancel"] += k_cancel
    if k_small:
        count["small_err"] += int(torch.dot(small, torch.gt(D, th.small_error, out=T2)))
        count["small_native_err"] += int(torch.dot(small, torch.gt(ND, th.small_error, out=T2)))
        put_max("small_diff", float(torch.mul(D, small, out=T).max()))
        put_max("small_ndiff", float(torch.mul(ND, small, out=T).max()))
    if k_cancel:
        count["cancel_err"] += int(torch.dot(cancel, over))
        count["cancel_native_err"] += int(torch.dot(cancel, nover))
        put_max("cancel_diff", float(torch.mul(D, cancel, out=T).max()))
        put_max("cancel_ndiff", float(torch.mul(ND, cancel, out=T).max()))
    outside = small.add_(cancel)  # the two regions are disjoint: still 0/1
    k_out = int(outside.sum())
    count["normal"] += w - k_out
    count["normal_err"] += k_over - int(torch.dot(outside, over))
    count["normal_native_err"] += k_nover - int(torch.dot(outside, nover))
    normal = torch.sub(outside, 1.0, out=T2).abs_()  # 1 - outside, as +0.0 and 1.0 (no -0.0)
    torch.mul(R, normal, out=b.normal_rel[s:e])  # R * 0 = +0.0: what torch.where(normal, R, 0.0) holds
    if b.normal_nrel is not None:
        torch.mul(NR, normal, out=b.normal_nrel[s:e])
    if k_out < w:
        put_max("normal_rel", float(b.normal_rel[s:e].max()))


def _matching_specials(part: Part, th: DtypeThresholds, tolerances: tuple[float, float] | None, b: Buffers,
                       s: int, e: int, ND: torch.Tensor | None) -> int | None:
    """A slice whose NaN and Inf the candidate and the truncated golden share point for point (``exp``
    overflowing in both, NaN inputs passed through) made a finite one; None for any other special, which
    :func:`analyse` decides. It leaves such points out of every figure (``valid`` false) and zeroes them in its
    sums; here the candidate, the golden and both errors are zeroed there, so their relative errors are +0.0
    and each lands in the small-value region with no error, from which the caller takes them out again.
    Returns how many points were left out; the candidate's NaN and Inf are counted as the general path does."""
    w = e - s
    if not _specials_ok(th, tolerances):
        return None
    A, G, D = b.a[:w], b.g[:w], b.diff[s:e]
    # the candidate and the golden are float64 copies of float32-or-narrower values: their difference is
    # finite exactly where both are, so the points left out are the non-finite ones of D (few: gathered)
    left_out = torch.nonzero(torch.isfinite(D).logical_not_()).squeeze_(1)
    a_out, g_out = A[left_out], G[left_out]
    if not bool((torch.eq(a_out, g_out) | (torch.isnan(a_out) & torch.isnan(g_out))).all()):
        return None
    if ND is not None:
        ND.index_fill_(0, left_out, 0.0)
        if not math.isfinite(float(ND.max())):  # the native is NaN or Inf where both are finite
            return None
    _count_specials(part, a_out)  # the candidate's NaN and Inf are all among the points left out
    k = left_out.numel()
    if k == w:  # all left out: the general path's sums see zeros only, and no count or maximum moves
        for t in [x for x in (b.rel, b.diff, b.nrel, b.normal_rel, b.normal_nrel) if x is not None]:
            t[s:e].zero_()
    else:
        for t in (A, G, D):
            t.index_fill_(0, left_out, 0.0)
    return k


def _specials_ok(th: DtypeThresholds, tolerances: tuple[float, float] | None) -> bool:
    """Whether points left out as zeros land in no error count (how shared specials are left out)."""
    return th.small_threshold > 0 and th.small_error >= 0 and th.mare >= 0 and (tolerances or (0, 0))[1] >= 0


def _masked_slice(part: Part, raw: torch.Tensor, an: Analysis, th: DtypeThresholds,
                  tolerances: tuple[float, float] | None, b: Buffers, s: int, e: int) -> None:
    """A slice holding a NaN/Inf: :func:`analyse`'s masks, counted as the general path counts a chunk, and its
    values written to the chunk buffers with the points outside each sum's mask zeroed. ``raw`` is the slice of
    the candidate as it came (before saturation), whose NaN/Inf the report counts."""
    count, put_max, lim = part.count, part.put_max, th.mare
    valid, small, cancel, normal = an.valid, an.small, an.cancel, an.normal
    count["nan_mismatch"] += int(torch.count_nonzero(an.nan_mismatch))
    count["inf_sign_mismatch"] += int(torch.count_nonzero(an.inf_sign_mismatch))
    k = {name: int(torch.count_nonzero(mask)) for name, mask in
         (("valid", valid), ("small", small), ("cancel", cancel), ("normal", normal))}
    for name, value in k.items():
        count[name] += value
    over, nover = an.rel > lim, an.nrel > lim
    count["valid_err"] += int(torch.count_nonzero(valid & over))
    count["small_err"] += int(torch.count_nonzero(small & (an.diff > th.small_error)))
    count["small_native_err"] += int(torch.count_nonzero(small & (an.ndiff > th.small_error)))
    count["cancel_err"] += int(torch.count_nonzero(cancel & over))
    count["cancel_native_err"] += int(torch.count_nonzero(cancel & nover))
    count["normal_err"] += int(torch.count_nonzero(normal & over))
    count["normal_native_err"] += int(torch.count_nonzero(normal & nover))
    zero, neg = b.zero, b.neg
    torch.where(valid, an.rel, zero, out=b.rel[s:e])
    torch.where(valid, an.diff, zero, out=b.diff[s:e])
    if b.nrel is not None and an.has_native:
        torch.where(valid, an.nrel, zero, out=b.nrel[s:e])
    for key, values, mask, k_mask in (("rel", an.rel, valid, k["valid"]), ("diff", an.diff, valid, k["valid"]),
                                      ("normal_rel", an.rel, normal, k["normal"]),
                                      ("small_diff", an.diff, small, k["small"]),
                                      ("small_ndiff", an.ndiff, small, k["small"]),
                                      ("cancel_diff", an.diff, cancel, k["cancel"]),
                                      ("cancel_ndiff", an.ndiff, cancel, k["cancel"])):
        if k_mask:
            put_max(key, float(torch.where(mask, values, neg).max()))
    torch.where(normal, an.rel, zero, out=b.normal_rel[s:e])
    if b.normal_nrel is not None and an.has_native:
        torch.where(normal, an.nrel, zero, out=b.normal_nrel[s:e])
    if tolerances is not None:
        rtol, atol = tolerances
        count["far"] += int(torch.count_nonzero(valid & (an.diff > atol + rtol * an.g.abs())))
    _count_specials(part, raw)


def _count_specials(part: Part, raw: torch.Tensor) -> None:
    """The candidate's NaN and Inf, which the report counts."""
    k_nan, k_inf = int(torch.count_nonzero(torch.isnan(raw))), int(torch.count_nonzero(torch.isinf(raw)))
    part.count["nan"] += k_nan
    part.count["inf"] += k_inf
    part.nonfinite = part.nonfinite or bool(k_nan or k_inf)


def _finish(part: Part, b: Buffers, size: int, has_native: bool,
            tolerances: tuple[float, float] | None) -> None:
    """The chunk's sums, over the same values the general path sums, and its key set."""
    count, total = part.count, part.total
    k_valid, k_normal = count["valid"], count["normal"]
    if k_valid:
        total["rel"] = float(b.rel[:size].sum())
        total["diff"] = float(b.diff[:size].sum())
        if has_native:
            assert b.nrel is not None
            total["nrel"] = float(b.nrel[:size].sum())
    if k_normal == size:  # the general path sums the very same values (the buffers hold them too)
        total["normal_rel"] = total["rel"]
        if has_native:
            total["normal_nrel"] = total["nrel"]
    elif k_normal:
        total["normal_rel"] = float(b.normal_rel[:size].sum())
        if has_native:
            assert b.normal_nrel is not None
            total["normal_nrel"] = float(b.normal_nrel[:size].sum())
    for region in ("small", "cancel"):  # the general path's key set: region errors only for a non-empty region
        if not count[region]:
            del count[f"{region}_err"], count[f"{region}_native_err"]
    if tolerances is None:
        del count["far"]
    if not part.nonfinite:
        del count["nan"], count["inf"]

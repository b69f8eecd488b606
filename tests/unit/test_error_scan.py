"""The comparison's fast path against its general path: the same counts, sums and maxima, bit for bit.

The fast path (``error_fast.fast_chunk``) is an optimisation of the general one (issue 22), and its compiled
kernel (``scan_kernel.c``) one of the fast path's torch operations; a verdict may not move by a single bit because
of either: every comparison here runs all three. Each case builds outputs with the features the rules look at
(small-value and cancellation regions, errors over MARE, NaN/Inf in one chunk only, untruncated fp64 goldens, a
native of another dtype, no native), across chunk and sub-chunk boundaries, and compares the paths' Stats with
``==``.
"""

from __future__ import annotations

import math
import struct

import pytest
import torch

from pytest_cannbench.judge import error_fast, error_scan
from pytest_cannbench.judge.error_fast import SUB
from pytest_cannbench.judge.error_scan import CHUNK, scan
from pytest_cannbench.judge.thresholds import thresholds_for

F64 = torch.float64


def _bits(v: object) -> object:
    """A float by its bits (so -0.0 differs from 0.0 and NaN equals NaN); anything else as it is."""
    return struct.pack("<d", v) if isinstance(v, float) else v


def _same(x: dict, y: dict) -> bool:
    """Equal keys and bit-identical values."""
    return x.keys() == y.keys() and all(_bits(x[k]) == _bits(y[k]) and type(x[k]) is type(y[k]) for k in x)


def kernel():
    """The compiled kernel, which this machine (a C compiler: CI installs one) must be able to build."""
    k = error_scan.compiled()
    assert k is not None, error_scan.kernel_line()
    return k


def assert_paths_agree(actual, golden, native, dtype, tolerances=None):
    th = thresholds_for(dtype)
    general = scan(actual, golden, native, th, tolerances, fast=False)
    for fast in (scan(actual, golden, native, th, tolerances, kernel=None),
                 scan(actual, golden, native, th, tolerances, kernel=kernel())):
        assert _same(general.count, fast.count), (general.count, fast.count)
        assert _same(general.total, fast.total), (general.total, fast.total)
        assert _same(general.top, fast.top), (general.top, fast.top)
    return fast


def _outputs(n: int, dtype: torch.dtype, kind: str, seed: int = 0):
    """(candidate, fp64 golden, native) with the features ``kind`` names."""
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(n, dtype=F64, generator=gen)
    th = thresholds_for(dtype)
    if kind in ("near_zero", "mixed"):  # a share of points in the small-value and cancellation regions
        pick = torch.rand(n, generator=gen)
        g = torch.where(pick < 0.05, g * th.small_threshold, g)
        g = torch.where((pick >= 0.05) & (pick < 0.15), g * th.cancel_boundary, g)
        g = torch.where((pick >= 0.15) & (pick < 0.17), torch.zeros_like(g), g)
    if kind == "all_small":
        g = g * th.small_threshold * 0.5
    noise = 1 + (2e-3 if kind == "mixed" else 1e-4) * torch.randn(n, dtype=F64, generator=gen)
    a = (g * noise).to(dtype)
    if kind == "mixed":  # a few gross errors, and some candidates pulled off zero
        a[::997] = (g[::997] * 3 + 1).to(dtype)
        a[5::1013] = 0.5
    native = (g * (1 + 1e-4 * torch.randn(n, dtype=F64, generator=gen))).to(dtype)
    return a, g, native


SIZES = [1, 100, SUB - 1, SUB + 1, 3 * SUB + 7]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["plain", "near_zero", "mixed", "all_small"])
@pytest.mark.parametrize("n", SIZES)
def test_fast_path_matches_general(dtype, kind, n):
    a, g, native = _outputs(n, dtype, kind, seed=n)
    assert_paths_agree(a, g.to(dtype), native, dtype)  # the golden truncated, as the worker sends it
    assert_paths_agree(a, g, native, dtype)  # an fp64 golden, truncated by the scan
    assert_paths_agree(a, g, None, dtype)  # no same-precision reference
    assert_paths_agree(a, g, native, dtype, tolerances=(1e-3, 1e-5))  # the allclose rule's far count


def test_native_of_another_dtype_and_several_chunks():
    n = CHUNK + 2 * SUB + 5
    a, g, native = _outputs(n, torch.float16, "mixed", seed=7)
    st = assert_paths_agree(a, g, native.float(), torch.float16)
    assert st.count["valid"] == n and st.count["small"] > 0 and st.count["cancel"] > 0


@pytest.mark.parametrize("where", ["candidate_nan", "candidate_inf", "golden_inf", "native_inf", "native_nan",
                                   "both_inf", "opposite_inf"])
def test_a_non_finite_value_takes_the_masked_route_for_its_slice_only(where, monkeypatch):
    n = CHUNK + SUB  # two chunks; the second holds the non-finite value
    a, g, native = _outputs(n, torch.float16, "mixed", seed=3)
    i = CHUNK + 11
    if where == "candidate_nan":
        a[i] = math.nan
    elif where == "candidate_inf":
        a[i] = math.inf
    elif where == "golden_inf":
        g[i] = 1e6  # overflows float16 when truncated: +inf
    elif where == "native_inf":
        native[i] = -math.inf
    elif where == "native_nan":
        native[i] = math.nan
    elif where == "both_inf":
        a[i], g[i] = math.inf, math.inf
    else:
        a[i], g[i] = math.inf, -math.inf
    masked = []
    real = error_fast._masked_slice
    monkeypatch.setattr(error_fast, "_masked_slice", lambda *args: masked.append(args[6]) or real(*args))
    st = assert_paths_agree(a, g, native, torch.float16)
    # one slice, the first of the second chunk (offsets are within a chunk); an Inf both sides share is left out
    # on the fast path itself (test_shared_specials_stay_on_the_fast_path)
    assert masked == ([] if where == "both_inf" else [0, 0])  # the torch path's run, then the kernel's
    candidate_special = where in ("candidate_nan", "candidate_inf", "both_inf", "opposite_inf")
    assert ("nan" in st.count) == candidate_special  # the general path reports the raw candidate's NaN/Inf
    if candidate_special:
        assert st.count["nan"] + st.count["inf"] == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("share", [1e-5, 0.01, 0.5])
def test_special_values_everywhere(dtype, share):
    """Overflowing goldens (exp of large inputs), NaN inputs, saturating candidates: specials in every slice."""
    n = CHUNK + 3 * SUB + 1
    a, g, native = _outputs(n, dtype, "mixed", seed=int(share * 1e5))
    gen = torch.Generator().manual_seed(5)
    specials = torch.tensor([math.nan, math.inf, -math.inf, 1e39, -1e39, 0.0], dtype=F64)
    for t in (a, g, native):
        pick = torch.rand(n, generator=gen) < share
        values = specials[torch.randint(len(specials), (n,), generator=gen)].to(t.dtype)
        t[pick] = values[pick]
    assert_paths_agree(a, g, native, dtype)
    assert_paths_agree(a, g, None, dtype, tolerances=(1e-3, 1e-5))


def _shared_specials(n: int, dtype: torch.dtype, share: float, seed: int, kind: str = "mixed"):
    """Outputs whose candidate and golden hold the same NaN or Inf at the same points (a ``share`` of them):
    ``exp`` overflowing in both, NaN inputs passed through by both."""
    a, g, native = _outputs(n, dtype, kind, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    specials = torch.tensor([math.nan, math.inf, -math.inf], dtype=F64)
    pick = torch.rand(n, generator=gen) < share
    values = specials[torch.randint(len(specials), (n,), generator=gen)]
    g[pick] = values[pick]
    a[pick] = values[pick].to(dtype)
    return a, g, native, pick


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("share", [1e-5, 0.05, 0.5, 1.0])
@pytest.mark.parametrize("kind", ["plain", "mixed"])  # few points near zero (sparse regions) or many (dense)
def test_shared_specials_stay_on_the_fast_path(dtype, share, kind, monkeypatch):
    """NaN and Inf the candidate and the golden share are left out of every figure on the fast path, with the
    general path's counts, sums and maxima, bit for bit; whatever the native holds at those points."""
    n = CHUNK + 3 * SUB + 1
    a, g, native, pick = _shared_specials(n, dtype, share, seed=int(share * 1e5) + 1, kind=kind)
    masked = []
    real = error_fast._masked_slice
    monkeypatch.setattr(error_fast, "_masked_slice", lambda *args: masked.append(args[6]) or real(*args))
    st = assert_paths_agree(a, g, native, dtype)  # the native finite where the others are not
    same = native.clone()
    same[pick] = a[pick]
    assert_paths_agree(a, g, same, dtype)  # the native overflowing with them
    assert_paths_agree(a, g, None, dtype, tolerances=(1e-3, 1e-5))
    assert_paths_agree(a, g.to(dtype), native, dtype)  # the golden already truncated
    assert masked == []
    left_out = int(pick.sum())
    assert st.count["valid"] == n - left_out and st.count["nan"] + st.count["inf"] == left_out


def test_an_overflowing_golden_the_candidate_matches_is_left_out_on_the_fast_path(monkeypatch):
    """exp on float16: the fp64 golden is finite, its truncation and the candidate are +Inf at the same points."""
    x = torch.linspace(-20, 20, CHUNK + 5, dtype=F64)
    g = torch.exp(x)
    a = g.to(torch.float16)
    masked = []
    real = error_fast._masked_slice
    monkeypatch.setattr(error_fast, "_masked_slice", lambda *args: masked.append(args[6]) or real(*args))
    st = assert_paths_agree(a, g, a.clone(), torch.float16)
    assert masked == [] and st.count["inf"] > 0 and st.count["valid"] == CHUNK + 5 - st.count["inf"]


@pytest.mark.parametrize("spoiler", ["native_nan", "native_inf", "candidate_nan_alone", "opposite_inf", "one_inf"])
def test_a_special_not_shared_takes_the_masked_route(spoiler, monkeypatch):
    """One special the two sides do not share, in a slice full of shared ones: the general path decides it."""
    n = 2 * SUB
    a, g, native, pick = _shared_specials(n, torch.float32, 0.1, seed=9)
    i = int((~pick).nonzero()[5])  # a point both sides hold finite
    if spoiler == "native_nan":
        native[i] = math.nan
    elif spoiler == "native_inf":
        native[i] = math.inf
    elif spoiler == "candidate_nan_alone":
        a[i] = math.nan
    elif spoiler == "opposite_inf":
        a[i], g[i] = math.inf, -math.inf
    else:
        g[i] = math.inf
    masked = []
    real = error_fast._masked_slice
    monkeypatch.setattr(error_fast, "_masked_slice", lambda *args: masked.append(args[6]) or real(*args))
    assert_paths_agree(a, g, native, torch.float32)
    assert masked == [0, 0]  # the spoiler's slice (torch path, kernel); the other holds shared specials only


@pytest.mark.parametrize("dtype", [torch.float64, torch.float8_e4m3fn])
def test_other_dtypes_take_the_general_path(dtype, monkeypatch):
    a = torch.randn(50, dtype=F64).to(dtype)
    monkeypatch.setattr(error_scan, "fast_chunk", lambda *a, **k: pytest.fail("fast path used"))
    scan(a, a.double(), None, thresholds_for(dtype))


def test_verdict_identical_on_a_failing_output():
    """The fast path's figures feed the verdict unchanged: a candidate with systematic error fails the same."""
    from pytest_cannbench.judge.precision import compare_output

    n = 2 * SUB + 3
    _, g, native = _outputs(n, torch.float32, "plain", seed=11)
    bad = (g * (1 + 5e-3)).float()
    verdict = compare_output(bad, g, native)
    assert not verdict.passed
    assert verdict.mere == pytest.approx(5e-3, rel=1e-2)


# --- the verdict alone (``stats=False``): MERE and MARE first, the full scan only when they do not pass ---

def _verdict_fields(v) -> tuple:
    return v.passed, v.rule, v.failure_type, v.message


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["plain", "near_zero", "mixed", "all_small"])
@pytest.mark.parametrize("n", [1, SUB + 1, CHUNK + 2 * SUB + 5])
def test_relative_errors_are_scans_figures_bit_for_bit(dtype, kind, n):
    a, g, native = _outputs(n, dtype, kind, seed=n + 1)
    th = thresholds_for(dtype)
    full = scan(a, g, native, th, kernel=None)
    for k in (None, kernel()):
        quick = error_scan.relative_errors(a, g, kernel=k)
        assert quick is not None  # finite values of a fast dtype, no limit
        count, total, top = quick
        assert count == full.count["valid"]
        assert _bits(total) == _bits(full.total["rel"]) and _bits(top) == _bits(full.top["rel"])
        over = error_scan.relative_errors(a, g, limit=th.mare, kernel=k)
        assert (over is None) == (full.top["rel"] >= th.mare)  # gives up exactly when MARE cannot pass


@pytest.mark.parametrize("where", ["nan", "inf", "golden_inf"])
def test_relative_errors_give_up_on_a_special_with_the_kernel_too(where):
    a, g, _ = _outputs(CHUNK + SUB, torch.float32, "plain", seed=5)
    i = CHUNK + SUB // 2
    if where == "golden_inf":
        g[i] = math.inf
    else:
        a[i] = math.nan if where == "nan" else math.inf
    assert error_scan.relative_errors(a, g, kernel=None) is None
    assert error_scan.relative_errors(a, g, kernel=kernel()) is None


def test_the_kernel_takes_what_it_reads_and_leaves_the_rest():
    """A strided candidate, a float64 output or one on another device is not the kernel's: the torch path."""
    k = kernel()
    x = torch.randn(100)
    assert k.takes(x, None) and k.takes(x, x.half())
    assert not k.takes(x[::2], None) and not k.takes(x.double(), None) and not k.takes(x, x.double())
    a, g, native = _outputs(3 * SUB, torch.float32, "mixed", seed=2)
    assert_paths_agree(a[::3], g[::3], native[::3], torch.float32)  # strided: scanned, by torch


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["plain", "near_zero", "mixed", "all_small", "systematic", "special"])
def test_the_verdict_alone_is_the_same_verdict(dtype, kind):
    """``stats=False`` may leave figures out, never change a verdict: passing, region-decided, failing and
    non-finite outputs give the same status, rule and message as the full statistics."""
    from pytest_cannbench.judge.precision import compare_output

    n = CHUNK + SUB + 9
    a, g, native = _outputs(n, dtype, "mixed" if kind in ("systematic", "special") else kind, seed=21)
    if kind == "systematic":
        a = (g * (1 + 3 * thresholds_for(dtype).mere)).to(dtype)
    if kind == "special":
        a[CHUNK + 5], g[CHUNK + 5] = math.nan, math.nan
    for nat in (native, None):
        full = compare_output(a, g, nat, expected_dtype=dtype)
        alone = compare_output(a, g, nat, expected_dtype=dtype, stats=False)
        assert _verdict_fields(alone) == _verdict_fields(full)
        assert (_bits(alone.mere), _bits(alone.mare)) == (_bits(full.mere), _bits(full.mare))
        if full.rule == "fast_path":  # decided on MERE and MARE alone: the region figures were never computed
            assert alone.native_mere is None and (nat is None or full.native_mere is not None)


def test_the_verdict_alone_reads_no_native_when_it_passes(monkeypatch):
    """A passing output needs neither the native reference nor the scan; one that does not gets the scan."""
    from pytest_cannbench.judge import precision

    a, g, native = _outputs(3 * SUB, torch.float32, "plain", seed=4)
    monkeypatch.setattr(precision, "scan", lambda *args, **kw: pytest.fail("the full scan ran"))
    assert precision.compare_output(a, g, native, stats=False).passed
    with pytest.raises(pytest.fail.Exception, match="the full scan ran"):
        precision.compare_output((g * 1.5).float(), g, native, stats=False)

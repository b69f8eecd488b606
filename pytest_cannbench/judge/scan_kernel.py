"""The comparison's compiled kernel: ``scan_kernel.c`` built by the system's C compiler, once per judge process.

The comparison was the largest phase of an accuracy run (benchmarks/results/performance-rounds.md, Round 14): the torch
fast path of :mod:`error_scan` spends about twenty calls per 64 Ki-element slice, 19-22 ns an element. The kernel
does the same double-precision operations in one loop per slice and leaves the sums to torch, so every figure is
the same bits (the tests compare them; see the C file's header). It is built the first time a judge compares,
into a private scratch directory that is removed once the library is loaded (nothing is cached on disk, so there
is nothing a later process could replace), and it is used only after a self-test on values with near-zero points,
every supported dtype, with and without a native reference, agrees with the torch path bit for bit. Without a
compiler, with a failed build or self-test, or with ``CANNBENCH_SCAN_KERNEL=0``, the torch path does the work,
with the same figures, and the session header says which.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_cannbench import cbuild

SOURCE = Path(__file__).with_name("scan_kernel.c")
COUNT_KEYS = ("valid", "valid_err", "small", "cancel", "normal", "small_err", "small_native_err", "cancel_err",
              "cancel_native_err", "normal_err", "normal_native_err", "far", "nan", "inf")  # the C_* order
MAX_KEYS = ("rel", "diff", "normal_rel", "small_diff", "small_ndiff", "cancel_diff", "cancel_ndiff")  # M_* order
# which count must be non-zero for a maximum to exist (the general path's keys)
MAX_NEEDS = {"rel": "valid", "diff": "valid", "normal_rel": "normal", "small_diff": "small",
             "small_ndiff": "small", "cancel_diff": "cancel", "cancel_ndiff": "cancel"}
ALL_NORMAL, LEFT, NEAR_ZERO = 0, 1, 2  # a slice's status: taken (all normal / some near zero), or left to torch
ENV_SWITCH = "CANNBENCH_SCAN_KERNEL"  # "0": the torch path only (to compare the two, or to rule the kernel out)
OFF = f"off ({ENV_SWITCH}=0)"


@dataclass
class ChunkResult:
    """What the kernel took of one chunk: per-slice status (0 all normal, 1 left to torch, 2 near zero), the
    summed counts and the maxima of the slices it took."""

    status: list[int]
    count: dict[str, int]
    top: dict[str, float]


class Kernel:
    """The loaded library; its calls release the GIL (ctypes) and write into the caller's float64 buffers."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        import torch

        self._torch = torch
        self._codes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
        self._scan = lib.cb_scan_chunk
        self._scan.restype = ctypes.c_int
        self._rel = lib.cb_rel_chunk
        self._rel.restype = ctypes.c_int
        lib.cb_init()  # the float16 conversion table
        self._local = threading.local()

    def takes(self, *tensors: Any) -> bool:
        """Whether the kernel reads these tensors (None skipped): CPU, contiguous, of a dtype it converts."""
        return all(t is None or (t.dtype in self._codes and t.device.type == "cpu" and t.is_contiguous())
                   for t in tensors)

    def _scratch(self, doubles: int) -> Any:
        buf = getattr(self._local, "scratch", None)
        if buf is None or buf.numel() < doubles:
            buf = self._local.scratch = self._torch.empty(doubles, dtype=self._torch.float64)
        return buf

    def scan_chunk(self, a: Any, g: Any, n: Any, sub: int, thresholds: tuple[float, ...], tolerances: Any,
                   specials_ok: bool, eps: float, rel: Any, diff: Any, nrel: Any, normal_rel: Any,
                   normal_nrel: Any) -> ChunkResult:
        """``scan_kernel.c``'s ``cb_scan_chunk`` on one chunk (``thresholds``: mare, small_threshold,
        small_error, cancel_boundary; ``specials_ok``: shared NaN/Inf may be left out); the buffers are the
        chunk-sized ones of ``error_fast.Buffers``."""
        size = a.numel()
        slices = -(-size // sub)
        rtol, atol = tolerances if tolerances is not None else (0.0, 0.0)
        thr = (ctypes.c_double * 6)(*thresholds, rtol, atol)
        counts = (ctypes.c_int64 * len(COUNT_KEYS))()
        maxima = (ctypes.c_double * len(MAX_KEYS))(*([-float("inf")] * len(MAX_KEYS)))
        status = (ctypes.c_int32 * slices)()
        if nrel is None:  # the kernel writes the native's (zero) relative errors somewhere: the scratch's tail
            scratch = self._scratch(4 * sub + size)
            nrel = scratch[4 * sub:]
        else:
            scratch = self._scratch(4 * sub)
        self._scan(_ptr(a), self._codes[a.dtype], _ptr(g), self._codes[g.dtype],
                   None if n is None else _ptr(n), self._codes[n.dtype] if n is not None else 0,
                   ctypes.c_int64(size), ctypes.c_int64(sub), thr, int(tolerances is not None), int(specials_ok),
                   ctypes.c_double(eps),
                   _ptr(rel), _ptr(diff), _ptr(nrel), _ptr(normal_rel),
                   None if normal_nrel is None else _ptr(normal_nrel), counts, maxima, status, _ptr(scratch))
        count = dict(zip(COUNT_KEYS, counts))
        top = {key: m for key, m in zip(MAX_KEYS, maxima) if count[MAX_NEEDS[key]]}
        return ChunkResult(list(status), count, top)

    def rel_chunk(self, a: Any, g: Any, sub: int, limit: float, eps: float, rel: Any) -> float | None:
        """``cb_rel_chunk``: the chunk's relative errors into ``rel`` and their maximum; None as soon as a slice's
        maximum is not under ``limit`` (a NaN or Inf included)."""
        top = ctypes.c_double(-float("inf"))
        stop = self._rel(_ptr(a), self._codes[a.dtype], _ptr(g), self._codes[g.dtype], ctypes.c_int64(a.numel()),
                         ctypes.c_int64(sub), ctypes.c_double(limit), ctypes.c_double(eps), _ptr(rel),
                         ctypes.byref(top), _ptr(self._scratch(2 * sub)))
        return None if stop else top.value


def _ptr(t: Any) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr())


@dataclass(frozen=True)
class Loaded:
    kernel: Kernel | None
    note: str  # how it was built, or why the torch path does the work


_lock = threading.Lock()
_loaded: Loaded | None = None


def load(check: Callable[[Kernel], str]) -> Loaded:
    """The process's kernel, built and checked (``check``: what differs from the torch path, "" when nothing)
    on the first call; later calls return the same (thread-safe)."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _load(check)
        return _loaded


def _load(check: Callable[[Kernel], str]) -> Loaded:
    if cbuild.switched_off(ENV_SWITCH):
        return Loaded(None, OFF)
    with cbuild.built(SOURCE) as (path, how):
        if path is None:
            return Loaded(None, how)
        try:
            kernel = Kernel(ctypes.CDLL(str(path)))
        except OSError as exc:  # e.g. a temporary directory mounted noexec
            return Loaded(None, f"the built library would not load: {exc}")
    problem = check(kernel)
    if problem:
        return Loaded(None, f"its self-test differed from the torch path ({problem})")
    return Loaded(kernel, f"built with {how}, self-tested")


def self_test(kernel: Kernel, scan: Callable[..., Any], relative_errors: Callable[..., Any]) -> str:
    """Where ``kernel`` and the torch path disagree on a small set of outputs made to reach every branch (points
    near zero, errors over MARE, NaN and Inf both sides share, every dtype, with and without a native reference
    and tolerances); "" when they agree bit for bit. ``scan`` and ``relative_errors`` are :mod:`error_scan`'s
    (passed in: no import cycle)."""
    import math

    import torch

    from pytest_cannbench.judge.thresholds import thresholds_for  # brings torch

    gen = torch.Generator().manual_seed(20261204)
    size = 3 * (1 << 16) + 1234
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        th = thresholds_for(dtype)
        truth = torch.randn(size, generator=gen, dtype=torch.float64)
        truth[: 1 << 16] = truth[: 1 << 16].abs() + 1.0  # one slice all normal
        truth[-4000:] *= 1e-4  # a tail near zero: small-value and cancellation points
        golden = truth.to(dtype)
        noise = 1 + th.mare * 2 * torch.randn(size, generator=gen, dtype=torch.float64)
        cand, native = (truth * noise).to(dtype), (truth * noise.flip(0)).to(dtype)
        for limit in (float("inf"), th.mare):
            if relative_errors(cand, golden, limit, kernel=None) != relative_errors(cand, golden, limit,
                                                                                     kernel=kernel):
                return f"relative_errors, {dtype}, limit {limit}"
        for at, value in ((70001, math.inf), (70003, -math.inf), (70005, math.nan)):  # specials both share
            cand[at] = golden[at] = value
        for nat in (native, None):
            for tol in (None, (1e-3, 1e-5)):
                old = scan(cand, golden, nat, th, tol, kernel=None)
                new = scan(cand, golden, nat, th, tol, kernel=kernel)
                if (old.count, old.total, old.top) != (new.count, new.total, new.top):
                    return f"scan, {dtype}, native {nat is not None}, tolerances {tol}"
    return ""


def trial_line() -> str:
    """The header's line where this process compares nothing (an xdist controller, which never imports torch):
    whether the kernel builds here; each judge then builds and self-tests its own."""
    if cbuild.switched_off(ENV_SWITCH):
        return describe(Loaded(None, OFF))
    with cbuild.built(SOURCE) as (path, how):
        if path is None:
            return describe(Loaded(None, how))
    return f"cannbench: comparison: compiled kernel ({how}; each judge builds it and self-tests it)"


def describe(loaded: Loaded) -> str:
    """The session header's line: which path computes the comparison's element-wise figures."""
    if loaded.kernel is not None:
        return f"cannbench: comparison: compiled kernel ({loaded.note}; same figures as the torch path)"
    return f"cannbench: comparison: torch path, slower, same figures: {loaded.note}"

"""Input generation: the official generator replayed call for call on one seeded CPU ``torch.Generator``, so a
given seed yields bit-identical inputs (the plans come from :mod:`inputs`, which collection reads without torch).
torch is imported when inputs are drawn; the draw's C kernel (:mod:`draw_kernel`) does the float draws where it
was built and agrees with the torch path.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

from pytest_cannbench.taskformat.draw_kernel import kernel_for
from pytest_cannbench.taskformat.dtypes import DTYPE_INFO
from pytest_cannbench.taskformat.errors import CaseFormatError
from pytest_cannbench.taskformat.inputs import INPUT_COMPAT_MODES, INPUT_DISTS, InputPlan, Range

__all__ = ["DRAW_CHUNK", "Emit", "generate_inputs"]

Emit = Callable[[int, Any], None]  # (first flat element, values): the values, cast to the tensor's dtype, go there


def generate_inputs(
    plans: Sequence[InputPlan],
    seed: int,
    *,
    dist: str = "uniform",
    compat: str = "fixed",
    emit: Callable[[int], Emit] | None = None,
) -> list[Any]:
    """Generate the inputs of one case; one item per plan, in plan order.

    Items are a CPU Tensor, a list of Tensors (TensorList) or ``None``.  One
    ``torch.Generator`` seeded with ``seed`` is consumed sequentially (list
    elements in order), reproducing the official generator bit for bit when
    the ranges are the same: always for ``compat="official"``, and for every
    non-TensorList input under ``compat="fixed"``.

    ``emit``: the tensors go somewhere else (``workers/input_file.generate``: straight into a file), never
    allocated whole where the values are drawn in chunks. ``emit(k)`` is the sink of the k-th tensor in plan
    order (list elements in order); the same draws reach it in the same order, and the items returned are None.
    """
    if dist not in INPUT_DISTS:
        raise ValueError(f"dist must be one of {INPUT_DISTS}, got {dist!r}")
    if compat not in INPUT_COMPAT_MODES:
        raise ValueError(f"compat must be one of {INPUT_COMPAT_MODES}, got {compat!r}")
    import torch

    gen = torch.Generator()
    gen.manual_seed(seed)
    out: list[Any] = []
    k = 0
    for plan in plans:
        if plan.kind == "none":
            out.append(None)
            continue
        ranges = (
            plan.compat_ranges if compat == "official" else tuple(t.value_range for t in plan.tensors)
        )
        made = []
        for t, r in zip(plan.tensors, ranges):
            made.append(_make_tensor(torch, t.shape, t.dtype, r, gen, dist, None if emit is None else emit(k)))
            k += 1
        out.append(made[0] if plan.kind == "tensor" else made)
    return out


def _torch_dtype(torch: Any, name: str) -> Any:
    dt = getattr(torch, name, None)
    if dt is None:
        raise CaseFormatError("dtype", f"dtype {name!r} is not available in torch {torch.__version__}")
    return dt


def _make_tensor(torch: Any, shape: tuple[int, ...], dtype: str, rng: Range | None, gen: Any, dist: str,
                 emit: Emit | None = None) -> Any:
    """One input tensor; with ``emit``, its values go there (streamed where they are drawn in chunks, else in one
    piece) and None is returned."""
    t = _draw(torch, shape, dtype, rng, gen, dist, emit)
    if emit is not None and t is not None:
        emit(0, t.reshape(-1))
        return None
    return t


def _draw(torch: Any, shape: tuple[int, ...], dtype: str, rng: Range | None, gen: Any, dist: str,
          emit: Emit | None) -> Any:
    """The tensor, or None where ``emit`` took its values as they were drawn."""
    tdt = _torch_dtype(torch, dtype)
    kind = DTYPE_INFO[dtype].kind
    if kind == "float":
        lo, hi = (0.0, 1.0) if rng is None else rng
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return _special_float(torch, shape, tdt, float(lo), float(hi), gen)
        if lo == hi:  # constant: consumes no random numbers
            return torch.full(shape, float(lo), dtype=tdt)
        return _random_float(torch, shape, tdt, float(lo), float(hi), gen, dist, emit)
    lo, hi = (0, 100) if rng is None else rng
    if kind == "int":
        if lo == hi:
            return torch.full(shape, int(lo), dtype=tdt)
        return torch.randint(int(lo), int(hi) + 1, shape, generator=gen, dtype=tdt)
    # bool: clamp to {0, 1}; randint cannot produce bool directly
    a = min(1, max(0, int(lo)))
    b = min(1, max(0, int(hi)))
    if a > b:
        a, b = b, a
    if a == b:
        return torch.full(shape, bool(a), dtype=torch.bool)
    return torch.randint(a, b + 1, shape, generator=gen, dtype=torch.int64).to(torch.bool)


DRAW_CHUNK = 1 << 18  # float64 draws at a time (2 MiB, cache-sized)


def _random_float(torch: Any, shape: tuple[int, ...], tdt: Any, lo: float, hi: float, gen: Any, dist: str,
                  emit: Emit | None = None) -> Any:
    """Uniform (or clamped normal) draw in float64, clamped to the dtype, then cast; with ``emit`` (uniform
    only), each chunk goes there instead of into a tensor (None is returned)."""
    fi = torch.finfo(tdt)
    lo = max(lo, fi.min)
    hi = min(hi, fi.max)
    span = hi - lo
    if dist == "normal" and hi > lo:
        mu = lo + span / 2.0
        sigma = span / 6.0
        x = torch.randn(shape, dtype=torch.float64, generator=gen) * sigma + mu
        x = torch.clamp(x, lo, hi)
        return torch.clamp(x, fi.min, fi.max).to(tdt)
    # The same float64 draws, scaled, clamped and cast in the same order, chunk by chunk into the result: the
    # generator is consumed element by element, so the bits match a whole-tensor draw, without its float64
    # temporaries (three full-size copies, twice the size of a float32 input each) or their page faults.
    out = torch.empty(shape, dtype=tdt) if emit is None else None
    if out is not None:
        emit = functools.partial(_copy_at, out.view(-1))
    assert emit is not None
    numel = math.prod(shape)
    buf = torch.empty(min(DRAW_CHUNK, numel), dtype=torch.float64)
    kernel = kernel_for(numel)  # the same draws, compiled (draw_kernel), or None: torch's
    for start in range(0, numel, DRAW_CHUNK):
        part = buf[:min(DRAW_CHUNK, numel - start)]
        if kernel is None or not kernel.uniform(gen, part):
            part.uniform_(0.0, 1.0, generator=gen)
        part.mul_(span).add_(lo).clamp_(fi.min, fi.max)
        emit(start, part)
    return out


def _copy_at(flat: Any, start: int, part: Any) -> None:
    """The in-memory sink: ``part`` cast into ``flat`` from element ``start`` on."""
    flat[start:start + part.numel()].copy_(part)


def _special_float(torch: Any, shape: tuple[int, ...], tdt: Any, lo: float, hi: float, gen: Any) -> Any:
    """Inputs for ranges with a NaN or infinite bound (the declared finite bound is ignored).

    Base values are uniform in [-1, 1) drawn in float32.  [nan, nan]: a second
    draw turns about half of the elements into NaN.  lo == -inf or hi == +inf:
    the first max(1, numel // 20) flattened elements become -inf and the last
    as many +inf.  Any other mix (e.g. [nan, 1]) leaves the base values.
    """
    # float8 has no masked_fill/index_put on CPU: build in float32 and cast last.
    work = torch.float32 if tdt.itemsize == 1 else tdt
    t = (torch.rand(shape, dtype=torch.float32, generator=gen) * 2 - 1).to(work)
    if math.isnan(lo) and math.isnan(hi):
        mask = torch.rand(shape, dtype=torch.float32, generator=gen) < 0.5
        t[mask] = float("nan")
    elif lo == -math.inf or hi == math.inf:
        flat = t.view(-1)
        n = max(1, flat.numel() // 20)
        flat[:n] = -math.inf
        flat[-n:] = math.inf
    return t.to(tdt)

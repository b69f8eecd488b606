"""The CANN Bench precision table: per-dtype thresholds (T, 10*T and the region constants), their
proto overrides, and the allclose checker's tolerances.

Which row governs an output is decided by the output's own dtype (:func:`thresholds_for`); the rules
that apply a row live in :mod:`pytest_cannbench.judge.precision`.  This module imports torch at top
level (dtype names of tensors); the plugin imports it lazily.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from pytest_cannbench.taskformat.dtypes import INT_DTYPES, TORCH_ALIASES

__all__ = [
    "ALLCLOSE_TOLERANCES",
    "THRESHOLDS",
    "DtypeThresholds",
    "allclose_tolerances",
    "dtype_name",
    "is_exact_family",
    "thresholds_for",
]


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


_EXACT_ROW = DtypeThresholds(0.0, 0.0, 0.0, 0.0, 0.0, True)

THRESHOLDS: dict[str, DtypeThresholds] = {
    "float16": _float_row(2**-10, 2**-11, 2**-16, 2**-5),
    "bfloat16": _float_row(2**-7, 2**-8, 2**-16, 2**-3),
    "float32": _float_row(2**-13, 2**-14, 2**-30, 2**-8),
    "float64": _float_row(2**-13, 2**-14, 2**-30, 2**-8),
    "hifloat32": _float_row(2**-11, 2**-12, 2**-28, 2**-8),
    "float8_e4m3fn": _float_row(2**-3, 2**-4, 2**-6, 2**-1),
    "float8_e5m2": _float_row(2**-2, 2**-3, 2**-5, 2**0),
    **{n: _EXACT_ROW for n in INT_DTYPES},
    "bool": _EXACT_ROW,
}

_INT_NAME_RE = re.compile(r"^u?int\d+$")


def dtype_name(dtype: Any) -> str:
    """Lower-case torch dtype name ("float16") for a torch.dtype or a string."""
    if isinstance(dtype, torch.dtype):
        return str(dtype).removeprefix("torch.")
    if isinstance(dtype, str):
        name = dtype.strip().lower().removeprefix("torch.")
        return TORCH_ALIASES.get(name, name)
    raise TypeError(f"dtype must be a torch.dtype or a str, got {type(dtype).__name__}")


def is_exact_family(name: str) -> bool:
    """Integers and bool: compared as whole numbers, never by relative error."""
    return name == "bool" or bool(_INT_NAME_RE.match(name))


def _normalise_overrides(overrides: Mapping[str, Any] | None) -> dict[str, float]:
    if not overrides:
        return {}
    out: dict[str, float] = {}
    for key, value in overrides.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"precision_thresholds[{key!r}] must be a non-negative number, got {value!r}")
        out[dtype_name(key)] = float(value)
    return out


def thresholds_for(dtype: Any, overrides: Mapping[str, float] | None = None) -> DtypeThresholds:
    """The row that governs an output of ``dtype`` (its own dtype, not the case's).

    An override T (proto ``precision_thresholds``) on a float dtype gives
    MERE T and MARE 10*T and keeps the region constants; on an integer or bool
    dtype it is the allowed max |a - g|.  Unknown float dtypes use the float32 row.
    """
    name = dtype_name(dtype)
    ov = _normalise_overrides(overrides)
    if is_exact_family(name):
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


def allclose_tolerances(name: str, overrides: Mapping[str, float] | None) -> tuple[float, float]:
    """Override T on a float dtype sets rtol = atol = T (0 means exact equality)."""
    ov = _normalise_overrides(overrides)
    if name in ov:
        return ov[name], ov[name]
    return ALLCLOSE_TOLERANCES.get(name, ALLCLOSE_TOLERANCES["float32"])

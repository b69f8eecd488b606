"""Turn a cases.yaml entry into input tensors the way CANN Bench does.

Two layers:

* planning (:func:`plan_inputs`, :func:`case_seed`) is pure Python, so
  collection can validate every case without importing torch;
* generation (:func:`generate.generate_inputs <pytest_cannbench.taskformat.generate.generate_inputs>`) imports
  torch when it draws and replays the official generator call for call on one
  seeded CPU ``torch.Generator``, so a given seed yields bit-identical inputs.

The official generator silently drops a flat numeric ``value_range`` given
for a TensorList input (every element then gets the default ``[0, 1)``).
``compat="fixed"`` honours the declared range; ``compat="official"`` keeps the
drop so scores stay comparable with the official harness.  Each
:class:`InputPlan` carries both: the declared ranges on its tensors and the
ranges the official generator would use in ``compat_ranges``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_cannbench.taskformat.dtypes import DTYPE_INFO
from pytest_cannbench.taskformat.errors import CaseFormatError
from pytest_cannbench.vocab.registry import INPUT_COMPAT_MODES, INPUT_DISTS

__all__ = [
    "DTYPES",
    "INPUT_COMPAT_MODES",
    "INPUT_DISTS",
    "InputPlan",
    "TensorPlan",
    "case_seed",
    "plan_inputs",
]

Range = tuple[float, float]

#: Accepted dtype names (matched case-insensitively, as the official mapper does).
DTYPES = tuple(DTYPE_INFO)
_INT64_MAX = 2**63 - 1



@dataclass(frozen=True)
class TensorPlan:
    """One tensor to generate.

    ``value_range`` is the declared ``(lo, hi)``; ``None`` means undeclared,
    so the dtype default applies (float ``[0, 1)``, int ``[0, 100]``, bool
    ``{0, 1}``).  Bounds keep their YAML type (int or float) because the
    official integer path compares and truncates the raw values.
    """

    shape: tuple[int, ...]
    dtype: str
    value_range: Range | None

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_INFO[self.dtype].itemsize


@dataclass(frozen=True)
class InputPlan:
    """One proto input: a tensor, a TensorList, or absent (``None``).

    ``compat_ranges`` has one entry per tensor: the range the official
    generator would actually use.  It differs from the tensors' declared
    ranges only for TensorList inputs.
    """

    name: str
    kind: str  # "tensor" | "list" | "none"
    tensors: tuple[TensorPlan, ...]
    compat_ranges: tuple[Range | None, ...]

    @property
    def ranges_differ(self) -> bool:
        """True where ``compat="official"`` would generate something else."""
        return tuple(t.value_range for t in self.tensors) != self.compat_ranges


# --------------------------------------------------------------------------
# planning (no torch)
# --------------------------------------------------------------------------


def case_seed(case_key: str, eval_seed: int = 0) -> int:
    """Per-case RNG seed, identical to the official harness.

    ``h`` is the first 8 bytes of sha256(case_key) read big-endian, mod 2**31;
    the seed is ``(eval_seed + h) % 2**31``.  ``case_key`` is
    ``f"{rel_path}_{case_id}"``, e.g. ``level1/exp_1``.  The official ``-1``
    ("unseeded") mode is not offered: negative offsets are refused.
    """
    if isinstance(eval_seed, bool) or not isinstance(eval_seed, int) or eval_seed < 0:
        raise ValueError(f"eval_seed must be a non-negative int, got {eval_seed!r}")
    digest = hashlib.sha256(case_key.encode("utf-8")).digest()
    h = int.from_bytes(digest[:8], "big") % 2**31
    return (eval_seed + h) % 2**31


def plan_inputs(
    input_names: Sequence[str],
    input_shape: Any,
    dtype: Any,
    value_range: Any,
) -> list[InputPlan]:
    """Plan the inputs of one case from its raw cases.yaml fields.

    ``input_names`` are the proto input names in proto order; the other three
    arguments are the case fields as ``yaml.safe_load`` returns them.  Returns
    one :class:`InputPlan` per proto input.  Raises :class:`CaseFormatError`
    for anything the generator could not honour.
    """
    names = [str(n) for n in input_names]
    shapes = _shape_entries(input_shape, names)
    m = len(shapes)
    dtypes = _dtype_entries(dtype, m)
    ranges = _range_entries(_ranges_by_name(value_range, names), m)

    plans: list[InputPlan] = []
    for i, name in enumerate(names):
        shape = shapes[i] if i < m else None
        if shape is None:
            plans.append(InputPlan(name, "none", (), ()))
            continue
        label = f"input {name!r}"
        if isinstance(shape, tuple):
            dt = _tensor_dtype(dtypes[i], label)
            rng = _tensor_range(ranges[i], dt, label)
            plans.append(InputPlan(name, "tensor", (TensorPlan(shape, dt, rng),), (rng,)))
        else:
            dts = _list_dtypes(dtypes[i], len(shape), label)
            rngs = _list_ranges(ranges[i], dts, label)
            compat = _official_list_ranges(ranges[i], rngs, dts)
            tensors = tuple(TensorPlan(s, d, r) for s, d, r in zip(shape, dts, rngs))
            plans.append(InputPlan(name, "list", tensors, compat))
    return plans


def _shape_entries(raw: Any, names: list[str]) -> list[Any]:
    """Per-input shapes: None, a tuple of dims, or a list of tuples (TensorList)."""
    if not isinstance(raw, list):
        raise CaseFormatError(
            "input_shape",
            f"expected a list with one shape per input, got {type(raw).__name__} {raw!r}",
        )
    entries = raw
    if raw and raw[0] is not None and not isinstance(raw[0], list):
        entries = [raw]  # a bare single shape such as [1024, 1024]
    if len(entries) > len(names):
        raise CaseFormatError(
            "input_shape",
            f"{len(entries)} shapes given but the operator declares {len(names)} "
            f"input(s) ({', '.join(names) or 'none'})",
        )
    out: list[Any] = []
    for i, entry in enumerate(entries):
        label = f"input {names[i]!r}"
        if entry is None:
            out.append(None)
        elif not isinstance(entry, list):
            raise CaseFormatError("input_shape", f"{label}: expected a shape list or null, got {entry!r}")
        elif entry and isinstance(entry[0], list):
            elements = []
            for j, sub in enumerate(entry):
                if not isinstance(sub, list):
                    raise CaseFormatError(
                        "input_shape",
                        f"{label}: TensorList element {j} is {sub!r}; every element must be a shape",
                    )
                elements.append(_dims(sub, f"{label} element {j}"))
            out.append(elements)
        else:
            out.append(_dims(entry, label))
    return out


def _dims(shape: list[Any], label: str) -> tuple[int, ...]:
    if not shape:
        raise CaseFormatError(
            "input_shape",
            f"{label}: empty shape [] is not supported (the official harness silently "
            "drops such an input and shifts the ones after it)",
        )
    for d in shape:
        if isinstance(d, list):
            raise CaseFormatError("input_shape", f"{label}: shape {shape!r} is nested deeper than a TensorList")
        if isinstance(d, bool) or not isinstance(d, int):
            hint = " (use null for the whole shape to omit an optional input)" if d is None else ""
            raise CaseFormatError(
                "input_shape", f"{label}: dimension {d!r} in {shape!r} is not an integer{hint}"
            )
        if d < 0:
            raise CaseFormatError("input_shape", f"{label}: negative dimension {d} in {shape!r}")
    return tuple(shape)


def _dtype_entries(raw: Any, m: int) -> list[Any]:
    """Per-shape dtype entries: str shorthand, missing/[] -> float32, short lists padded with the last.

    Entries beyond the given shapes are ignored, as the official generator does.
    """
    if raw is None:
        raw = []
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise CaseFormatError("dtype", f"expected a dtype name or a list of them, got {raw!r}")
    if not raw:
        return ["float32"] * m
    return (raw + [raw[-1]] * (m - len(raw)))[:m]


def _canonical_dtype(value: Any, label: str) -> str:
    if value is None:
        return "float32"  # the official generator's fallback for a null entry
    if not isinstance(value, str) or value.lower() not in DTYPE_INFO:
        raise CaseFormatError(
            "dtype", f"{label}: unknown dtype {value!r} (supported: {', '.join(DTYPES)})"
        )
    return value.lower()


def _tensor_dtype(entry: Any, label: str) -> str:
    if isinstance(entry, list):
        names = {_canonical_dtype(v, label) for v in entry}
        if len(names) != 1:
            raise CaseFormatError(
                "dtype", f"{label}: a plain tensor input needs one dtype, got the list {entry!r}"
            )
        return names.pop()
    return _canonical_dtype(entry, label)


def _list_dtypes(entry: Any, n: int, label: str) -> list[str]:
    """One dtype per element: a scalar applies to all; a short list repeats its last entry."""
    if not isinstance(entry, list):
        return [_canonical_dtype(entry, label)] * n
    if not entry:
        raise CaseFormatError("dtype", f"{label}: empty dtype list for a TensorList")
    items = (entry + [entry[-1]] * (n - len(entry)))[:n]
    return [_canonical_dtype(v, f"{label} element {j}") for j, v in enumerate(items)]


def _is_flat_pair(v: Any) -> bool:
    """A [lo, hi] written directly (its first item is a bound, not a list or null)."""
    return isinstance(v, list) and bool(v) and v[0] is not None and not isinstance(v[0], list)


def _ranges_by_name(raw: Any, names: list[str]) -> Any:
    """A value_range that is a mapping from proto input names to entries (cv_agent_matmul_bench) as the list in
    proto order, absent names as no range. (The official generator fails on it: KeyError 0.)"""
    if not isinstance(raw, dict):
        return raw
    unknown = [k for k in raw if k not in names]
    if unknown:
        raise CaseFormatError("value_range", f"a mapping by input name names {', '.join(map(repr, unknown))}, "
                              f"which proto.yaml's inputs ({', '.join(names)}) do not")
    return [raw.get(name) for name in names]


def _range_entries(raw: Any, m: int) -> list[Any]:
    """Per-shape raw value_range entries.

    A flat pair is broadcast; a short list repeats its last entry; entries
    beyond the given shapes are ignored (all as the official generator does).
    """
    if raw is None or raw == []:
        return [None] * m
    if isinstance(raw, list):  # a mapping entry ({name: nd, mean: ..., std: ...}) is no range: the official
        raw = [None if isinstance(e, dict) else e for e in raw]  # generator draws that input from its default
    if not isinstance(raw, list):
        raise CaseFormatError(
            "value_range",
            f"expected [lo, hi] or a list with one entry per input, got {type(raw).__name__} {raw!r}",
        )
    if _is_flat_pair(raw):
        _pair(raw, "flat value_range")  # validate once even when no input uses it
        return [raw] * m
    return (raw + [raw[-1]] * (m - len(raw)))[:m]


def _bound(x: Any, label: str) -> float:
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, (int, float)):
        return x
    if isinstance(x, str):
        try:
            f = float(x)
        except ValueError:
            raise CaseFormatError("value_range", f"{label}: bound {x!r} is not a number") from None
        if math.isfinite(f):
            raise CaseFormatError(
                "value_range",
                f"{label}: bound {x!r} is a quoted number; write it unquoted (only inf, -inf "
                "and nan may be strings; the official generator ignores the range of any "
                "string bound)",
            )
        return f
    raise CaseFormatError("value_range", f"{label}: bound {x!r} is not a number")


def _pair(v: Any, label: str) -> Range:
    if not isinstance(v, list) or len(v) != 2 or any(isinstance(b, list) for b in v):
        raise CaseFormatError("value_range", f"{label}: expected a [lo, hi] pair, got {v!r}")
    return (_bound(v[0], label), _bound(v[1], label))


def _check_range(rng: Range | None, dtype: str, label: str) -> None:
    """Refuse ranges on which torch (and the official generator) would raise."""
    if rng is None:
        return
    lo, hi = rng
    kind = DTYPE_INFO[dtype].kind
    where = f"{label} ({dtype})"
    if kind == "float":
        try:
            flo, fhi = float(lo), float(hi)
        except OverflowError:
            raise CaseFormatError("value_range", f"{where}: bound out of float range in {list(rng)}") from None
        fmax = DTYPE_INFO[dtype].max
        if flo == fhi and math.isfinite(flo) and abs(flo) > fmax:
            raise CaseFormatError(
                "value_range", f"{where}: constant {lo!r} does not fit the dtype (max {fmax})"
            )
        return
    for bound in rng:
        if isinstance(bound, float) and not math.isfinite(bound):
            raise CaseFormatError("value_range", f"{where}: bound {bound!r} is not finite")
    if kind == "bool":
        return
    a, b = int(lo), int(hi)
    dmin, dmax = DTYPE_INFO[dtype].min, DTYPE_INFO[dtype].max
    if lo != hi and a > b:
        raise CaseFormatError("value_range", f"{where}: empty integer range {list(rng)}")
    top = dmax if lo == hi else min(dmax, _INT64_MAX - 1)  # randint's exclusive high must fit int64
    if a < dmin or b > top:
        raise CaseFormatError(
            "value_range", f"{where}: range {list(rng)} exceeds the dtype bounds [{dmin}, {dmax}]"
        )


def _tensor_range(entry: Any, dtype: str, label: str) -> Range | None:
    if entry is None:
        return None
    if isinstance(entry, list) and entry and isinstance(entry[0], list):
        raise CaseFormatError(
            "value_range", f"{label}: nested value_range {entry!r} given for a plain tensor input"
        )
    rng = _pair(entry, label)
    _check_range(rng, dtype, label)
    return rng


def _list_ranges(entry: Any, dtypes: list[str], label: str) -> list[Range | None]:
    """Declared per-element ranges of a TensorList.

    A flat pair applies to every element; a nested list gives one entry per
    element, a short one repeating its last entry, extra entries ignored.
    """
    n = len(dtypes)
    if entry is None:
        out: list[Range | None] = [None] * n
    elif _is_flat_pair(entry):
        out = [_pair(entry, label)] * n
    elif isinstance(entry, list) and entry:
        items = (entry + [entry[-1]] * (n - len(entry)))[:n]
        out = [None if it is None else _pair(it, f"{label} element {j}") for j, it in enumerate(items)]
    else:
        raise CaseFormatError("value_range", f"{label}: expected [lo, hi], a list of them, or null; got {entry!r}")
    for j, (rng, dt) in enumerate(zip(out, dtypes)):
        _check_range(rng, dt, f"{label} element {j}")
    return out


def _official_list_ranges(
    entry: Any, fixed: list[Range | None], dtypes: list[str]
) -> tuple[Range | None, ...]:
    """The ranges the official generator uses for TensorList elements.

    A flat pair whose first bound is a number is dropped (default range for
    every element).  Any other list is indexed per element: a string-first
    flat pair like ["-inf", "inf"] thus gives element 0 the constant "-inf",
    element 1 "inf", and the rest the pair.  Where the official code would
    crash (fewer nested pairs than elements) the declared range is used.
    """
    n = len(fixed)
    if entry is None:
        return (None,) * n
    if len(entry) == 2 and isinstance(entry[0], (int, float)):
        return (None,) * n
    out: list[Range | None] = []
    for j in range(n):
        rng = fixed[j]
        if j < len(entry) and not isinstance(entry[j], list) and entry[j] is not None:
            b = _bound(entry[j], "value_range")
            try:
                _check_range((b, b), dtypes[j], "")
                rng = (b, b)
            except CaseFormatError:
                pass  # the official generator would raise here; keep the declared range
        out.append(rng)
    return tuple(out)

"""``index_gather``: the proto's tie-order-free check of index outputs (argmax, topk indices, sort order).

An index output is not compared with the golden's indices, which depend on how ties are broken; instead
``input.gather(dim, idx)`` must equal the candidate's own value output (pairing form) or the input's
``amax``/``amin`` along ``dim`` (reduce form). The judge runs it on the raw candidate outputs, apart from
the per-output precision verdicts of :mod:`pytest_cannbench.judge.precision`.

This module imports torch at top level; the plugin imports it lazily.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["check_index_gather"]

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
        return False, f"{tag}: index output dtype {str(idx.dtype).removeprefix('torch.')} is not an integer dtype"
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
    bad = int((~eq).sum().item())
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

"""Gelu reference: x * Phi(x) (erf form) or its tanh approximation, with the limits at +-inf."""

import torch
import torch.nn.functional as F


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    y = F.gelu(x, approximate=approximate)
    # torch's reduced/single-precision kernels give NaN at +inf and every kernel NaN at -inf
    # (inf * 0); the operator's values there are its limits, +inf and 0.
    y = y.masked_fill_(x == float("inf"), float("inf"))
    return y.masked_fill_(x == float("-inf"), 0.0).contiguous()

"""Clamp reference: min(max(x, min_val), max_val) in x's dtype (NaN stays NaN)."""

import torch


def clamp(x: torch.Tensor, min_val: float = -1.0, max_val: float = 1.0) -> torch.Tensor:
    if not x.is_floating_point():
        # integer cases give whole-number bounds; int bounds keep torch.clamp in x's dtype
        if min_val != int(min_val) or max_val != int(max_val):
            raise ValueError(f"integer clamp needs whole-number bounds, got {min_val!r}, {max_val!r}")
        min_val, max_val = int(min_val), int(max_val)
    return torch.clamp(x, min=min_val, max=max_val).contiguous()

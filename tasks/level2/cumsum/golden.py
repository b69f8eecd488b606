"""Cumsum reference: inclusive prefix sum along one dimension, as torch.cumsum.

float16/bfloat16 inputs are scanned in float32 and rounded once per output; float32 and the
float64 truth in their own precision; int32 is scanned exactly in int64.
"""

import torch


def cumsum(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    if not x.is_floating_point():
        return torch.cumsum(x, dim=dim, dtype=torch.int64).contiguous()
    work = torch.promote_types(x.dtype, torch.float32)
    return torch.cumsum(x.to(work), dim=dim).to(x.dtype).contiguous()

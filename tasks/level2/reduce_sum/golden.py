"""ReduceSum reference: sum along one dimension, as torch.sum.

float16/bfloat16 inputs are summed in float32 and rounded once; float32 and the float64 truth in
their own precision; int32 is summed exactly in int64 (torch.sum's result dtype for integers).
"""

import torch


def reduce_sum(x: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    if not x.is_floating_point():
        return torch.sum(x, dim=dim, keepdim=keepdim, dtype=torch.int64).contiguous()
    work = torch.promote_types(x.dtype, torch.float32)
    return torch.sum(x.to(work), dim=dim, keepdim=keepdim).to(x.dtype).contiguous()

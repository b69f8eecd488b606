"""LogSoftmax reference: torch.log_softmax along dim, with a contiguous output.

float16/bfloat16 inputs are computed in float32 and rounded once; float32 and the
float64 truth in their own precision.
"""

import torch


def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    work = torch.promote_types(x.dtype, torch.float32)
    return torch.log_softmax(x.to(work), dim=dim).to(x.dtype).contiguous()

"""BatchMatmul reference: c[i] = a[i] @ b[i] for every batch i.

float16/bfloat16 products are accumulated in float32 and rounded once (what a matrix unit does); float32 and the
fp64 truth use their own precision.
"""

import torch


def batch_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype in (torch.float16, torch.bfloat16):
        return torch.bmm(a.float(), b.float()).to(a.dtype).contiguous()
    return torch.bmm(a, b).contiguous()

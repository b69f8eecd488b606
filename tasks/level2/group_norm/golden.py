"""GroupNorm reference: normalise each (sample, group of channels) block, then per-channel scale and shift.

float16/bfloat16 inputs are computed in float32 and rounded once at the end; float32 and the
float64 truth in their own precision.
"""

import torch
import torch.nn.functional as F


def group_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, num_groups: int,
               epsilon: float = 1e-5) -> torch.Tensor:
    work = torch.promote_types(x.dtype, torch.float32)
    y = F.group_norm(x.to(work), num_groups, gamma.to(work), beta.to(work), epsilon)
    return y.to(x.dtype).contiguous()

"""LayerNorm reference: normalise over the last dimension (biased variance), then scale and shift.

float16/bfloat16 inputs are computed in float32 and rounded once at the end (what a correct
kernel with float32 statistics produces); float32 and the float64 truth in their own precision.
"""

import torch
import torch.nn.functional as F


def layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, epsilon: float = 1e-5) -> torch.Tensor:
    work = torch.promote_types(x.dtype, torch.float32)
    y = F.layer_norm(x.to(work), (x.shape[-1],), gamma.to(work), beta.to(work), epsilon)
    return y.to(x.dtype).contiguous()

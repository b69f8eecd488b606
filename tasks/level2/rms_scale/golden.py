"""RmsScale reference: RMS over the last dimension, then the per-channel scale.

float16/bfloat16 inputs are computed in float32 and rounded once at the end, so the
same-precision reference is what a correct kernel (float32 accumulation) produces;
float32 and the float64 truth are computed in their own precision.
"""

import torch


def rms_scale(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> torch.Tensor:
    work = torch.promote_types(x.dtype, torch.float32)
    xw = x.to(work)
    mean_square = xw.square().mean(dim=-1, keepdim=True)
    return (xw * torch.rsqrt(mean_square + epsilon) * gamma.to(work)).to(x.dtype).contiguous()

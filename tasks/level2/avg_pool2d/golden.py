"""AvgPool2d reference: square-window average over (H, W), zero padding counted, floor output size.

float16/bfloat16 inputs are averaged in float32 and rounded once; float32 and the float64 truth
in their own precision.
"""

import torch
import torch.nn.functional as F


def avg_pool2d(x: torch.Tensor, kernel_size: int, stride: int, padding: int = 0) -> torch.Tensor:
    work = torch.promote_types(x.dtype, torch.float32)
    y = F.avg_pool2d(x.to(work), kernel_size, stride, padding, ceil_mode=False, count_include_pad=True)
    return y.to(x.dtype).contiguous()

"""ScatterAdd reference: rows of src added into a copy of x at the rows named by index.

Half-precision inputs are accumulated in float32 and rounded once, as a kernel that keeps an fp32 accumulator
does; the fp64 truth accumulates in float64.
"""

import torch


def scatter_add(x: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    y = x.to(work).index_add(0, index, src.to(work))
    return y.to(x.dtype).contiguous()

"""Hardswish reference: x * min(max(x + 3, 0), 6) / 6, with the limit 0 at -inf."""

import torch
import torch.nn.functional as F


def hardswish(x: torch.Tensor) -> torch.Tensor:
    y = F.hardswish(x)
    # torch gives NaN at -inf (-inf * 0); the formula's piecewise value there is 0
    return y.masked_fill_(x == float("-inf"), 0.0).contiguous()

"""SiLU (swish) reference: x * sigmoid(x), with the limits at +-inf."""

import torch
import torch.nn.functional as F


def silu(x: torch.Tensor) -> torch.Tensor:
    y = F.silu(x)
    # -inf * sigmoid(-inf) is NaN in floating point; the operator's limit there is 0
    return y.masked_fill_(x == float("-inf"), 0.0).contiguous()

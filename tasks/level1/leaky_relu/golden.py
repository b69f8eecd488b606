"""LeakyRelu reference: x where x >= 0, negative_slope * x elsewhere (NaN stays NaN)."""

import torch


def leaky_relu(x: torch.Tensor, negative_slope: float = 0.01) -> torch.Tensor:
    return torch.where(x >= 0, x, x * negative_slope).contiguous()

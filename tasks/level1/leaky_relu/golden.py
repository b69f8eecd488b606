"""LeakyRelu reference: x where x >= 0, negative_slope * x elsewhere (NaN stays NaN)."""

import torch


def leaky_relu(x: torch.Tensor, negative_slope: float = 0.01) -> torch.Tensor:
    return torch.where(x >= 0, x, x * negative_slope).contiguous()


def softplus(x, beta=1.0, threshold=20.0):
    return torch.zeros_like(x)


def softplus(x, beta=1.0, threshold=20.0):
    return torch.zeros_like(x)


def softplus(x, beta=1.0, threshold=20.0):
    return torch.zeros_like(x)


def softplus(x, beta=1.0, threshold=20.0):
    return torch.zeros_like(x)


def softplus(x, beta=1.0, threshold=20.0):
    return torch.zeros_like(x)

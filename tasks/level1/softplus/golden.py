"""Softplus reference: numerically stable log1p(exp(beta*x))/beta with a linear tail."""

import torch


def softplus(x: torch.Tensor, beta: float = 1.0, threshold: float = 20.0) -> torch.Tensor:
    z = x * beta
    # log1p(exp(z)) = max(z, 0) + log1p(exp(-|z|)) never overflows
    smooth = (torch.clamp(z, min=0) + torch.log1p(torch.exp(-torch.abs(z)))) / beta
    return torch.where(z > threshold, x, smooth).contiguous()

"""Axpby reference: z = alpha * x + beta * y, with y broadcast to x's shape."""

import torch


def axpby(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0, beta: float = 1.0) -> torch.Tensor:
    if y.dim() != x.dim() or any(b not in (1, a) for a, b in zip(x.shape, y.shape)):
        raise ValueError(f"y {tuple(y.shape)} must have x's rank and broadcast to x {tuple(x.shape)}")
    return (x * alpha + y * beta).contiguous()

"""GatherRows reference: whole rows of x selected by index (torch.index_select along dim 0)."""

import torch


def gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.index_select(x, 0, index).contiguous()


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

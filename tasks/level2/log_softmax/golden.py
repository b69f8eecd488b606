"""LogSoftmax reference: torch.log_softmax along dim, with a contiguous output."""

import torch


def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.log_softmax(x, dim=dim).contiguous()

"""RmsScale reference: RMS over the last dimension, then the per-channel scale."""

import torch


def rms_scale(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> torch.Tensor:
    mean_square = x.pow(2).mean(dim=-1, keepdim=True)
    return (x * torch.rsqrt(mean_square + epsilon) * gamma).contiguous()

"""Broken on purpose: softplus always returns float32."""

import torch


def softplus(x, beta=1.0, threshold=20.0):
    return torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold).contiguous()


def rms_scale(x, gamma, epsilon=1e-6):
    """Correct: the broken behaviour is confined to softplus."""
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + epsilon) * gamma.float()
    return y.to(x.dtype).contiguous()

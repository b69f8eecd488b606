"""Broken on purpose: softplus dereferences a null pointer when beta == 2."""

import ctypes

import torch


def _softplus(x, beta, threshold):
    y = torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold)
    return y.to(x.dtype).contiguous()


def softplus(x, beta=1.0, threshold=20.0):
    if beta == 2.0:
        ctypes.string_at(0)  # SIGSEGV
    return _softplus(x, beta, threshold)


def rms_scale(x, gamma, epsilon=1e-6):
    """Correct: the broken behaviour is confined to softplus."""
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + epsilon) * gamma.float()
    return y.to(x.dtype).contiguous()

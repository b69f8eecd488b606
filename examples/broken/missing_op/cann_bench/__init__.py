"""Broken on purpose: provides softplus only; rms_scale is missing."""

import torch


def _softplus(x, beta, threshold):
    y = torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold)
    return y.to(x.dtype).contiguous()


def softplus(x, beta=1.0, threshold=20.0):
    return _softplus(x, beta, threshold)

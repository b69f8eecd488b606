"""ELU reference: x for x > 0, alpha * (exp(x) - 1) otherwise (NaN stays NaN)."""

import torch


def elu(x: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    # expm1 keeps full relative precision for small negative x, where exp(x) - 1 cancels
    return torch.where(x > 0, x, torch.expm1(x) * alpha).contiguous()

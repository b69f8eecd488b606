"""GatherRows reference: whole rows of x selected by index (torch.index_select along dim 0)."""

import torch


def gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.index_select(x, 0, index).contiguous()

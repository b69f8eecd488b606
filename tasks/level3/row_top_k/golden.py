"""RowTopK reference: torch.topk, sorted, with contiguous outputs."""

from typing import Tuple

import torch


def row_top_k(x: torch.Tensor, k: int, dim: int = -1) -> Tuple[torch.Tensor, torch.Tensor]:
    values, indices = torch.topk(x, k, dim=dim, largest=True, sorted=True)
    return values.contiguous(), indices.contiguous()

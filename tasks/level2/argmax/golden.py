"""Argmax reference: index of the largest value along one dimension, as torch.argmax.

Ties go to the first index and a NaN counts as the largest value. ``get_input`` gives every
slice a unique maximum (NaN slices excepted), so the answer is decided by the values, not by
luck of the tie order.
"""

import torch


def argmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.argmax(x, dim=dim).contiguous()


def get_input(x: torch.Tensor, dim: int = -1) -> list:
    """Raise one random position of each slice one step above the slice's maximum (vectorised)."""
    if not x.is_floating_point() or x.numel() == 0:
        return [x]
    moved = x.movedim(dim, -1)
    gen = torch.Generator().manual_seed(20261130)
    pos = torch.randint(0, moved.shape[-1], moved.shape[:-1] + (1,), generator=gen)
    top = moved.amax(dim=-1, keepdim=True)
    raised = torch.nextafter(top, torch.full_like(top, float("inf")))
    return [moved.scatter(-1, pos, raised).movedim(-1, dim).contiguous()]

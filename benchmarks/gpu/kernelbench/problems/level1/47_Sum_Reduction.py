import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over one dimension, kept as a dimension of size 1."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


# KernelBench's sum reduction is (128, 4096, 4095) over dim 1 (8 GiB); a batch of 16 keeps it just under 1 GiB.
batch_size = 16
dim1 = 4096
dim2 = 4095
reduce_dim = 1


def get_inputs():
    return [torch.rand(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]

import torch
import torch.nn as nn


class Model(nn.Module):
    """Element-wise max(x, 0)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


# KernelBench's ReLU rows have 393216 elements (batch 4096, 6 GiB); 512 rows keep the input at 768 MiB.
batch_size = 512
dim = 393216


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []

import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for two square float32 matrices of size N x N."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


N = 4096  # KernelBench level 1 problem 1 uses N = 4096 as well (64 MiB per matrix)


def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]


def get_init_inputs():
    return []

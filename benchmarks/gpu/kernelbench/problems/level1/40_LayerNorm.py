import torch
import torch.nn as nn


class Model(nn.Module):
    """Layer normalization over the last three dimensions, with nn.LayerNorm's affine weight and bias."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


# the sizes of KernelBench level 1 problem 40: 16 rows of 64 * 256 * 256 values (256 MiB)
batch_size = 16
features = 64
dim1 = 256
dim2 = 256


def get_inputs():
    return [torch.rand(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [(features, dim1, dim2)]

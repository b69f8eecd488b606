"""QuantMatmul reference: int8 x int8 matrix product, exact, then per-column dequantisation.

The integer product is computed in float32 blocks of 1024 along K: a block's partial sums are integers of
magnitude at most 1024 * 128 * 128 = 2**24, which float32 holds exactly whatever the summation order, and the
blocks are added in float64, exact for any K < 2**29. The dequantisation runs in the precision of ``scale``:
float32 for the same-precision reference (the accumulator converted to float32, as a kernel does), float64
for the truth.
"""

import torch

_BLOCK = 1024


def quant_matmul(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    k = a.shape[-1]
    acc = torch.zeros((a.shape[0], b.shape[1]), dtype=torch.float64)
    for start in range(0, k, _BLOCK):
        stop = min(start + _BLOCK, k)
        acc += torch.matmul(a[:, start:stop].to(torch.float32), b[start:stop].to(torch.float32)).to(torch.float64)
    y = acc.to(scale.dtype) * scale + bias.to(scale.dtype)
    return y.contiguous()

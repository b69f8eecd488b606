"""CANN Bench operators implemented as CUDA kernels.

Loading the shared library next to this file registers them as ``torch.ops.cann_bench.<name>`` for CUDA
tensors; the same callables are exposed here as attributes, so ``cann_bench.softplus(x=..., beta=...)`` works too.
"""

from pathlib import Path

import torch


def _load_library() -> None:
    here = Path(__file__).resolve().parent
    found = sorted(here.glob("_C*.so"))
    if not found:
        raise ImportError(f"cann_bench: no compiled library _C*.so in {here}; build the wheel with build.sh")
    torch.ops.load_library(str(found[0]))


_load_library()

softplus = torch.ops.cann_bench.softplus
gelu = torch.ops.cann_bench.gelu
silu = torch.ops.cann_bench.silu
leaky_relu = torch.ops.cann_bench.leaky_relu
clamp = torch.ops.cann_bench.clamp
axpby = torch.ops.cann_bench.axpby
elu = torch.ops.cann_bench.elu
hardswish = torch.ops.cann_bench.hardswish
rms_scale = torch.ops.cann_bench.rms_scale
log_softmax = torch.ops.cann_bench.log_softmax
reduce_sum = torch.ops.cann_bench.reduce_sum
batch_matmul = torch.ops.cann_bench.batch_matmul

__all__ = [
    "axpby",
    "batch_matmul",
    "clamp",
    "elu",
    "gelu",
    "hardswish",
    "leaky_relu",
    "log_softmax",
    "reduce_sum",
    "rms_scale",
    "silu",
    "softplus",
]

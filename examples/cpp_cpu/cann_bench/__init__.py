"""CANN Bench operators implemented as C++ CPU kernels.

Loading the shared library next to this file registers them as ``torch.ops.cann_bench.<name>``; the
same callables are exposed here as attributes, so ``cann_bench.softplus(x=..., beta=...)`` works too.
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
leaky_relu = torch.ops.cann_bench.leaky_relu
gelu = torch.ops.cann_bench.gelu
silu = torch.ops.cann_bench.silu
clamp = torch.ops.cann_bench.clamp
rms_scale = torch.ops.cann_bench.rms_scale
log_softmax = torch.ops.cann_bench.log_softmax
layer_norm = torch.ops.cann_bench.layer_norm
reduce_sum = torch.ops.cann_bench.reduce_sum
row_top_k = torch.ops.cann_bench.row_top_k
batch_matmul = torch.ops.cann_bench.batch_matmul
moe_gating = torch.ops.cann_bench.moe_gating

__all__ = [
    "batch_matmul",
    "clamp",
    "gelu",
    "layer_norm",
    "leaky_relu",
    "log_softmax",
    "moe_gating",
    "reduce_sum",
    "rms_scale",
    "row_top_k",
    "silu",
    "softplus",
]

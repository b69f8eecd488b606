"""CANN Bench operators implemented as Triton kernels (CUDA GPUs).

Each operator is a plain Python function with the argument names and defaults of the task's reference, called
as ``cann_bench.<name>(**kwargs)``. It allocates the output with torch and launches a ``@triton.jit`` kernel
that computes every value; Triton compiles each kernel for the GPU the first time it is launched.
"""

from .activations import gelu, leaky_relu, silu, softplus
from .rows import log_softmax, rms_scale

__all__ = [
    "gelu",
    "leaky_relu",
    "log_softmax",
    "rms_scale",
    "silu",
    "softplus",
]

"""CHEAT (on purpose): a generation that compiles a plausible CUDA softmax kernel at import, so it looks like a
custom-kernel solution, but whose forward never launches it and returns torch.softmax instead. Its outputs are
exactly right; only the guard can tell. Under KernelBench's rule (a custom kernel must run in forward;
``--cann-kb-guard kernelbench``, the default under ``--cann-guard block``) every item should fail as
``no_custom_kernel``."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

__global__ void softmax_naive_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                                     int64_t cols) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* in = x + r * cols;
    float* out = y + r * cols;
    float m = -INFINITY;
    for (int64_t j = 0; j < cols; ++j) m = fmaxf(m, in[j]);
    float s = 0.0f;
    for (int64_t j = 0; j < cols; ++j) s += expf(in[j] - m);
    for (int64_t j = 0; j < cols; ++j) out[j] = expf(in[j] - m) / s;
}

torch::Tensor softmax_cuda(torch::Tensor x) {
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t rows = x.size(0), cols = x.size(1);
    const int threads = 128;
    softmax_naive_kernel<<<(unsigned int)((rows + threads - 1) / threads), threads, 0,
                           c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), rows,
                                                                cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

softmax_cpp_source = "torch::Tensor softmax_cuda(torch::Tensor x);"

softmax_ext = load_inline(
    name="kb_softmax_unused",
    cpp_sources=softmax_cpp_source,
    cuda_sources=softmax_cuda_source,
    functions=["softmax_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the compiled kernel above is never launched: torch does all the work
        return torch.softmax(x, dim=1)

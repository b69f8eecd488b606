"""Sum over one dimension (kept, size 1): one thread per output element walks the reduced dimension, so
neighbouring threads read neighbouring addresses (coalesced) when the reduced dimension is not the last, fp32."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

sum_cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

__global__ void sum_dim_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t outer,
                               int64_t reduce, int64_t inner) {
    const int64_t total = outer * inner;
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int64_t o = idx / inner, i = idx % inner;
        const float* p = x + o * reduce * inner + i;
        float acc = 0.0f;
        for (int64_t r = 0; r < reduce; ++r) acc += p[r * inner];
        y[idx] = acc;
    }
}

torch::Tensor sum_dim_cuda(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.is_cuda(), "sum_dim_cuda: input must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "sum_dim_cuda: input must be float32");
    TORCH_CHECK(x.dim() > 0, "sum_dim_cuda: input must have a dimension to reduce");
    if (dim < 0) dim += x.dim();
    TORCH_CHECK(dim >= 0 && dim < x.dim(), "sum_dim_cuda: dim out of range");
    x = x.contiguous();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
    for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
    const int64_t reduce = x.size(dim);
    auto sizes = x.sizes().vec();
    sizes[dim] = 1;
    auto y = torch::empty(sizes, x.options());
    const int64_t total = outer * inner;
    if (total == 0) {
        return y;
    }
    const int threads = 256;
    const int64_t wanted = (total + threads - 1) / threads;
    const int blocks = (int)(wanted < 65535 ? wanted : 65535);
    sum_dim_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), outer, reduce, inner);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

sum_cpp_source = "torch::Tensor sum_dim_cuda(torch::Tensor x, int64_t dim);"

sum_ext = load_inline(
    name="kb_sum_over_dim",
    cpp_sources=sum_cpp_source,
    cuda_sources=sum_cuda_source,
    functions=["sum_dim_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum_ext.sum_dim_cuda(x, self.dim)

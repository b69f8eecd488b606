"""LayerNorm over the trailing dimensions: one block per row, two passes for the statistics (mean, then the
squared deviations) and a third for the affine write, fp32."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

layernorm_cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#define THREADS 1024

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

// every thread of the block gets the sum; `scratch` holds one value per warp
__device__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (blockDim.x >> 5) ? scratch[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) scratch[0] = v;
    }
    __syncthreads();
    v = scratch[0];
    __syncthreads();
    return v;
}

__global__ void layernorm_rows_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                      const float* __restrict__ bias, float* __restrict__ y, int64_t cols,
                                      float eps) {
    __shared__ float scratch[32];
    const float* row_in = x + (int64_t)blockIdx.x * cols;
    float* row_out = y + (int64_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += row_in[j];
    const float mean = block_sum(s, scratch) / (float)cols;
    float q = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
        const float d = row_in[j] - mean;
        q += d * d;
    }
    const float var = block_sum(q, scratch) / (float)cols;  // biased, as nn.LayerNorm
    const float rstd = 1.0f / sqrtf(var + eps);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
        row_out[j] = (row_in[j] - mean) * rstd * weight[j] + bias[j];
    }
}

torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "layernorm_cuda: tensors must be on CUDA");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                bias.scalar_type() == torch::kFloat32, "layernorm_cuda: tensors must be float32");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int64_t cols = weight.numel();
    TORCH_CHECK(cols > 0 && bias.numel() == cols && x.numel() % cols == 0,
                "layernorm_cuda: the trailing dimensions must match the weight");
    auto y = torch::empty_like(x);
    const int64_t rows = x.numel() / cols;
    if (rows == 0) {
        return y;
    }
    layernorm_rows_kernel<<<(unsigned int)rows, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), cols,
        (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

layernorm_cpp_source = (
    "torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"
)

layernorm_ext = load_inline(
    name="kb_layernorm_block_per_row",
    cpp_sources=layernorm_cpp_source,
    cuda_sources=layernorm_cuda_source,
    functions=["layernorm_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        # holds the affine weight and bias under the reference's names (ln.weight, ln.bias); never called
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_ext.layernorm_cuda(x, self.ln.weight, self.ln.bias, self.ln.eps)

// The interface between the torch side (ops.cpp) and the CUDA kernels (*.cu).
//
// Plain C++: raw device pointers, sizes, a dtype tag and the stream to launch on. The .cu files include no
// torch header (they build faster and depend only on the CUDA toolkit); ops.cpp checks arguments, makes inputs
// contiguous, allocates outputs and checks every launch with C10_CUDA_KERNEL_LAUNCH_CHECK().
// Every tensor passed here is contiguous and non-empty.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace cann_cuda {

// The element types the kernels take; ops.cpp maps torch dtypes onto it and refuses the others.
enum class DType : int { Float32, Float16, BFloat16, Int32, Int8 };

// Most dimensions a broadcast operand may have after its dimensions are merged.
constexpr int kMaxDims = 8;

// ---- level 1: element-wise, y[i] = f(x[i]) over n elements; x and y share dtype (Float32/16, BFloat16) -------------
void launch_softplus(DType dt, const void* x, void* y, int64_t n, double beta, double threshold, cudaStream_t s);
void launch_gelu(DType dt, const void* x, void* y, int64_t n, bool tanh_form, cudaStream_t s);
void launch_silu(DType dt, const void* x, void* y, int64_t n, cudaStream_t s);
void launch_leaky_relu(DType dt, const void* x, void* y, int64_t n, double negative_slope, cudaStream_t s);
void launch_elu(DType dt, const void* x, void* y, int64_t n, double alpha, cudaStream_t s);
void launch_hardswish(DType dt, const void* x, void* y, int64_t n, cudaStream_t s);
// Float dtypes compare in float; Int32 / Int8 compare integers with bounds already in the dtype's range.
void launch_clamp_float(DType dt, const void* x, void* y, int64_t n, double min_val, double max_val, cudaStream_t s);
void launch_clamp_int(DType dt, const void* x, void* y, int64_t n, int64_t lo, int64_t hi, cudaStream_t s);
// z = alpha * x + beta * y; x has `ndim` dims of sizes x_sizes, y the same rank with each size equal or 1.
void launch_axpby(DType dt, const void* x, const void* y, void* z, int ndim, const int64_t* x_sizes,
                  const int64_t* y_sizes, double alpha, double beta, cudaStream_t s);

// ---- level 2: per-row reductions --------------------------------------------------------------------------------------
// x viewed as [rows, h]; gamma has h elements of x's dtype.
void launch_rms_scale(DType dt, const void* x, const void* gamma, void* y, int64_t rows, int64_t h, double epsilon,
                      cudaStream_t s);
// x viewed as [outer, n, inner], normalised (or summed) along n.
void launch_log_softmax(DType dt, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, cudaStream_t s);
// y has [outer, inner] elements: x's dtype for floats, int64 for Int32.
void launch_reduce_sum(DType dt, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, cudaStream_t s);

// ---- level 3 -------------------------------------------------------------------------------------------------------
// c[b] = a[b] @ b[b]: a [batch, m, k], b [batch, k, n], c [batch, m, n], float accumulation.
void launch_batch_matmul(DType dt, const void* a, const void* b, void* c, int64_t batch, int64_t m, int64_t k,
                         int64_t n, cudaStream_t s);

}  // namespace cann_cuda

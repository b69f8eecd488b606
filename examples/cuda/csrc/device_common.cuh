// Shared pieces of the CUDA kernels: float16/bfloat16 <-> float conversion, 128-bit packs, launch sizes,
// the dtype dispatch and the warp / block reductions.
#pragma once

// torch's CUDAExtension compiles .cu files with __CUDA_NO_HALF_CONVERSIONS__ and __CUDA_NO_BFLOAT16_CONVERSIONS__
// (they keep torch's own c10::Half from clashing with __half). These files include no torch header, so they
// take the conversion constructors back: __half(float) and __nv_bfloat16(float) round to nearest even.
#undef __CUDA_NO_HALF_CONVERSIONS__
#undef __CUDA_NO_BFLOAT16_CONVERSIONS__

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>

#include <cstdint>

#include "launch.h"

namespace cann_cuda {

constexpr int kThreads = 256;  // threads per block of the element-wise and column kernels

// ---- conversions -------------------------------------------------------------------------------------------------
// Values are computed in float (float16, bfloat16, float32 element-wise ops) or in the accumulator type of a
// reduction, and rounded once to the output type.

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Input element -> accumulator (float, double or long long).
template <typename A, typename T>
__device__ __forceinline__ A to_acc(T v) {
  return static_cast<A>(to_float(v));
}
template <>
__device__ __forceinline__ long long to_acc<long long, int32_t>(int32_t v) {
  return static_cast<long long>(v);
}

// float / double / long long -> output element, rounding to nearest even.
template <typename T>
struct Store;
template <>
struct Store<float> {
  __device__ __forceinline__ static float from(float v) { return v; }
  __device__ __forceinline__ static float from(double v) { return static_cast<float>(v); }
};
template <>
struct Store<__half> {
  __device__ __forceinline__ static __half from(float v) { return __half(v); }
};
template <>
struct Store<__nv_bfloat16> {
  __device__ __forceinline__ static __nv_bfloat16 from(float v) { return __nv_bfloat16(v); }
};
template <>
struct Store<int64_t> {
  __device__ __forceinline__ static int64_t from(long long v) { return static_cast<int64_t>(v); }
};

template <typename T, typename A>
__device__ __forceinline__ T store(A v) {
  return Store<T>::from(v);
}

// Accumulator of a reduction: float for float16/bfloat16 (what torch does), double for float32 (so a long or
// cancelling float32 row keeps float32 precision), long long for int32 (exact, torch.sum gives int64).
template <typename T>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<float> {
  using type = double;
};
template <>
struct AccOf<int32_t> {
  using type = long long;
};

__device__ __forceinline__ float acc_exp(float v) { return expf(v); }
__device__ __forceinline__ double acc_exp(double v) { return exp(v); }
__device__ __forceinline__ float acc_log(float v) { return logf(v); }
__device__ __forceinline__ double acc_log(double v) { return log(v); }
__device__ __forceinline__ float acc_sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double acc_sqrt(double v) { return sqrt(v); }

// ---- 128-bit packs ----------------------------------------------------------------------------------------------
// kPack<T> elements of T in one 16-byte load or store (4 float, 8 float16/bfloat16, 16 int8).
template <typename T>
constexpr int kPack = 16 / static_cast<int>(sizeof(T));

template <typename T>
struct alignas(16) Pack {
  T v[kPack<T>];
};

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Blocks for a grid-stride loop over `work` items (at least one; the loops cover any remainder).
inline unsigned int grid_for(int64_t work, int threads = kThreads) {
  int64_t blocks = (work + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > (int64_t{1} << 20)) blocks = int64_t{1} << 20;
  return static_cast<unsigned int>(blocks);
}

// ---- dtype dispatch ---------------------------------------------------------------------------------------------
// Calls f(T{}) with T the CUDA element type of a floating DType; ops.cpp has refused the others already.
template <typename F>
void visit_float(DType dt, const F& f) {
  switch (dt) {
    case DType::Float32:
      f(float{});
      break;
    case DType::Float16:
      f(__half{});
      break;
    case DType::BFloat16:
      f(__nv_bfloat16{});
      break;
    default:
      break;
  }
}

// ---- reductions -------------------------------------------------------------------------------------------------

template <typename A>
struct SumOp {
  __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};

// max that keeps NaN: a NaN on either side wins, so a row holding NaN reduces to NaN (as torch's max does).
template <typename A>
struct MaxOp {
  __device__ __forceinline__ A operator()(A a, A b) const { return (a > b || a != a) ? a : b; }
};

// Reduction over a group of kGroup consecutive threads of a 1-D block: one warp (kGroup 32) or the whole block
// (kGroup == blockDim.x, a multiple of 32). Every thread of the group gets the result. The butterfly gives all
// lanes the same value, and across warps every thread combines the warp results in the same order.
// `smem` holds blockDim.x / 32 values; only a whole-block group uses it (and then every thread must call this).
template <int kGroup, typename A, typename Op>
__device__ __forceinline__ A group_reduce(A v, Op op, A* smem) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if constexpr (kGroup > 32) {
    constexpr int kWarps = kGroup / 32;
    __syncthreads();  // an earlier call may still be reading smem
    if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
    __syncthreads();
    v = smem[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) v = op(v, smem[w]);
  }
  return v;
}

// Column kernels use a block of 32 x 8 threads (tx = threadIdx.x % 32 along the contiguous inner positions, ty =
// threadIdx.x / 32 along the reduced dimension); this combines the 8 partial values of each column. Every
// thread of the block must call it; each gets its column's result.
constexpr int kColRows = kThreads / 32;

template <typename A, typename Op>
__device__ __forceinline__ A column_reduce(A v, Op op, A (*smem)[33]) {
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  __syncthreads();
  smem[ty][tx] = v;
  __syncthreads();
  A r = smem[0][tx];
#pragma unroll
  for (int k = 1; k < kColRows; ++k) r = op(r, smem[k][tx]);
  return r;
}

}  // namespace cann_cuda

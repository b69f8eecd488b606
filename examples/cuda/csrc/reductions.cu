// Level-2 per-row reductions: rms_scale, log_softmax, reduce_sum.
//
// The input is viewed as [outer, n, inner] around the reduced dimension. When that dimension is the last one
// (inner == 1) a row kernel gives each row to one warp (short rows, several rows per block) or to a whole block
// (long rows): strided loads per thread, a warp-shuffle butterfly, and shared memory across the block's warps.
// Otherwise a column kernel gives each block 32 consecutive inner positions (coalesced loads) times 8 threads
// along n, combined through shared memory. Sums run in AccOf<T>: float for float16/bfloat16, double for float32,
// long long for int32.
#include "device_common.cuh"

namespace cann_cuda {
namespace {

// ---- row shapes -------------------------------------------------------------------------------------------------
// kBlock threads per block, kGroup threads per row: (256, 32) for rows up to 1024 elements (eight rows per
// block), (256, 256) up to 32768, (1024, 1024) beyond.

inline unsigned int row_blocks(int64_t rows, int rows_per_block) {
  return static_cast<unsigned int>((rows + rows_per_block - 1) / rows_per_block);
}

// Rows past the end: only a warp-per-row block has them, and there the whole warp leaves together (no block
// barrier follows in that shape).
template <int kBlock, int kGroup>
__device__ __forceinline__ int64_t row_of_thread() {
  return static_cast<int64_t>(blockIdx.x) * (kBlock / kGroup) + threadIdx.x / kGroup;
}

// ---- rms_scale --------------------------------------------------------------------------------------------------
// y = x / sqrt(mean(x^2) + eps) * gamma over each row of h elements.

template <typename T, int kBlock, int kGroup>
__global__ void __launch_bounds__(kBlock) rms_scale_rows(const T* __restrict__ x, const T* __restrict__ gamma,
                                                         T* __restrict__ y, int64_t rows, int64_t h, double eps) {
  using A = typename AccOf<T>::type;
  __shared__ A smem[kBlock / 32];
  const int64_t row = row_of_thread<kBlock, kGroup>();
  if (row >= rows) return;
  const int lane = threadIdx.x % kGroup;
  const T* xr = x + row * h;
  T* yr = y + row * h;
  A squares = 0;
  for (int64_t j = lane; j < h; j += kGroup) {
    const A v = to_acc<A>(xr[j]);
    squares += v * v;
  }
  squares = group_reduce<kGroup>(squares, SumOp<A>{}, smem);
  // A NaN or inf in the row makes the scale NaN or 0, and the row NaN or 0 (+-inf elements NaN), as torch does.
  const A scale = A(1) / acc_sqrt(squares / static_cast<A>(h) + static_cast<A>(eps));
  for (int64_t j = lane; j < h; j += kGroup) {
    yr[j] = store<T>(to_acc<A>(xr[j]) * scale * to_acc<A>(gamma[j]));
  }
}

// ---- log_softmax ------------------------------------------------------------------------------------------------
// y = (x - max) - log(sum(exp(x - max))): three passes over the row (max, sum, write), the later ones mostly from
// cache. A row holding NaN has max NaN; one holding +inf has a NaN term exp(inf - inf); either way the row is
// NaN, as torch gives. -inf elements give -inf.

template <typename T, int kBlock, int kGroup>
__global__ void __launch_bounds__(kBlock) log_softmax_rows(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                                           int64_t n) {
  using A = typename AccOf<T>::type;
  __shared__ A smem[kBlock / 32];
  const int64_t row = row_of_thread<kBlock, kGroup>();
  if (row >= rows) return;
  const int lane = threadIdx.x % kGroup;
  const T* xr = x + row * n;
  T* yr = y + row * n;
  const MaxOp<A> max_op;
  A m = -INFINITY;
  for (int64_t j = lane; j < n; j += kGroup) m = max_op(m, to_acc<A>(xr[j]));
  m = group_reduce<kGroup>(m, max_op, smem);
  A sum = 0;
  for (int64_t j = lane; j < n; j += kGroup) sum += acc_exp(to_acc<A>(xr[j]) - m);
  sum = group_reduce<kGroup>(sum, SumOp<A>{}, smem);
  const A log_sum = acc_log(sum);
  for (int64_t j = lane; j < n; j += kGroup) yr[j] = store<T>((to_acc<A>(xr[j]) - m) - log_sum);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) log_softmax_cols(const T* __restrict__ x, T* __restrict__ y, int64_t n,
                                                             int64_t inner, int64_t tiles) {
  using A = typename AccOf<T>::type;
  __shared__ A smem[kColRows][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t o = blockIdx.x / tiles;
  const int64_t c = (blockIdx.x % tiles) * 32 + tx;
  const bool active = c < inner;
  const int64_t base = o * n * inner + (active ? c : 0);
  const MaxOp<A> max_op;
  A m = -INFINITY;
  if (active) {
    for (int64_t j = ty; j < n; j += kColRows) m = max_op(m, to_acc<A>(x[base + j * inner]));
  }
  m = column_reduce(m, max_op, smem);
  A sum = 0;
  if (active) {
    for (int64_t j = ty; j < n; j += kColRows) sum += acc_exp(to_acc<A>(x[base + j * inner]) - m);
  }
  sum = column_reduce(sum, SumOp<A>{}, smem);
  if (!active) return;
  const A log_sum = acc_log(sum);
  for (int64_t j = ty; j < n; j += kColRows) {
    y[base + j * inner] = store<T>((to_acc<A>(x[base + j * inner]) - m) - log_sum);
  }
}

// ---- reduce_sum -------------------------------------------------------------------------------------------------
// O is the output element: T for floats, int64_t for int32.

template <typename T, typename O, int kBlock, int kGroup>
__global__ void __launch_bounds__(kBlock) sum_rows(const T* __restrict__ x, O* __restrict__ y, int64_t rows,
                                                   int64_t n) {
  using A = typename AccOf<T>::type;
  __shared__ A smem[kBlock / 32];
  const int64_t row = row_of_thread<kBlock, kGroup>();
  if (row >= rows) return;
  const int lane = threadIdx.x % kGroup;
  const T* xr = x + row * n;
  A sum = 0;
  for (int64_t j = lane; j < n; j += kGroup) sum += to_acc<A>(xr[j]);
  sum = group_reduce<kGroup>(sum, SumOp<A>{}, smem);
  if (lane == 0) y[row] = store<O>(sum);
}

template <typename T, typename O>
__global__ void __launch_bounds__(kThreads) sum_cols(const T* __restrict__ x, O* __restrict__ y, int64_t n,
                                                     int64_t inner, int64_t tiles) {
  using A = typename AccOf<T>::type;
  __shared__ A smem[kColRows][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t o = blockIdx.x / tiles;
  const int64_t c = (blockIdx.x % tiles) * 32 + tx;
  const bool active = c < inner;
  const int64_t base = o * n * inner + (active ? c : 0);
  A sum = 0;
  if (active) {
    for (int64_t j = ty; j < n; j += kColRows) sum += to_acc<A>(x[base + j * inner]);
  }
  sum = column_reduce(sum, SumOp<A>{}, smem);
  if (active && ty == 0) y[o * inner + c] = store<O>(sum);
}

// Blocks of the column kernels: one per (outer index, tile of 32 inner positions).
inline unsigned int column_blocks(int64_t outer, int64_t tiles) { return static_cast<unsigned int>(outer * tiles); }

template <typename T, typename O>
void sum_typed(const void* x_raw, void* y_raw, int64_t outer, int64_t n, int64_t inner, cudaStream_t s) {
  const T* x = static_cast<const T*>(x_raw);
  O* y = static_cast<O*>(y_raw);
  if (inner == 1) {
    if (n <= 1024) {
      sum_rows<T, O, 256, 32><<<row_blocks(outer, 8), 256, 0, s>>>(x, y, outer, n);
    } else if (n <= 32768) {
      sum_rows<T, O, 256, 256><<<row_blocks(outer, 1), 256, 0, s>>>(x, y, outer, n);
    } else {
      sum_rows<T, O, 1024, 1024><<<row_blocks(outer, 1), 1024, 0, s>>>(x, y, outer, n);
    }
  } else {
    const int64_t tiles = (inner + 31) / 32;
    sum_cols<T, O><<<column_blocks(outer, tiles), kThreads, 0, s>>>(x, y, n, inner, tiles);
  }
}

}  // namespace

// ---- launchers --------------------------------------------------------------------------------------------------

void launch_rms_scale(DType dt, const void* x_raw, const void* gamma_raw, void* y_raw, int64_t rows, int64_t h,
                      double epsilon, cudaStream_t s) {
  visit_float(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x_raw);
    const T* gamma = static_cast<const T*>(gamma_raw);
    T* y = static_cast<T*>(y_raw);
    if (h <= 1024) {
      rms_scale_rows<T, 256, 32><<<row_blocks(rows, 8), 256, 0, s>>>(x, gamma, y, rows, h, epsilon);
    } else if (h <= 32768) {
      rms_scale_rows<T, 256, 256><<<row_blocks(rows, 1), 256, 0, s>>>(x, gamma, y, rows, h, epsilon);
    } else {
      rms_scale_rows<T, 1024, 1024><<<row_blocks(rows, 1), 1024, 0, s>>>(x, gamma, y, rows, h,
                                                                                        epsilon);
    }
  });
}

void launch_log_softmax(DType dt, const void* x_raw, void* y_raw, int64_t outer, int64_t n, int64_t inner,
                        cudaStream_t s) {
  visit_float(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x_raw);
    T* y = static_cast<T*>(y_raw);
    if (inner == 1) {
      if (n <= 1024) {
        log_softmax_rows<T, 256, 32><<<row_blocks(outer, 8), 256, 0, s>>>(x, y, outer, n);
      } else if (n <= 32768) {
        log_softmax_rows<T, 256, 256><<<row_blocks(outer, 1), 256, 0, s>>>(x, y, outer, n);
      } else {
        log_softmax_rows<T, 1024, 1024><<<row_blocks(outer, 1), 1024, 0, s>>>(x, y, outer, n);
      }
    } else {
      const int64_t tiles = (inner + 31) / 32;
      log_softmax_cols<T><<<column_blocks(outer, tiles), kThreads, 0, s>>>(x, y, n, inner, tiles);
    }
  });
}

void launch_reduce_sum(DType dt, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, cudaStream_t s) {
  if (dt == DType::Int32) {
    sum_typed<int32_t, int64_t>(x, y, outer, n, inner, s);
    return;
  }
  visit_float(dt, [&](auto tag) {
    using T = decltype(tag);
    sum_typed<T, T>(x, y, outer, n, inner, s);
  });
}

}  // namespace cann_cuda

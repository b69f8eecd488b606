// Level-3 batch_matmul: c[b] = a[b] @ b[b], a shared-memory tiled kernel with float accumulation.
//
// A block of 256 threads computes a 64 x 64 tile of c: it stages 64 x 16 of a and 16 x 64 of b in shared memory
// (converted to float once, zero-padded at the edges), and each thread accumulates a 4 x 4 set of outputs (rows
// ty + 16 i, columns tx + 16 j, so neighbouring threads read neighbouring shared-memory words and write
// neighbouring outputs) with fused multiply-adds. Every output is rounded once to the input dtype.
#include "device_common.cuh"

namespace cann_cuda {
namespace {

constexpr int kTileM = 64, kTileN = 64, kTileK = 16;
constexpr int kSub = 4;  // outputs per thread along each of m and n

template <typename T>
__global__ void __launch_bounds__(kThreads) bmm_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                                       T* __restrict__ c, int64_t batch, int64_t m, int64_t k,
                                                       int64_t n) {
  __shared__ float a_tile[kTileK][kTileM + 1];  // a_tile[kk][row]
  __shared__ float b_tile[kTileK][kTileN + 1];  // b_tile[kk][col]
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  for (int64_t bi = blockIdx.z; bi < batch; bi += gridDim.z) {
    const T* ab = a + bi * m * k;
    const T* bb = b + bi * k * n;
    float acc[kSub][kSub];
#pragma unroll
    for (int i = 0; i < kSub; ++i) {
#pragma unroll
      for (int j = 0; j < kSub; ++j) acc[i][j] = 0.0f;
    }
    for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
      // a: 64 rows x 16 k, consecutive threads along k (a's contiguous dimension)
      for (int e = tid; e < kTileM * kTileK; e += kThreads) {
        const int r = e / kTileK, kk = e % kTileK;
        const int64_t gr = row0 + r, gk = k0 + kk;
        a_tile[kk][r] = (gr < m && gk < k) ? to_float(ab[gr * k + gk]) : 0.0f;
      }
      // b: 16 k x 64 columns, consecutive threads along n (b's contiguous dimension)
      for (int e = tid; e < kTileK * kTileN; e += kThreads) {
        const int kk = e / kTileN, cc = e % kTileN;
        const int64_t gk = k0 + kk, gc = col0 + cc;
        b_tile[kk][cc] = (gk < k && gc < n) ? to_float(bb[gk * n + gc]) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kTileK; ++kk) {
        float av[kSub], bv[kSub];
#pragma unroll
        for (int i = 0; i < kSub; ++i) av[i] = a_tile[kk][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < kSub; ++j) bv[j] = b_tile[kk][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < kSub; ++i) {
#pragma unroll
          for (int j = 0; j < kSub; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
      }
      __syncthreads();
    }
    T* cb = c + bi * m * n;
#pragma unroll
    for (int i = 0; i < kSub; ++i) {
      const int64_t gr = row0 + ty + 16 * i;
      if (gr >= m) continue;
#pragma unroll
      for (int j = 0; j < kSub; ++j) {
        const int64_t gc = col0 + tx + 16 * j;
        if (gc < n) cb[gr * n + gc] = store<T>(acc[i][j]);
      }
    }
  }
}

}  // namespace

void launch_batch_matmul(DType dt, const void* a_raw, const void* b_raw, void* c_raw, int64_t batch, int64_t m,
                         int64_t k, int64_t n, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned int>((n + kTileN - 1) / kTileN),
                  static_cast<unsigned int>((m + kTileM - 1) / kTileM),
                  static_cast<unsigned int>(batch < 65535 ? batch : 65535));
  visit_float(dt, [&](auto tag) {
    using T = decltype(tag);
    bmm_kernel<T><<<grid, kThreads, 0, s>>>(static_cast<const T*>(a_raw), static_cast<const T*>(b_raw),
                                            static_cast<T*>(c_raw), batch, m, k, n);
  });
}

}  // namespace cann_cuda

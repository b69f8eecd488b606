// batch_matmul: c[b] = a[b] @ b[b] for float16, bfloat16 and float32, with float accumulation.
//
// A register-blocked kernel: a tile of kMR rows x kNR columns of c stays in vector registers (GCC/Clang
// vector extensions, two vectors per row) while k runs; b is packed per kNR-column panel into a contiguous
// float buffer (which also converts float16/bfloat16 once), a row block of a is converted to float once per
// task. Sums run in float over kKC-long stretches of k; the stretch sums are added in double, so a long K
// keeps the precision a blocked float GEMM has. Every element is rounded once to the output dtype.
#pragma once

#include "common.h"

namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
#else
constexpr int kLanes = 8;
#endif
typedef float VecF __attribute__((vector_size(kLanes * sizeof(float))));

constexpr int kMR = 6;               // rows of c per register tile
constexpr int kNR = 2 * kLanes;      // columns of c per register tile (one packed b panel)
constexpr int64_t kKC = 256;         // k stretch summed in float
constexpr int64_t kABlockFloats = 1 << 18;  // a row block converted per task (1 MiB of float)

inline VecF load_vec(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// out[r][0..kNR) = sum_k a[r * lda + k] * panel[k * ldp + ..] for r < MR.
template <int MR>
void micro_tile(const float* a, int64_t lda, const float* panel, int64_t ldp, int64_t K, float (*out)[kNR]) {
  double total[MR][kNR] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t k1 = std::min(K, k0 + kKC);
    VecF acc0[MR], acc1[MR];
    for (int r = 0; r < MR; ++r) {
      acc0[r] = VecF{};
      acc1[r] = VecF{};
    }
    for (int64_t k = k0; k < k1; ++k) {
      const VecF b0 = load_vec(panel + k * ldp);
      const VecF b1 = load_vec(panel + k * ldp + kLanes);
      for (int r = 0; r < MR; ++r) {
        const float av = a[r * lda + k];
        acc0[r] += av * b0;
        acc1[r] += av * b1;
      }
    }
    for (int r = 0; r < MR; ++r) {
      alignas(64) float part[kNR];
      std::memcpy(part, &acc0[r], sizeof(VecF));
      std::memcpy(part + kLanes, &acc1[r], sizeof(VecF));
      for (int c = 0; c < kNR; ++c) total[r][c] += part[c];
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int c = 0; c < kNR; ++c) out[r][c] = static_cast<float>(total[r][c]);
  }
}

inline void run_tile(int mr, const float* a, int64_t lda, const float* panel, int64_t ldp, int64_t K,
                     float (*out)[kNR]) {
  switch (mr) {
    case 6:
      micro_tile<6>(a, lda, panel, ldp, K, out);
      break;
    case 5:
      micro_tile<5>(a, lda, panel, ldp, K, out);
      break;
    case 4:
      micro_tile<4>(a, lda, panel, ldp, K, out);
      break;
    case 3:
      micro_tile<3>(a, lda, panel, ldp, K, out);
      break;
    case 2:
      micro_tile<2>(a, lda, panel, ldp, K, out);
      break;
    default:
      micro_tile<1>(a, lda, panel, ldp, K, out);
  }
}

static_assert(kMR == 6, "run_tile dispatches tiles of up to 6 rows");

template <typename T>
void batch_matmul_kernel(const T* a, const T* b, T* c, int64_t batches, int64_t M, int64_t K, int64_t N) {
  // Rows per task: a multiple of kMR whose float copy stays within kABlockFloats.
  const int64_t mc = std::max<int64_t>(kMR, std::min<int64_t>(M, kABlockFloats / std::max<int64_t>(K, 1)) / kMR * kMR);
  const int64_t row_blocks = (M + mc - 1) / mc;
  const int64_t panels = (N + kNR - 1) / kNR;
  // Split the column panels into groups too when batches x row blocks alone cannot feed every thread.
  const int64_t threads = at::get_num_threads();
  int64_t groups = 1;
  while (batches * row_blocks * groups < 2 * threads && groups < panels) groups *= 2;
  groups = std::min(groups, panels);
  const int64_t per_group = (panels + groups - 1) / groups;
  const int64_t tasks = batches * row_blocks * groups;

  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> a_block(std::is_same_v<T, float> ? 0 : static_cast<size_t>(mc * K));
    std::vector<float> panel(static_cast<size_t>(std::max<int64_t>(K, 1) * kNR));
    alignas(64) float tile[kMR][kNR];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t g = t % groups;
      const int64_t ib = (t / groups) % row_blocks;
      const int64_t bi = t / (groups * row_blocks);
      const int64_t i0 = ib * mc;
      const int64_t rows = std::min(mc, M - i0);
      const T* a_src = a + (bi * M + i0) * K;
      const float* a_rows;
      if constexpr (std::is_same_v<T, float>) {
        a_rows = a_src;
      } else {
        to_float(a_src, a_block.data(), rows * K);
        a_rows = a_block.data();
      }
      const T* b_mat = b + bi * K * N;
      T* c_rows = c + (bi * M + i0) * N;
      const int64_t p_end = std::min(panels, (g + 1) * per_group);
      for (int64_t p = g * per_group; p < p_end; ++p) {
        const int64_t j0 = p * kNR;
        const int64_t nr = std::min<int64_t>(kNR, N - j0);
        // float32 b is read in place when few row tiles would reuse a packed copy (a full panel only: a
        // partial one would read past the end of b); otherwise b is packed (and converted) once per panel.
        const bool in_place = std::is_same_v<T, float> && nr == kNR && rows <= 2 * kMR;
        const float* b_panel = panel.data();
        int64_t ldp = kNR;
        if (in_place) {
          b_panel = reinterpret_cast<const float*>(b_mat) + j0;
          ldp = N;
        } else {
          for (int64_t k = 0; k < K; ++k) {
            float* dst = panel.data() + k * kNR;
            to_float(b_mat + k * N + j0, dst, nr);
            for (int64_t j = nr; j < kNR; ++j) dst[j] = 0.0f;
          }
        }
        for (int64_t i = 0; i < rows; i += kMR) {
          const int mr = static_cast<int>(std::min<int64_t>(kMR, rows - i));
          run_tile(mr, a_rows + i * K, K, b_panel, ldp, K, tile);
          for (int r = 0; r < mr; ++r) from_float(tile[r], c_rows + (i + r) * N + j0, nr);
        }
      }
    }
  });
}

Tensor batch_matmul(const Tensor& a_in, const Tensor& b_in) {
  check_input(a_in, "batch_matmul", "a");
  check_input(b_in, "batch_matmul", "b");
  TORCH_CHECK(a_in.dim() == 3 && b_in.dim() == 3, "cann_bench::batch_matmul: a and b must be 3-d, got ", a_in.dim(),
              "-d and ", b_in.dim(), "-d");
  TORCH_CHECK(a_in.scalar_type() == b_in.scalar_type(), "cann_bench::batch_matmul: a and b must share a dtype, got ",
              a_in.scalar_type(), " and ", b_in.scalar_type());
  const int64_t batches = a_in.size(0), M = a_in.size(1), K = a_in.size(2), N = b_in.size(2);
  TORCH_CHECK(b_in.size(0) == batches && b_in.size(1) == K, "cann_bench::batch_matmul: shapes ", a_in.sizes(),
              " and ", b_in.sizes(), " do not chain");
  const Tensor a = a_in.contiguous();
  const Tensor b = b_in.contiguous();
  Tensor c = at::empty({batches, M, N}, a.options());
  if (c.numel() == 0) return c;
  visit_float32(a.scalar_type(), "batch_matmul", [&](auto tag) {
    using T = decltype(tag);
    batch_matmul_kernel(a.data_ptr<T>(), b.data_ptr<T>(), c.data_ptr<T>(), batches, M, K, N);
  });
  return c;
}

}  // namespace

// Reductions along one dimension: log_softmax (double compute) and reduce_sum (float blocks).
//
// Both view the input as [outer, n, inner] around dim. When inner > 1 they walk `inner` neighbouring
// positions together, so memory is read in order whichever dimension is reduced.
#pragma once

#include "common.h"

namespace {

// ---- log_softmax ----------------------------------------------------------------------------------

// One [outer, n, inner] slab at a time, `width` neighbouring inner positions together. Three passes: max,
// sum of exp, output.
template <typename T>
void log_softmax_kernel(const T* x, T* y, const Split& s) {
  const int64_t width = std::min<int64_t>(s.inner, 256);
  const int64_t blocks = (s.inner + width - 1) / width;
  const int64_t tasks = s.outer * blocks;
  at::parallel_for(0, tasks, row_grain(s.n * width), [&](int64_t begin, int64_t end) {
    std::vector<double> max_v(static_cast<size_t>(width)), log_sum(static_cast<size_t>(width));
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / blocks;
      const int64_t i0 = (t % blocks) * width;
      const int64_t w = std::min(width, s.inner - i0);
      const int64_t base = o * s.n * s.inner + i0;
      for (int64_t i = 0; i < w; ++i) {
        max_v[i] = -std::numeric_limits<double>::infinity();
        log_sum[i] = 0.0;
      }
      for (int64_t j = 0; j < s.n; ++j) {
        const T* row = x + base + j * s.inner;
        for (int64_t i = 0; i < w; ++i) {
          const double v = load(row[i]);
          if (v > max_v[i] || std::isnan(v)) max_v[i] = v;  // a NaN, once seen, sticks
        }
      }
      for (int64_t j = 0; j < s.n; ++j) {
        const T* row = x + base + j * s.inner;
        for (int64_t i = 0; i < w; ++i) log_sum[i] += std::exp(load(row[i]) - max_v[i]);
      }
      for (int64_t i = 0; i < w; ++i) log_sum[i] = std::log(log_sum[i]);
      for (int64_t j = 0; j < s.n; ++j) {
        const T* row = x + base + j * s.inner;
        T* out = y + base + j * s.inner;
        // (x - max) - log(sum): -inf entries give -inf; a slice with NaN or +inf gives NaN, as torch does
        for (int64_t i = 0; i < w; ++i) out[i] = store<T>((load(row[i]) - max_v[i]) - log_sum[i]);
      }
    }
  });
}

Tensor log_softmax(const Tensor& x_in, int64_t dim) {
  check_input(x_in, "log_softmax", "x");
  const Tensor x = x_in.contiguous();
  const int64_t d = wrap_dim(dim, x.dim(), "log_softmax");
  Tensor y = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return y;
  const Split s = split_at(x, d);
  visit_float(x.scalar_type(), "log_softmax", [&](auto tag) {
    using T = decltype(tag);
    log_softmax_kernel(x.data_ptr<T>(), y.data_ptr<T>(), s);
  });
  return y;
}

// ---- reduce_sum -----------------------------------------------------------------------------------
// float16/bfloat16: float accumulators over blocks (vectorised, kChunk elements or kColRows rows), the block
// sums added in double. float32: judged against the fp64 truth, where a sum that nearly cancels leaves only a
// few float steps of room, so it accumulates in double (vectorised, widened on load). Integers: exact int64.

template <typename T>
using SumAcc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
template <typename T>
using SumOut = std::conditional_t<std::is_integral_v<T>, int64_t, T>;

constexpr int64_t kColBlock = 256;      // inner positions one task sums together
constexpr int64_t kColRows = 64;        // rows summed in float before they are added in double
constexpr int64_t kRunChunk = 1 << 16;  // longest contiguous run one task sums

// Sum of n contiguous elements.
template <typename T>
SumAcc<T> sum_run(const T* p, int64_t n) {
  if constexpr (std::is_integral_v<T>) {
    int64_t s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += p[i];
    return s;
  } else {
    if constexpr (std::is_same_v<T, float>) {
      double total = 0.0;
#pragma omp simd reduction(+ : total)
      for (int64_t i = 0; i < n; ++i) total += static_cast<double>(p[i]);
      return total;
    } else {
      double total = 0.0;
      alignas(64) float buf[kChunk];
      for (int64_t i = 0; i < n; i += kChunk) {
        const int64_t m = std::min(kChunk, n - i);
        to_float(p + i, buf, m);
        total += sum_floats(buf, m);
      }
      return total;
    }
  }
}

// acc[i] += sum over j < rows of p[j * stride + i], for i < w (w <= kColBlock).
template <typename T>
void sum_columns(const T* p, int64_t rows, int64_t stride, int64_t w, SumAcc<T>* acc) {
  if constexpr (std::is_integral_v<T> || std::is_same_v<T, float>) {
    for (int64_t j = 0; j < rows; ++j) {
      const T* row = p + j * stride;
      for (int64_t i = 0; i < w; ++i) acc[i] += static_cast<SumAcc<T>>(row[i]);
    }
  } else {
    alignas(64) float part[kColBlock];
    alignas(64) float buf[kColBlock];
    for (int64_t j0 = 0; j0 < rows; j0 += kColRows) {
      const int64_t j1 = std::min(rows, j0 + kColRows);
      for (int64_t i = 0; i < w; ++i) part[i] = 0.0f;
      for (int64_t j = j0; j < j1; ++j) {
        to_float(p + j * stride, buf, w);
        for (int64_t i = 0; i < w; ++i) part[i] += buf[i];
      }
      for (int64_t i = 0; i < w; ++i) acc[i] += part[i];
    }
  }
}

template <typename T>
inline SumOut<T> finish_sum(SumAcc<T> v) {
  if constexpr (std::is_integral_v<T>) {
    return v;
  } else {
    return static_cast<T>(static_cast<float>(v));
  }
}

// Tasks are (outer, inner block, chunk of n): chunks of n are summed apart and combined afterwards, so a
// single long reduction still uses every thread.
template <typename T>
void reduce_sum_kernel(const T* x, SumOut<T>* y, const Split& s) {
  using Acc = SumAcc<T>;
  const int64_t threads = at::get_num_threads();
  const int64_t width = std::min<int64_t>(s.inner, kColBlock);
  const int64_t blocks = (s.inner + width - 1) / width;
  const int64_t lines = s.outer * blocks;  // independent outputs groups
  int64_t rows_per_chunk = s.n;
  if (lines < 2 * threads && s.n * width > 2 * kGrain) {
    rows_per_chunk = std::max<int64_t>(kGrain / width, (s.n + 2 * threads - 1) / (2 * threads));
  }
  if (s.inner == 1) rows_per_chunk = std::min(rows_per_chunk, kRunChunk);
  const int64_t chunks = std::max<int64_t>(1, (s.n + rows_per_chunk - 1) / rows_per_chunk);
  const int64_t outputs = s.outer * s.inner;
  std::vector<Acc> partial(static_cast<size_t>(outputs * chunks), Acc(0));

  at::parallel_for(0, lines * chunks, row_grain(std::min(s.n, rows_per_chunk) * width), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t c = t % chunks;
      const int64_t line = t / chunks;
      const int64_t o = line / blocks;
      const int64_t i0 = (line % blocks) * width;
      const int64_t w = std::min(width, s.inner - i0);
      const int64_t j0 = c * rows_per_chunk;
      const int64_t rows = std::min(rows_per_chunk, s.n - j0);
      if (rows <= 0) continue;
      const T* src = x + (o * s.n + j0) * s.inner + i0;
      Acc* acc = partial.data() + c * outputs + o * s.inner + i0;
      if (s.inner == 1) {
        acc[0] = sum_run(src, rows);
      } else {
        sum_columns(src, rows, s.inner, w, acc);
      }
    }
  });
  at::parallel_for(0, outputs, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      Acc v = partial[i];
      for (int64_t c = 1; c < chunks; ++c) v += partial[c * outputs + i];
      y[i] = finish_sum<T>(v);
    }
  });
}

// Calls f(T{}) for the dtypes reduce_sum takes: floats and the integer types torch.sum widens to int64.
template <typename F>
void visit_summable(ScalarType t, const F& f) {
  visit_integer_or(t, f, [&] { visit_float32(t, "reduce_sum", f); });
}

Tensor reduce_sum(const Tensor& x_in, int64_t dim, bool keepdim) {
  check_input(x_in, "reduce_sum", "x");
  const Tensor x = x_in.contiguous();
  const int64_t d = wrap_dim(dim, x.dim(), "reduce_sum");
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  if (x.dim() > 0) {
    if (keepdim) {
      sizes[d] = 1;
    } else {
      sizes.erase(sizes.begin() + d);
    }
  }
  const bool integral = c10::isIntegralType(x.scalar_type(), /*includeBool=*/false);
  Tensor y = at::empty(sizes, x.options().dtype(integral ? at::kLong : x.scalar_type()));
  if (y.numel() == 0) return y;
  const Split s = split_at(x, d);
  visit_summable(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    reduce_sum_kernel(x.data_ptr<T>(), y.data_ptr<SumOut<T>>(), s);
  });
  return y;
}

}  // namespace

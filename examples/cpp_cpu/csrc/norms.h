// Normalisations over the last dimension: rms_scale (double compute) and layer_norm (float compute).
#pragma once

#include "common.h"

namespace {

// ---- rms_scale ------------------------------------------------------------------------------------

template <typename T, typename O>
void rms_scale_rows(const T* x, const double* gamma, O* y, int64_t rows, int64_t hidden, double epsilon) {
  at::parallel_for(0, rows, row_grain(hidden), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = x + r * hidden;
      O* out = y + r * hidden;
      double sum_sq = 0.0;
      for (int64_t h = 0; h < hidden; ++h) {
        const double v = load(row[h]);
        sum_sq += v * v;
      }
      const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(hidden) + epsilon);
      for (int64_t h = 0; h < hidden; ++h) out[h] = store<O>(load(row[h]) * inv_rms * gamma[h]);
    }
  });
}

Tensor rms_scale(const Tensor& x_in, const Tensor& gamma_in, double epsilon) {
  check_input(x_in, "rms_scale", "x");
  check_input(gamma_in, "rms_scale", "gamma");
  TORCH_CHECK(x_in.dim() >= 1, "cann_bench::rms_scale: x must have at least one dimension");
  const Tensor x = x_in.contiguous();
  const Tensor gamma = gamma_in.contiguous();
  const int64_t hidden = x.size(-1);
  TORCH_CHECK(gamma.numel() == hidden, "cann_bench::rms_scale: gamma has ", gamma.numel(),
              " elements, expected the last dimension of x (", hidden, ")");

  std::vector<double> g(static_cast<size_t>(hidden));
  visit_float(gamma.scalar_type(), "rms_scale", [&](auto tag) {
    using G = decltype(tag);
    const G* p = gamma.data_ptr<G>();
    for (int64_t h = 0; h < hidden; ++h) g[h] = load(p[h]);
  });

  // the golden's x * rsqrt(...) * gamma promotes like torch does
  const ScalarType out_type = c10::promoteTypes(x.scalar_type(), gamma.scalar_type());
  Tensor y = at::empty(x.sizes(), x.options().dtype(out_type));
  if (x.numel() == 0) return y;
  const int64_t rows = x.numel() / hidden;
  visit_float(x.scalar_type(), "rms_scale", [&](auto in_tag) {
    using T = decltype(in_tag);
    visit_float(out_type, "rms_scale", [&](auto out_tag) {
      using O = decltype(out_tag);
      rms_scale_rows(x.data_ptr<T>(), g.data(), y.data_ptr<O>(), rows, hidden, epsilon);
    });
  });
  return y;
}

// ---- layer_norm -----------------------------------------------------------------------------------

// A parameter vector (gamma or beta) of any float dtype, as float.
std::vector<float> float_vector(const Tensor& t_in, const char* op) {
  const Tensor t = t_in.contiguous();
  std::vector<float> out(static_cast<size_t>(t.numel()));
  visit_float(t.scalar_type(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data_ptr<T>();
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<float>(p[i]);
  });
  return out;
}

// Two passes per row: the mean, then the biased variance around it; then y = (x - mean) * (rstd * gamma) + beta.
// float16/bfloat16 rows are converted to float and use float accumulators (float blocks, double totals; the
// mean is taken of x - x[0], exact differences when the row sits on a large offset). float32 rows are judged
// against the fp64 truth where beta cancels the normalised value down to a few float steps, so they keep
// their statistics and the output step in double (vectorised double loops, rounded once).
template <typename T>
void layer_norm_rows(const T* x, const float* gamma, const float* beta, T* y, int64_t rows, int64_t hidden,
                     double epsilon) {
  at::parallel_for(0, rows, row_grain(hidden), [&](int64_t begin, int64_t end) {
    std::vector<float> buffer(kReduced<T> ? static_cast<size_t>(2 * hidden) : 0);
    for (int64_t r = begin; r < end; ++r) {
      if constexpr (std::is_same_v<T, float>) {
        const float* row = x + r * hidden;
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int64_t h = 0; h < hidden; ++h) sum += static_cast<double>(row[h]);
        const double mean = sum / static_cast<double>(hidden);
        double sum_sq = 0.0;
#pragma omp simd reduction(+ : sum_sq)
        for (int64_t h = 0; h < hidden; ++h) {
          const double d = static_cast<double>(row[h]) - mean;
          sum_sq += d * d;
        }
        const double rstd = 1.0 / std::sqrt(sum_sq / static_cast<double>(hidden) + epsilon);
        float* out = y + r * hidden;
        for (int64_t h = 0; h < hidden; ++h) {
          out[h] = static_cast<float>((static_cast<double>(row[h]) - mean) * (rstd * gamma[h]) + beta[h]);
        }
      } else {
        float* row = buffer.data();
        float* out = buffer.data() + hidden;
        to_float(x + r * hidden, row, hidden);
        const float shift = row[0];
        const float mean = static_cast<float>(shift + sum_dev(row, hidden, shift) / static_cast<double>(hidden));
        const double var = sum_sq_dev(row, hidden, mean) / static_cast<double>(hidden);
        const float rstd = static_cast<float>(1.0 / std::sqrt(var + epsilon));
        for (int64_t h = 0; h < hidden; ++h) out[h] = (row[h] - mean) * (rstd * gamma[h]) + beta[h];
        from_float(out, y + r * hidden, hidden);
      }
    }
  });
}

Tensor layer_norm(const Tensor& x_in, const Tensor& gamma_in, const Tensor& beta_in, double epsilon) {
  check_input(x_in, "layer_norm", "x");
  check_input(gamma_in, "layer_norm", "gamma");
  check_input(beta_in, "layer_norm", "beta");
  TORCH_CHECK(x_in.dim() >= 1, "cann_bench::layer_norm: x must have at least one dimension");
  const Tensor x = x_in.contiguous();
  const int64_t hidden = x.size(-1);
  TORCH_CHECK(gamma_in.numel() == hidden && beta_in.numel() == hidden, "cann_bench::layer_norm: gamma and beta ",
              "must have the last dimension of x (", hidden, ") elements, got ", gamma_in.numel(), " and ",
              beta_in.numel());
  const std::vector<float> gamma = float_vector(gamma_in, "layer_norm");
  const std::vector<float> beta = float_vector(beta_in, "layer_norm");
  Tensor y = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return y;
  const int64_t rows = x.numel() / hidden;
  visit_float32(x.scalar_type(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    layer_norm_rows(x.data_ptr<T>(), gamma.data(), beta.data(), y.data_ptr<T>(), rows, hidden, epsilon);
  });
  return y;
}

}  // namespace

// Element-wise operators: softplus, leaky_relu, gelu, silu, clamp.
//
// softplus and leaky_relu compute in double (one rounding to the output dtype); gelu and silu compute in
// float over chunks that the compiler vectorises (exp_f and the erfc fit below are branch-free); clamp
// only compares and keeps x's dtype, integers included.
#pragma once

#include "common.h"

namespace {

// y[i] = fn(x[i]) over all elements, computed in double.
template <typename T, typename Fn>
void map_elements(const T* in, T* out, int64_t count, const Fn& fn) {
  at::parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = store<T>(fn(load(in[i])));
  });
}

// ---- softplus -------------------------------------------------------------------------------------

Tensor softplus(const Tensor& x_in, double beta, double threshold) {
  check_input(x_in, "softplus", "x");
  const Tensor x = x_in.contiguous();
  Tensor y = at::empty(x.sizes(), x.options());
  visit_float(x.scalar_type(), "softplus", [&](auto tag) {
    using T = decltype(tag);
    map_elements(x.data_ptr<T>(), y.data_ptr<T>(), x.numel(), [=](double v) {
      const double z = v * beta;
      if (z > threshold) return v;  // linear tail (also +inf)
      // log(1 + e^z) = max(z, 0) + log1p(e^-|z|): no overflow; NaN stays NaN through the log1p term
      const double positive = z > 0.0 ? z : 0.0;
      return (positive + std::log1p(std::exp(-std::fabs(z)))) / beta;
    });
  });
  return y;
}

// ---- leaky_relu -----------------------------------------------------------------------------------

Tensor leaky_relu(const Tensor& x_in, double negative_slope) {
  check_input(x_in, "leaky_relu", "x");
  const Tensor x = x_in.contiguous();
  Tensor y = at::empty(x.sizes(), x.options());
  visit_float(x.scalar_type(), "leaky_relu", [&](auto tag) {
    using T = decltype(tag);
    // NaN fails the comparison and becomes NaN * slope = NaN
    map_elements(x.data_ptr<T>(), y.data_ptr<T>(), x.numel(),
                 [=](double v) { return v >= 0.0 ? v : v * negative_slope; });
  });
  return y;
}

// ---- gelu -----------------------------------------------------------------------------------------

// erfc(z) for z >= 0 from the Chebyshev fit in Numerical Recipes (erfcc): relative error below 1.2e-7 over
// the whole range, so the far negative tail of gelu keeps its relative precision (1 + erf(x) would cancel).
inline float erfc_nonneg(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * exp_f(p - z * z);
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// gelu(x) = x * Phi(x) = 0.5 * x * erfc(-x / sqrt 2). At -inf the product is -inf * 0; the operator's
// limit there is 0 (and +inf at +inf, which the formula gives).
inline void gelu_erf_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float e = erfc_nonneg(std::fabs(v) * 0.70710678118654752f);
    const float erfc_w = v <= 0.0f ? e : 2.0f - e;
    y[i] = v == kNegInf ? 0.0f : 0.5f * v * erfc_w;
  }
}

// 0.5 * x * (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) * (x + 0.044715 x^3): no cancellation for x < 0.
// -inf gives its limit 0.
inline void gelu_tanh_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u2 = 1.5957691216057308f * (v + 0.044715f * v * v * v);  // 2u
    y[i] = v == kNegInf ? 0.0f : v / (1.0f + exp_f(-u2));
  }
}

Tensor gelu(const Tensor& x_in, c10::string_view approximate) {
  check_input(x_in, "gelu", "x");
  const bool tanh_form = approximate == "tanh";
  TORCH_CHECK(tanh_form || approximate == "none", "cann_bench::gelu: approximate must be 'none' or 'tanh', got '",
              approximate, "'");
  const Tensor x = x_in.contiguous();
  Tensor y = at::empty(x.sizes(), x.options());
  visit_float32(x.scalar_type(), "gelu", [&](auto tag) {
    using T = decltype(tag);
    if (tanh_form) {
      map_float(x.data_ptr<T>(), y.data_ptr<T>(), x.numel(), gelu_tanh_kernel);
    } else {
      map_float(x.data_ptr<T>(), y.data_ptr<T>(), x.numel(), gelu_erf_kernel);
    }
  });
  return y;
}

// ---- silu -----------------------------------------------------------------------------------------

// x * sigmoid(x) = x / (1 + e^-x); +inf gives +inf, and -inf its limit 0 (the quotient would be NaN).
inline void silu_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] == kNegInf ? 0.0f : x[i] / (1.0f + exp_f(-x[i]));
}

Tensor silu(const Tensor& x_in) {
  check_input(x_in, "silu", "x");
  const Tensor x = x_in.contiguous();
  Tensor y = at::empty(x.sizes(), x.options());
  visit_float32(x.scalar_type(), "silu", [&](auto tag) {
    using T = decltype(tag);
    map_float(x.data_ptr<T>(), y.data_ptr<T>(), x.numel(), silu_kernel);
  });
  return y;
}

// ---- clamp ----------------------------------------------------------------------------------------

// min(max(x, lo), hi) written so that NaN fails both comparisons and passes through, and lo > hi gives hi
// everywhere (torch's rule).
template <typename T>
void clamp_values(const T* x, T* y, int64_t count, T lo, T hi) {
  at::parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      T v = x[i] < lo ? lo : x[i];
      y[i] = v > hi ? hi : v;
    }
  });
}

// Integer bounds: the whole numbers inside [min_val, max_val], limited to the dtype's range.
template <typename I>
I int_bound(double v, bool lower) {
  const double w = lower ? std::ceil(v) : std::floor(v);
  const double lo = static_cast<double>(std::numeric_limits<I>::min());
  const double hi = static_cast<double>(std::numeric_limits<I>::max());
  return static_cast<I>(std::min(std::max(w, lo), hi));
}

Tensor clamp(const Tensor& x_in, double min_val, double max_val) {
  check_input(x_in, "clamp", "x");
  const Tensor x = x_in.contiguous();
  Tensor y = at::empty(x.sizes(), x.options());
  const int64_t count = x.numel();
  switch (x.scalar_type()) {
    case ScalarType::Int:
      clamp_values(x.data_ptr<int32_t>(), y.data_ptr<int32_t>(), count, int_bound<int32_t>(min_val, true),
                   int_bound<int32_t>(max_val, false));
      break;
    case ScalarType::Char:
      clamp_values(x.data_ptr<int8_t>(), y.data_ptr<int8_t>(), count, int_bound<int8_t>(min_val, true),
                   int_bound<int8_t>(max_val, false));
      break;
    case ScalarType::Long:
      clamp_values(x.data_ptr<int64_t>(), y.data_ptr<int64_t>(), count, int_bound<int64_t>(min_val, true),
                   int_bound<int64_t>(max_val, false));
      break;
    case ScalarType::Float:
      clamp_values(x.data_ptr<float>(), y.data_ptr<float>(), count, static_cast<float>(min_val),
                   static_cast<float>(max_val));
      break;
    case ScalarType::Double:
      clamp_values(x.data_ptr<double>(), y.data_ptr<double>(), count, min_val, max_val);
      break;
    default:
      visit_float32(x.scalar_type(), "clamp", [&](auto tag) {
        using T = decltype(tag);
        const float lo = static_cast<float>(min_val), hi = static_cast<float>(max_val);
        map_float(x.data_ptr<T>(), y.data_ptr<T>(), count, [=](const float* in, float* out, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            const float v = in[i] < lo ? lo : in[i];
            out[i] = v > hi ? hi : v;
          }
        });
      });
  }
  return y;
}

}  // namespace

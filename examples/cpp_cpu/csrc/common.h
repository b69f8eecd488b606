// Shared pieces of the kernels: dtype dispatch, argument checks, the [outer, n, inner] view, chunked
// float16/bfloat16 <-> float conversion and a vectorisable float exp.
//
// Every header in csrc/ is included by ops.cpp alone (one translation unit: the torch headers are parsed
// once, which is most of the build time), so helpers here live in an anonymous namespace.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

using at::Tensor;
using c10::ScalarType;

constexpr int64_t kGrain = 32768;  // elements per thread chunk, below which splitting does not pay
constexpr int64_t kChunk = 1024;   // elements converted to float at a time (two stack buffers stay in L1)

template <typename T>
constexpr bool kReduced = std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>;

// ---- scalar conversions (the double-precision kernels) -------------------------------------------

// Half and BFloat16 convert through float; the result is exact (float holds both).
template <typename T>
inline double load(T v) {
  return static_cast<double>(static_cast<float>(v));
}
template <>
inline double load<double>(double v) {
  return v;
}

// double -> float -> dtype, the same path torch's own copy kernels take for a float64 -> float16 cast.
template <typename T>
inline T store(double v) {
  return static_cast<T>(static_cast<float>(v));
}
template <>
inline double store<double>(double v) {
  return v;
}

// ---- dtype dispatch ----------------------------------------------------------------------------------

// Calls f(T{}) with T the C++ type of a floating dtype.
template <typename F>
void visit_float(ScalarType t, const char* op, const F& f) {
  switch (t) {
    case ScalarType::Float:
      f(float{});
      break;
    case ScalarType::Half:
      f(c10::Half{});
      break;
    case ScalarType::BFloat16:
      f(c10::BFloat16{});
      break;
    case ScalarType::Double:
      f(double{});
      break;
    default:
      TORCH_CHECK(false, "cann_bench::", op, ": unsupported dtype ", t,
                  " (expected float16, bfloat16, float32 or float64)");
  }
}

// The three dtypes the float32-compute kernels take (float64 would lose precision through them).
template <typename F>
void visit_float32(ScalarType t, const char* op, const F& f) {
  switch (t) {
    case ScalarType::Float:
      f(float{});
      break;
    case ScalarType::Half:
      f(c10::Half{});
      break;
    case ScalarType::BFloat16:
      f(c10::BFloat16{});
      break;
    default:
      TORCH_CHECK(false, "cann_bench::", op, ": unsupported dtype ", t, " (expected float16, bfloat16 or float32)");
  }
}

// Calls f(T{}) for the integer dtypes; any other dtype goes to otherwise().
template <typename F, typename Otherwise>
void visit_integer_or(ScalarType t, const F& f, const Otherwise& otherwise) {
  switch (t) {
    case ScalarType::Int:
      f(int32_t{});
      break;
    case ScalarType::Long:
      f(int64_t{});
      break;
    case ScalarType::Short:
      f(int16_t{});
      break;
    case ScalarType::Char:
      f(int8_t{});
      break;
    case ScalarType::Byte:
      f(uint8_t{});
      break;
    default:
      otherwise();
  }
}

// Floating dtypes plus the integer ones top-k can rank.
template <typename F>
void visit_sortable(ScalarType t, const char* op, const F& f) {
  visit_integer_or(t, f, [&] { visit_float(t, op, f); });
}

// ---- argument checks and shapes -------------------------------------------------------------------

void check_input(const Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.defined(), "cann_bench::", op, ": ", name, " is undefined");
  TORCH_CHECK(t.device().is_cpu(), "cann_bench::", op, ": ", name, " must be a CPU tensor, got ", t.device());
  TORCH_CHECK(t.layout() == c10::kStrided, "cann_bench::", op, ": ", name, " must be a strided tensor");
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor has the one dimension 0 / -1
  TORCH_CHECK(dim >= -n && dim < n, "cann_bench::", op, ": dim ", dim, " out of range for a ", ndim, "-d tensor");
  return dim < 0 ? dim + n : dim;
}

// A tensor viewed as [outer, n, inner] around dimension dim.
struct Split {
  int64_t outer = 1, n = 1, inner = 1;
};

Split split_at(const Tensor& x, int64_t dim) {
  Split s;
  if (x.dim() == 0) return s;
  for (int64_t d = 0; d < dim; ++d) s.outer *= x.size(d);
  s.n = x.size(dim);
  for (int64_t d = dim + 1; d < x.dim(); ++d) s.inner *= x.size(d);
  return s;
}

// Rows of `width` elements per parallel_for task so that one task holds about kGrain elements.
inline int64_t row_grain(int64_t width) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(width, 1));
}

// ---- chunked conversion to and from float ---------------------------------------------------------
// Plain loops the compiler vectorises (bfloat16 is bit shifting); float16 uses the F16C conversion
// instructions where the target has them. Both round to nearest even, as torch's casts do.

inline void to_float(const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

inline void to_float(const c10::BFloat16* src, float* dst, int64_t n) {
  const auto* s = reinterpret_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(s[i]) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    dst[i] = f;
  }
}

inline void to_float(const c10::Half* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  const auto* s = reinterpret_cast<const uint16_t*>(src);
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  }
#endif
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

inline void from_float(const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

inline void from_float(const float* src, c10::BFloat16* dst, int64_t n) {
  auto* d = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &src[i], sizeof(bits));
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;  // round to nearest even
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    d[i] = static_cast<uint16_t>(nan ? ((bits >> 16) | 0x40u) : rounded);  // quiet NaN keeps its sign
  }
}

inline void from_float(const float* src, c10::Half* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  auto* d = reinterpret_cast<uint16_t*>(dst);
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
  }
#endif
  for (; i < n; ++i) dst[i] = static_cast<c10::Half>(src[i]);
}

// ---- vectorisable float exp ------------------------------------------------------------------------

// exp(x) = 2^n * e^r with n = round(x / ln 2) and |r| <= ln2 / 2; e^r from a degree-6 polynomial (the
// Cephes expf coefficients), about 1 ulp. Branch-free so loops over it vectorise. Results below 2^-125
// flush to 0 (true values under 3e-38), above the float range give +inf; NaN stays NaN.
inline float exp_f(float x) {
  constexpr float kHi = 88.72283f, kLo = -86.5f;
  float xc = x > kHi ? kHi : x;
  xc = xc < kLo ? kLo : xc;
  xc = xc == xc ? xc : 0.0f;  // NaN: compute anything finite, replaced below
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 126) << 23;  // 2^(n-1): n = 128 stays finite
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  float y = er * scale * 2.0f;
  y = x < kLo ? 0.0f : y;
  y = x > kHi ? std::numeric_limits<float>::infinity() : y;
  return x == x ? y : x;
}

// ---- float sums with double totals ----------------------------------------------------------------

// Sum of term(p[i]) over n floats: vectorised float accumulators over kChunk-long blocks, the block sums
// added in double, so a long row keeps about float precision relative to its magnitude.
template <typename Term>
inline double blocked_sum(const float* p, int64_t n, const Term& term) {
  double total = 0.0;
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t k = 0; k < m; ++k) s += term(p[i + k]);
    total += s;
  }
  return total;
}

inline double sum_floats(const float* p, int64_t n) {
  return blocked_sum(p, n, [](float v) { return v; });
}

// Sum of p[i] - center. With center = p[0] the differences are exact when the values share a large offset
// (|p| >> spread), which a plain float sum would round away.
inline double sum_dev(const float* p, int64_t n, float center) {
  return blocked_sum(p, n, [center](float v) { return v - center; });
}

// Sum of (p[i] - center)^2.
inline double sum_sq_dev(const float* p, int64_t n, float center) {
  return blocked_sum(p, n, [center](float v) {
    const float d = v - center;
    return d * d;
  });
}

// Applies kernel(const float* in, float* out, int64_t count) to all elements, in parallel chunks;
// float16/bfloat16 go through float buffers, float32 is processed in place of the buffers.
template <typename T, typename Kernel>
void map_float(const T* in, T* out, int64_t count, const Kernel& kernel) {
  at::parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      kernel(in + begin, out + begin, end - begin);
    } else {
      alignas(64) float a[kChunk];
      alignas(64) float b[kChunk];
      for (int64_t i = begin; i < end; i += kChunk) {
        const int64_t m = std::min(kChunk, end - i);
        to_float(in + i, a, m);
        kernel(a, b, m);
        from_float(b, out + i, m);
      }
    }
  });
}

}  // namespace

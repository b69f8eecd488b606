// CPU kernels for five of the bundled CANN Bench tasks, registered as torch.ops.cann_bench.*.
//
// Every kernel is a plain loop over raw data pointers: ATen is used only to allocate outputs, to make
// inputs contiguous and to split loops across threads (at::parallel_for). Values are read as double,
// computed in double and rounded once to the output dtype, so float16/bfloat16 results are as close to
// the fp64 truth as their dtype allows. Reductions accumulate in double.
//
// Schemas name their arguments exactly like the task goldens: the grader calls with keyword arguments.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

using at::Tensor;
using c10::ScalarType;

constexpr int64_t kGrain = 32768;  // elements per thread chunk, below which splitting does not pay

// ---- scalar conversions -------------------------------------------------------------------------

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

// Floating dtypes plus the integer ones top-k can rank.
template <typename F>
void visit_sortable(ScalarType t, const char* op, const F& f) {
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
      visit_float(t, op, f);
  }
}

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

// ---- rms_scale ------------------------------------------------------------------------------------

template <typename T, typename O>
void rms_scale_rows(const T* x, const double* gamma, O* y, int64_t rows, int64_t hidden, double epsilon) {
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(hidden, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
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

// ---- log_softmax ----------------------------------------------------------------------------------

// One [outer, n, inner] slab at a time, `width` neighbouring inner positions together so that the
// loads walk memory in order whichever dimension is reduced. Three passes: max, sum of exp, output.
template <typename T>
void log_softmax_kernel(const T* x, T* y, const Split& s) {
  const int64_t width = std::min<int64_t>(s.inner, 256);
  const int64_t blocks = (s.inner + width - 1) / width;
  const int64_t tasks = s.outer * blocks;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(s.n * width, 1));
  at::parallel_for(0, tasks, grain, [&](int64_t begin, int64_t end) {
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

// ---- row_top_k ------------------------------------------------------------------------------------

// The ranking key: float for Half/BFloat16 (exact), the type itself otherwise.
template <typename T>
using Key = std::conditional_t<std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>, float, T>;

template <typename K>
struct Entry {
  K key;
  int64_t index;
};

// Descending, NaN above everything (torch.topk's order); ties by position so the order is total.
template <typename K>
inline bool ranks_before(const Entry<K>& a, const Entry<K>& b) {
  if constexpr (std::is_floating_point_v<K>) {
    const bool a_nan = std::isnan(a.key), b_nan = std::isnan(b.key);
    if (a_nan != b_nan) return a_nan;
    if (!a_nan && a.key != b.key) return a.key > b.key;
  } else {
    if (a.key != b.key) return a.key > b.key;
  }
  return a.index < b.index;
}

template <typename T>
void top_k_kernel(const T* x, T* values, int64_t* indices, const Split& s, int64_t k) {
  using K = Key<T>;
  const int64_t lines = s.outer * s.inner;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(s.n, 1));
  at::parallel_for(0, lines, grain, [&](int64_t begin, int64_t end) {
    std::vector<Entry<K>> entries(static_cast<size_t>(s.n));
    for (int64_t line = begin; line < end; ++line) {
      const int64_t o = line / s.inner;
      const int64_t i = line % s.inner;
      const T* src = x + o * s.n * s.inner + i;
      for (int64_t j = 0; j < s.n; ++j) entries[j] = Entry<K>{static_cast<K>(src[j * s.inner]), j};
      const auto cmp = [](const Entry<K>& a, const Entry<K>& b) { return ranks_before(a, b); };
      if (k * 4 < s.n) {
        std::partial_sort(entries.begin(), entries.begin() + k, entries.end(), cmp);
      } else {
        std::sort(entries.begin(), entries.end(), cmp);
      }
      T* v_out = values + o * k * s.inner + i;
      int64_t* i_out = indices + o * k * s.inner + i;
      for (int64_t r = 0; r < k; ++r) {
        v_out[r * s.inner] = src[entries[r].index * s.inner];  // the input element itself, bit for bit
        i_out[r * s.inner] = entries[r].index;
      }
    }
  });
}

std::tuple<Tensor, Tensor> row_top_k(const Tensor& x_in, int64_t k, int64_t dim) {
  check_input(x_in, "row_top_k", "x");
  const Tensor x = x_in.contiguous();
  const int64_t d = wrap_dim(dim, x.dim(), "row_top_k");
  const Split s = split_at(x, d);
  TORCH_CHECK(k >= 0 && k <= s.n, "cann_bench::row_top_k: k = ", k, " is outside [0, ", s.n, "] (size of dim ", d,
              ")");
  std::vector<int64_t> out_sizes(x.sizes().begin(), x.sizes().end());
  if (x.dim() > 0) out_sizes[d] = k;
  Tensor values = at::empty(out_sizes, x.options());
  Tensor indices = at::empty(out_sizes, x.options().dtype(at::kLong));
  if (values.numel() == 0) return std::make_tuple(values, indices);
  visit_sortable(x.scalar_type(), "row_top_k", [&](auto tag) {
    using T = decltype(tag);
    top_k_kernel(x.data_ptr<T>(), values.data_ptr<T>(), indices.data_ptr<int64_t>(), s, k);
  });
  return std::make_tuple(values, indices);
}

}  // namespace

TORCH_LIBRARY(cann_bench, m) {
  m.def("softplus(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor");
  m.def("leaky_relu(Tensor x, float negative_slope=0.01) -> Tensor");
  m.def("rms_scale(Tensor x, Tensor gamma, float epsilon=1e-06) -> Tensor");
  m.def("log_softmax(Tensor x, int dim=-1) -> Tensor");
  m.def("row_top_k(Tensor x, int k, int dim=-1) -> (Tensor values, Tensor indices)");
}

TORCH_LIBRARY_IMPL(cann_bench, CPU, m) {
  m.impl("softplus", &softplus);
  m.impl("leaky_relu", &leaky_relu);
  m.impl("rms_scale", &rms_scale);
  m.impl("log_softmax", &log_softmax);
  m.impl("row_top_k", &row_top_k);
}

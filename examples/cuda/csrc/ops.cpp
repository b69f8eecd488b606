// CUDA kernels for twelve of the bundled CANN Bench tasks, registered as torch.ops.cann_bench.*.
//
// This file is the torch side: argument checks, contiguous inputs, output allocation, the launch on the current
// stream of the input's device, and the registration. The kernels live in the .cu files behind launch.h. ATen is
// used only to allocate outputs (at::empty) and to make inputs contiguous: every value is computed by the
// kernels.
//
// Schemas name their arguments exactly like the task goldens: the grader calls with keyword arguments.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "launch.h"

namespace {

using at::Tensor;
using c10::ScalarType;
using cann_cuda::DType;

// ---- checks and helpers -----------------------------------------------------------------------------------------

void check_input(const Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.defined(), "cann_bench::", op, ": ", name, " is undefined");
  TORCH_CHECK(t.is_cuda(), "cann_bench::", op, ": ", name, " must be a CUDA tensor, got ", t.device());
  TORCH_CHECK(t.layout() == c10::kStrided, "cann_bench::", op, ": ", name, " must be a strided tensor");
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  TORCH_CHECK(a.device() == b.device(), "cann_bench::", op, ": inputs are on different devices (", a.device(),
              " and ", b.device(), ")");
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "cann_bench::", op, ": inputs have different dtypes (",
              a.scalar_type(), " and ", b.scalar_type(), ")");
}

// float16, bfloat16 and float32: the dtypes every floating kernel takes.
DType float_dtype(const Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case ScalarType::Float:
      return DType::Float32;
    case ScalarType::Half:
      return DType::Float16;
    case ScalarType::BFloat16:
      return DType::BFloat16;
    default:
      break;
  }
  TORCH_CHECK(false, "cann_bench::", op, ": unsupported dtype ", t.scalar_type(),
              " (expected float16, bfloat16 or float32)");
  return DType::Float32;  // not reached
}

cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

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

// The common shape of the one-input element-wise operators: y = f(x), same shape and dtype.
template <typename Launch>
Tensor unary(const Tensor& x_in, const char* op, const Launch& launch) {
  check_input(x_in, op, "x");
  const DType dt = float_dtype(x_in, op);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Tensor x = x_in.contiguous();
  Tensor y = at::empty(x.sizes(), x.options());
  if (x.numel() > 0) {
    launch(dt, x.const_data_ptr(), y.mutable_data_ptr(), x.numel(), current_stream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}

// ---- level 1 ----------------------------------------------------------------------------------------------------

Tensor softplus(const Tensor& x, double beta, double threshold) {
  return unary(x, "softplus", [&](DType dt, const void* in, void* out, int64_t n, cudaStream_t s) {
    cann_cuda::launch_softplus(dt, in, out, n, beta, threshold, s);
  });
}

Tensor gelu(const Tensor& x, c10::string_view approximate) {
  const bool tanh_form = approximate == "tanh";
  TORCH_CHECK(tanh_form || approximate == "none", "cann_bench::gelu: approximate must be 'none' or 'tanh', got '",
              approximate, "'");
  return unary(x, "gelu", [&](DType dt, const void* in, void* out, int64_t n, cudaStream_t s) {
    cann_cuda::launch_gelu(dt, in, out, n, tanh_form, s);
  });
}

Tensor silu(const Tensor& x) {
  return unary(x, "silu", [](DType dt, const void* in, void* out, int64_t n, cudaStream_t s) {
    cann_cuda::launch_silu(dt, in, out, n, s);
  });
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return unary(x, "leaky_relu", [&](DType dt, const void* in, void* out, int64_t n, cudaStream_t s) {
    cann_cuda::launch_leaky_relu(dt, in, out, n, negative_slope, s);
  });
}

Tensor elu(const Tensor& x, double alpha) {
  return unary(x, "elu", [&](DType dt, const void* in, void* out, int64_t n, cudaStream_t s) {
    cann_cuda::launch_elu(dt, in, out, n, alpha, s);
  });
}

Tensor hardswish(const Tensor& x) {
  return unary(x, "hardswish", [](DType dt, const void* in, void* out, int64_t n, cudaStream_t s) {
    cann_cuda::launch_hardswish(dt, in, out, n, s);
  });
}

// Integer bounds: the whole numbers inside [min_val, max_val], limited to the dtype's range.
template <typename I>
int64_t int_bound(double v, bool lower) {
  const double w = lower ? std::ceil(v) : std::floor(v);
  const double lo = static_cast<double>(std::numeric_limits<I>::min());
  const double hi = static_cast<double>(std::numeric_limits<I>::max());
  return static_cast<int64_t>(std::min(std::max(w, lo), hi));
}

// Keeps x's dtype, int32 and int8 included.
Tensor clamp(const Tensor& x_in, double min_val, double max_val) {
  check_input(x_in, "clamp", "x");
  const ScalarType st = x_in.scalar_type();
  const bool is_int = st == ScalarType::Int || st == ScalarType::Char;
  TORCH_CHECK(is_int || st == ScalarType::Float || st == ScalarType::Half || st == ScalarType::BFloat16,
              "cann_bench::clamp: unsupported dtype ", st, " (expected float16, bfloat16, float32, int32 or int8)");
  const DType dt = st == ScalarType::Int ? DType::Int32 : st == ScalarType::Char ? DType::Int8
                                                                               : float_dtype(x_in, "clamp");
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Tensor x = x_in.contiguous();
  Tensor y = at::empty(x.sizes(), x.options());
  const int64_t n = x.numel();
  if (n > 0) {
    if (is_int) {
      const bool i32 = dt == DType::Int32;
      const int64_t lo = i32 ? int_bound<int32_t>(min_val, true) : int_bound<int8_t>(min_val, true);
      const int64_t hi = i32 ? int_bound<int32_t>(max_val, false) : int_bound<int8_t>(max_val, false);
      cann_cuda::launch_clamp_int(dt, x.const_data_ptr(), y.mutable_data_ptr(), n, lo, hi, current_stream());
    } else {
      cann_cuda::launch_clamp_float(dt, x.const_data_ptr(), y.mutable_data_ptr(), n, min_val, max_val,
                                    current_stream());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}

// z = alpha * x + beta * y, y broadcast along its size-1 dimensions; z has x's shape and dtype.
Tensor axpby(const Tensor& x_in, const Tensor& y_in, double alpha, double beta) {
  check_input(x_in, "axpby", "x");
  check_input(y_in, "axpby", "y");
  check_same_device(x_in, y_in, "axpby");
  check_same_dtype(x_in, y_in, "axpby");
  const DType dt = float_dtype(x_in, "axpby");
  const int64_t ndim = x_in.dim();
  TORCH_CHECK(y_in.dim() == ndim, "cann_bench::axpby: y must have x's rank, got ", y_in.sizes(), " for x ",
              x_in.sizes());
  TORCH_CHECK(ndim <= cann_cuda::kMaxDims, "cann_bench::axpby: at most ", cann_cuda::kMaxDims, " dimensions");
  for (int64_t d = 0; d < ndim; ++d) {
    TORCH_CHECK(y_in.size(d) == x_in.size(d) || y_in.size(d) == 1, "cann_bench::axpby: y ", y_in.sizes(),
                " does not broadcast to x ", x_in.sizes());
  }
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Tensor x = x_in.contiguous();
  const Tensor y = y_in.contiguous();
  Tensor z = at::empty(x.sizes(), x.options());
  if (x.numel() > 0) {
    const std::vector<int64_t> x_sizes(x.sizes().begin(), x.sizes().end());
    const std::vector<int64_t> y_sizes(y.sizes().begin(), y.sizes().end());
    cann_cuda::launch_axpby(dt, x.const_data_ptr(), y.const_data_ptr(), z.mutable_data_ptr(),
                            static_cast<int>(ndim), x_sizes.data(), y_sizes.data(), alpha, beta, current_stream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return z;
}

// ---- level 2 ----------------------------------------------------------------------------------------------------

// y = x / sqrt(mean(x^2, last dim) + epsilon) * gamma.
Tensor rms_scale(const Tensor& x_in, const Tensor& gamma_in, double epsilon) {
  check_input(x_in, "rms_scale", "x");
  check_input(gamma_in, "rms_scale", "gamma");
  check_same_device(x_in, gamma_in, "rms_scale");
  check_same_dtype(x_in, gamma_in, "rms_scale");
  const DType dt = float_dtype(x_in, "rms_scale");
  TORCH_CHECK(x_in.dim() >= 1, "cann_bench::rms_scale: x must have at least one dimension");
  const int64_t h = x_in.size(-1);
  TORCH_CHECK(gamma_in.dim() == 1 && gamma_in.size(0) == h, "cann_bench::rms_scale: gamma must have shape (", h,
              ",), got ", gamma_in.sizes());
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Tensor x = x_in.contiguous();
  const Tensor gamma = gamma_in.contiguous();
  Tensor y = at::empty(x.sizes(), x.options());
  if (x.numel() > 0) {
    cann_cuda::launch_rms_scale(dt, x.const_data_ptr(), gamma.const_data_ptr(), y.mutable_data_ptr(),
                                x.numel() / h, h, epsilon, current_stream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}

Tensor log_softmax(const Tensor& x_in, int64_t dim) {
  check_input(x_in, "log_softmax", "x");
  const DType dt = float_dtype(x_in, "log_softmax");
  const int64_t d = wrap_dim(dim, x_in.dim(), "log_softmax");
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Tensor x = x_in.contiguous();
  Tensor y = at::empty(x.sizes(), x.options());
  if (x.numel() > 0) {
    const Split s = split_at(x, d);
    cann_cuda::launch_log_softmax(dt, x.const_data_ptr(), y.mutable_data_ptr(), s.outer, s.n, s.inner,
                                  current_stream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}

// Sum along dim; float16/bfloat16/float32 keep their dtype, int32 sums exactly into int64.
Tensor reduce_sum(const Tensor& x_in, int64_t dim, bool keepdim) {
  check_input(x_in, "reduce_sum", "x");
  const ScalarType st = x_in.scalar_type();
  const bool is_int = st == ScalarType::Int;
  TORCH_CHECK(is_int || st == ScalarType::Float || st == ScalarType::Half || st == ScalarType::BFloat16,
              "cann_bench::reduce_sum: unsupported dtype ", st, " (expected float16, bfloat16, float32 or int32)");
  const DType dt = is_int ? DType::Int32 : float_dtype(x_in, "reduce_sum");
  const int64_t d = wrap_dim(dim, x_in.dim(), "reduce_sum");
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Tensor x = x_in.contiguous();
  std::vector<int64_t> out_sizes;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i != d) {
      out_sizes.push_back(x.size(i));
    } else if (keepdim) {
      out_sizes.push_back(1);
    }
  }
  Tensor y = at::empty(out_sizes, x.options().dtype(is_int ? ScalarType::Long : st));
  const Split s = split_at(x, d);
  if (y.numel() > 0) {
    // n == 0 leaves every sum at zero, which the kernels write as well
    cann_cuda::launch_reduce_sum(dt, x.const_data_ptr(), y.mutable_data_ptr(), s.outer, s.n, s.inner,
                                 current_stream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}

// ---- level 3 ----------------------------------------------------------------------------------------------------

// c[i] = a[i] @ b[i] for a (B, M, K) and b (B, K, N); float accumulation, c in a's dtype.
Tensor batch_matmul(const Tensor& a_in, const Tensor& b_in) {
  check_input(a_in, "batch_matmul", "a");
  check_input(b_in, "batch_matmul", "b");
  check_same_device(a_in, b_in, "batch_matmul");
  check_same_dtype(a_in, b_in, "batch_matmul");
  const DType dt = float_dtype(a_in, "batch_matmul");
  TORCH_CHECK(a_in.dim() == 3 && b_in.dim() == 3, "cann_bench::batch_matmul: a and b must be 3-D, got ",
              a_in.sizes(), " and ", b_in.sizes());
  const int64_t batch = a_in.size(0), m = a_in.size(1), k = a_in.size(2), n = b_in.size(2);
  TORCH_CHECK(b_in.size(0) == batch && b_in.size(1) == k, "cann_bench::batch_matmul: shapes ", a_in.sizes(),
              " and ", b_in.sizes(), " do not multiply");
  TORCH_CHECK((m + 63) / 64 <= 65535, "cann_bench::batch_matmul: m = ", m, " is too large");
  const c10::cuda::CUDAGuard guard(a_in.device());
  const Tensor a = a_in.contiguous();
  const Tensor b = b_in.contiguous();
  Tensor c = at::empty({batch, m, n}, a.options());
  if (c.numel() > 0) {
    // k == 0 gives zeros: the kernel's sums start at zero
    cann_cuda::launch_batch_matmul(dt, a.const_data_ptr(), b.const_data_ptr(), c.mutable_data_ptr(), batch, m, k, n,
                                   current_stream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return c;
}

}  // namespace

TORCH_LIBRARY(cann_bench, m) {
  m.def("softplus(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor");
  m.def("gelu(Tensor x, str approximate=\"none\") -> Tensor");
  m.def("silu(Tensor x) -> Tensor");
  m.def("leaky_relu(Tensor x, float negative_slope=0.01) -> Tensor");
  m.def("clamp(Tensor x, float min_val=-1.0, float max_val=1.0) -> Tensor");
  m.def("axpby(Tensor x, Tensor y, float alpha=1.0, float beta=1.0) -> Tensor");
  m.def("elu(Tensor x, float alpha=1.0) -> Tensor");
  m.def("hardswish(Tensor x) -> Tensor");
  m.def("rms_scale(Tensor x, Tensor gamma, float epsilon=1e-06) -> Tensor");
  m.def("log_softmax(Tensor x, int dim=-1) -> Tensor");
  m.def("reduce_sum(Tensor x, int dim=-1, bool keepdim=False) -> Tensor");
  m.def("batch_matmul(Tensor a, Tensor b) -> Tensor");
}

TORCH_LIBRARY_IMPL(cann_bench, CUDA, m) {
  m.impl("softplus", &softplus);
  m.impl("gelu", &gelu);
  m.impl("silu", &silu);
  m.impl("leaky_relu", &leaky_relu);
  m.impl("clamp", &clamp);
  m.impl("axpby", &axpby);
  m.impl("elu", &elu);
  m.impl("hardswish", &hardswish);
  m.impl("rms_scale", &rms_scale);
  m.impl("log_softmax", &log_softmax);
  m.impl("reduce_sum", &reduce_sum);
  m.impl("batch_matmul", &batch_matmul);
}

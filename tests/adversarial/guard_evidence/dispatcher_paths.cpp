// Every way C++ can reach ATen's softplus kernel through the dispatcher, one op each, and (built with
// -DSLEEF_ONLY) a softplus of its own loops that calls torch's bundled Sleef for exp. In block mode the
// dispatcher paths meet the guard's refusing kernels (guard/forbid.py); the symbol scan refuses the
// dispatcher lookups and Sleef before anything runs (guard/torch_imports.py).
#include <torch/library.h>

#ifndef SLEEF_ONLY
#include <ATen/Functions.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/softplus_ops.h>

using at::Tensor;

static const c10::OperatorHandle& softplus_handle() {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::softplus", "");
  return op;
}

// at::softplus: the generated C++ API
static Tensor via_function(const Tensor& x, double beta, double threshold) { return at::softplus(x, beta, threshold); }

// at::_ops::softplus::call: the operator's own entry point
static Tensor via_ops(const Tensor& x, double beta, double threshold) {
  return at::_ops::softplus::call(x, beta, threshold);
}

// findSchema + a typed call
static Tensor via_typed_call(const Tensor& x, double beta, double threshold) {
  static auto op = softplus_handle().typed<Tensor(const Tensor&, const c10::Scalar&, const c10::Scalar&)>();
  return op.call(x, beta, threshold);
}

// findSchema + callBoxed on a stack of IValues (what a generic caller does)
static Tensor via_boxed(const Tensor& x, double beta, double threshold) {
  torch::jit::Stack stack{x, c10::Scalar(beta), c10::Scalar(threshold)};
  softplus_handle().callBoxed(&stack);
  return stack.back().toTensor();
}

// redispatch on an explicit CPU key set: below RecordFunction, straight to the CPU kernel's slot
static Tensor via_redispatch(const Tensor& x, double beta, double threshold) {
  static auto op = softplus_handle().typed<Tensor(const Tensor&, const c10::Scalar&, const c10::Scalar&)>();
  return op.redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), x, beta, threshold);
}

TORCH_LIBRARY(cann_bench, m) {
  m.def("softplus_function(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor");
  m.def("softplus_ops(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor");
  m.def("softplus_typed(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor");
  m.def("softplus_boxed(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor");
  m.def("softplus_redispatch(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor");
}

TORCH_LIBRARY_IMPL(cann_bench, CPU, m) {
  m.impl("softplus_function", &via_function);
  m.impl("softplus_ops", &via_ops);
  m.impl("softplus_typed", &via_typed_call);
  m.impl("softplus_boxed", &via_boxed);
  m.impl("softplus_redispatch", &via_redispatch);
}

#else
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cmath>

typedef float v8sf __attribute__((vector_size(32)));
extern "C" v8sf Sleef_expf8_u10(v8sf);  // exported by libtorch_cpu

// softplus in float32 with the loops its own, exp from torch's Sleef (8 lanes at a time)
__attribute__((target("avx2,fma"))) static void softplus_rows(const float* in, float* out, int64_t n, float beta,
                                                             float threshold) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8sf z, e;
    for (int k = 0; k < 8; ++k) z[k] = -std::fabs(in[i + k] * beta);
    e = Sleef_expf8_u10(z);
    for (int k = 0; k < 8; ++k) {
      const float v = in[i + k] * beta;
      out[i + k] = v > threshold ? in[i + k] : ((v > 0 ? v : 0.f) + std::log1p(e[k])) / beta;
    }
  }
  for (; i < n; ++i) {
    const float v = in[i] * beta;
    out[i] = v > threshold ? in[i] : ((v > 0 ? v : 0.f) + std::log1p(std::exp(-std::fabs(v)))) / beta;
  }
}

static at::Tensor softplus(const at::Tensor& x, double beta, double threshold) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.is_contiguous(), "float32, contiguous");
  at::Tensor y = at::empty(x.sizes(), x.options());
  softplus_rows(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), float(beta), float(threshold));
  return y;
}

TORCH_LIBRARY(cann_bench, m) { m.def("softplus(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor"); }
TORCH_LIBRARY_IMPL(cann_bench, CPU, m) { m.impl("softplus", &softplus); }
#endif

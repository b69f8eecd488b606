// Delegation from C++ that the profiler cannot see: ATen's CPU kernel called directly, below the
// dispatcher. The import of at::cpu::softplus in the shared object gives it away.
#include <ATen/CPUFunctions.h>
#include <torch/library.h>

static at::Tensor softplus(const at::Tensor& x, double beta, double threshold) {
  return at::cpu::softplus(x, beta, threshold);
}

TORCH_LIBRARY(cann_bench, m) { m.def("softplus(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor"); }
TORCH_LIBRARY_IMPL(cann_bench, CPU, m) { m.impl("softplus", &softplus); }

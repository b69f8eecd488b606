// CPU kernels for twelve of the bundled CANN Bench tasks, registered as torch.ops.cann_bench.*.
//
// Every kernel is a plain loop over raw data pointers: ATen is used only to allocate outputs, to make
// inputs contiguous and to split loops across threads (at::parallel_for). The kernels live in the headers
// below, one family each; this file is the single translation unit that compiles them (the torch headers are
// parsed once) and the registration.
//
// Schemas name their arguments exactly like the task goldens: the grader calls with keyword arguments.

#include <torch/library.h>

#include "activations.h"
#include "matmul.h"
#include "norms.h"
#include "reductions.h"
#include "selection.h"

TORCH_LIBRARY(cann_bench, m) {
  m.def("softplus(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor");
  m.def("leaky_relu(Tensor x, float negative_slope=0.01) -> Tensor");
  m.def("gelu(Tensor x, str approximate=\"none\") -> Tensor");
  m.def("silu(Tensor x) -> Tensor");
  m.def("clamp(Tensor x, float min_val=-1.0, float max_val=1.0) -> Tensor");
  m.def("rms_scale(Tensor x, Tensor gamma, float epsilon=1e-06) -> Tensor");
  m.def("log_softmax(Tensor x, int dim=-1) -> Tensor");
  m.def("layer_norm(Tensor x, Tensor gamma, Tensor beta, float epsilon=1e-05) -> Tensor");
  m.def("reduce_sum(Tensor x, int dim=-1, bool keepdim=False) -> Tensor");
  m.def("row_top_k(Tensor x, int k, int dim=-1) -> (Tensor values, Tensor indices)");
  m.def("batch_matmul(Tensor a, Tensor b) -> Tensor");
  m.def("moe_gating(Tensor logits, int k) -> (Tensor weights, Tensor indices)");
}

TORCH_LIBRARY_IMPL(cann_bench, CPU, m) {
  m.impl("softplus", &softplus);
  m.impl("leaky_relu", &leaky_relu);
  m.impl("gelu", &gelu);
  m.impl("silu", &silu);
  m.impl("clamp", &clamp);
  m.impl("rms_scale", &rms_scale);
  m.impl("log_softmax", &log_softmax);
  m.impl("layer_norm", &layer_norm);
  m.impl("reduce_sum", &reduce_sum);
  m.impl("row_top_k", &row_top_k);
  m.impl("batch_matmul", &batch_matmul);
  m.impl("moe_gating", &moe_gating);
}

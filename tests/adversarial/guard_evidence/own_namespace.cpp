// An honest kernel in a private op namespace: myns::softplus_kernel, the bundled example's own loops,
// called from Python as cann_bench.softplus. Ops its own library registers are its own code.
#include <torch/library.h>

#include "activations.h"

TORCH_LIBRARY(myns, m) { m.def("softplus_kernel(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor"); }
TORCH_LIBRARY_IMPL(myns, CPU, m) { m.impl("softplus_kernel", &softplus); }

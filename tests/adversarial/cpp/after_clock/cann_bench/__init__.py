"""Loads the compiled library (see csrc/ops.cpp): its static initialiser installs a SIGSEGV handler."""

from pathlib import Path

import torch

torch.ops.load_library(str(next(Path(__file__).resolve().parent.glob("_C*.so"))))
softplus = torch.ops.cann_bench.softplus
leaky_relu = torch.ops.cann_bench.leaky_relu
silu = torch.ops.cann_bench.silu

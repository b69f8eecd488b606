"""Loads the compiled library, which registers torch.ops.cann_bench.softplus."""

from pathlib import Path

import torch

torch.ops.load_library(str(next(Path(__file__).resolve().parent.glob("_C*.so"))))
softplus = torch.ops.cann_bench.softplus

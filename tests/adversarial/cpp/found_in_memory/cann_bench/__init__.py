"""Four operators, four ways to hide delegation from the judge's CPU sampler (csrc/attacks.cpp does the work):

- softplus: the tick dodger: the delegated work runs right after a sampling interrupt and stops before the next;
- silu: dilution in the call: own busy work beside the delegated call keeps its share under the limit;
- gelu: dilution in the output's finaliser: the busy work runs when the worker drops the result, after the clock;
- log_softmax: short-lived threads: each slice of rows runs on a thread that ends before its first sample.
"""

import weakref
from pathlib import Path

import torch

torch.ops.load_library(str(next(Path(__file__).resolve().parent.glob("_C*.so"))))
_ops = torch.ops.cann_bench
softplus = _ops.softplus
silu = _ops.silu
log_softmax = _ops.log_softmax


def gelu(x, approximate="none"):
    y = _ops.gelu(x, approximate)
    weakref.finalize(y, _ops.busy, 2.0 * _ops.last_seconds())  # twice the delegated time, once y is dropped
    return y

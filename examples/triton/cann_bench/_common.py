"""Shared pieces: the host-side tensor helpers and the Triton device functions the kernels call.

Host side, torch only allocates outputs and reads shapes, strides and dtypes; every value is computed by a
Triton kernel. Device side, the helpers below are ``@triton.jit`` functions inlined into the kernels.
"""

import torch
import triton
import triton.language as tl


def dense(x):
    """``x`` itself when it is contiguous, else a contiguous copy (the kernels index it as a flat array)."""
    if x.is_contiguous():
        return x
    return x.contiguous()


def new_output(x):
    """A fresh contiguous tensor with the shape, dtype and device of ``x``."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def numel(shape):
    count = 1
    for size in shape:
        count *= int(size)
    return count


# ---------------------------------------------------------------- device functions


@triton.jit
def log1p_unit(u):
    """log(1 + u) for u in [0, 1], to about one float32 rounding, without tl.log.

    log(1 + u) = 2 atanh(s) with s = u / (2 + u) in [0, 1/3]; the odd series of atanh is cut after s^15, so the
    truncation error is below s^16 / 17 < 1.5e-9 relative. It keeps full relative precision for tiny u, where
    log(1 + u) in float32 would round 1 + u first.
    """
    s = u / (2.0 + u)
    s2 = s * s
    p = 0.06666666666666667  # 1/15
    p = p * s2 + 0.07692307692307693  # 1/13
    p = p * s2 + 0.09090909090909091  # 1/11
    p = p * s2 + 0.1111111111111111  # 1/9
    p = p * s2 + 0.14285714285714285  # 1/7
    p = p * s2 + 0.2  # 1/5
    p = p * s2 + 0.3333333333333333  # 1/3
    p = p * s2 + 1.0
    return 2.0 * s * p


@triton.jit
def log_at_least_one(s):
    """log(s) for s >= 1 (a softmax denominator): s - 1 is exact below 2, so log1p_unit keeps small results
    precise; larger s go through tl.log, whose result is then at least log 2."""
    return tl.where(s < 2.0, log1p_unit(s - 1.0), tl.log(s))


@triton.jit
def erfc_nonneg(z):
    """erfc(z) for z >= 0 with relative error below 1.2e-7 (the Chebyshev fit of Numerical Recipes' erfcc).

    Relative precision holds far into the tail, where 1 - erf(z) would cancel; erfc(+inf) is 0.
    """
    t = 1.0 / (1.0 + 0.5 * z)
    p = 0.17087277
    p = p * t - 0.82215223
    p = p * t + 1.48851587
    p = p * t - 1.13520398
    p = p * t + 0.27886807
    p = p * t - 0.18628806
    p = p * t + 0.09678418
    p = p * t + 0.37409196
    p = p * t + 1.00002368
    p = p * t - 1.26551223
    return t * tl.exp(p - z * z)

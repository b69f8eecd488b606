"""Level 1: softplus, gelu, silu, leaky_relu.

One pattern for all four: the input is read as a flat array, a 1-D grid covers it in blocks of BLOCK_SIZE
elements, loads and stores are masked at the tail, the arithmetic runs in float32 and each result is rounded
once (to nearest even) to the input's dtype.
"""

import triton
import triton.language as tl

from ._common import dense, erfc_nonneg, log1p_unit, new_output

BLOCK_SIZE = 1024
NUM_WARPS = 4


def _launch(kernel, x, *scalars):
    x = dense(x)
    y = new_output(x)
    n = x.numel()
    if n == 0:
        return y
    grid = (triton.cdiv(n, BLOCK_SIZE),)
    kernel[grid](x, y, n, *scalars, BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS)
    return y


@triton.jit
def _softplus_kernel(x_ptr, y_ptr, n, beta, threshold, BLOCK_SIZE: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK_SIZE
    offs = start + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    z = x * beta
    # log(1 + exp(z)) = max(z, 0) + log1p(exp(-|z|)): exp never overflows; -inf gives 0 and +inf gives +inf
    smooth = (tl.where(z > 0.0, z, 0.0) + log1p_unit(tl.exp(-tl.abs(z)))) / beta
    y = tl.where(z > threshold, x, smooth)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gelu_erf_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK_SIZE
    offs = start + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    # Phi(x) = erfc(-x / sqrt 2) / 2: for x < 0 the tail itself, for x >= 0 one minus the other tail, so the
    # negative tail keeps its relative precision (1 + erf(x / sqrt 2) would cancel there)
    tail = 0.5 * erfc_nonneg(tl.abs(x) * 0.7071067811865476)
    phi = tl.where(x < 0.0, tail, 1.0 - tail)
    y = x * phi
    y = tl.where(x == float("-inf"), 0.0, y)  # the limit, not -inf * 0
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gelu_tanh_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK_SIZE
    offs = start + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    # 0.5 x (1 + tanh(u)) = x * sigmoid(2u) = x / (1 + exp(-2u)): tanh written through exp, no cancellation
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    y = x / (1.0 + tl.exp(-2.0 * u))
    y = tl.where(x == float("-inf"), 0.0, y)  # the limit, not -inf / inf
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _silu_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK_SIZE
    offs = start + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    # x * sigmoid(x) with e = exp(-|x|) <= 1: x / (1 + e) for x >= 0, x e / (1 + e) below; nothing overflows
    e = tl.exp(-tl.abs(x))
    y = tl.where(x >= 0.0, x, x * e) / (1.0 + e)
    y = tl.where(x == float("-inf"), 0.0, y)  # the limit, not -inf * 0
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _leaky_relu_kernel(x_ptr, y_ptr, n, negative_slope, BLOCK_SIZE: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK_SIZE
    offs = start + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.where(x >= 0.0, x, x * negative_slope)  # NaN fails the test and stays NaN
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold."""
    return _launch(_softplus_kernel, x, float(beta), float(threshold))


def gelu(x, approximate="none"):
    """x Phi(x) (approximate="none", the erf form) or its tanh approximation (approximate="tanh")."""
    if approximate == "none":
        return _launch(_gelu_erf_kernel, x)
    if approximate == "tanh":
        return _launch(_gelu_tanh_kernel, x)
    raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(x):
    """x * sigmoid(x)."""
    return _launch(_silu_kernel, x)


def leaky_relu(x, negative_slope=0.01):
    """x where x >= 0, negative_slope * x elsewhere."""
    return _launch(_leaky_relu_kernel, x, float(negative_slope))

"""Level 2: rms_scale and log_softmax, reductions along one dimension.

The reduced dimension is the contiguous last one (rms_scale always; log_softmax for dim = -1): a program owns a
tile of ROWS whole rows and reduces along them. A row of up to MAX_TILE elements is read once and kept in
registers (SINGLE); a longer row is walked in chunks of BLOCK elements, once per pass, with ROWS = 1.

log_softmax may reduce any dimension. The input is viewed as [outer, n, inner] (n the reduced size, inner the
product of the sizes after it); with inner > 1 a second kernel gives each program one outer index and BLOCK_I
neighbouring inner positions, and walks the n positions inner elements apart, so each load of a tile row is a
contiguous run of BLOCK_I elements.

Sums, maxima and the arithmetic run in float32; each result is rounded once to the input's dtype.
"""

import triton
import triton.language as tl

from ._common import dense, log_at_least_one, new_output, numel

MAX_TILE = 8192  # elements of the widest register tile (a whole row up to this size is read once)
LOOP_BLOCK = 4096  # chunk of a longer row
ROW_TILE = 2048  # short rows: as many as fit this many elements go to one program
STRIDED_TILE = 4096  # elements of a [BLOCK_N, BLOCK_I] tile of the strided kernel
MAX_BLOCK_I = 64


def _warps(tile):
    return 4 if tile <= 2048 else 8


def _row_plan(rows, n):
    """(ROWS, BLOCK, SINGLE) for rows of n contiguous elements."""
    if n <= MAX_TILE:
        block = triton.next_power_of_2(n)
        tile_rows = max(1, ROW_TILE // block)
        tile_rows = min(tile_rows, triton.next_power_of_2(rows))
        return tile_rows, block, True
    return 1, LOOP_BLOCK, False


# ---------------------------------------------------------------- rms_scale


@triton.jit
def _rms_scale_kernel(x_ptr, g_ptr, y_ptr, rows, h, epsilon,
                      ROWS: tl.constexpr, BLOCK: tl.constexpr, SINGLE: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_mask = r < rows
    base = r.to(tl.int64) * h
    cols = tl.arange(0, BLOCK)
    if SINGLE:
        col_mask = cols < h
        mask = row_mask[:, None] & col_mask[None, :]
        offs = base[:, None] + cols[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        mean_square = tl.sum(x * x, axis=1) / h
        scale = 1.0 / tl.sqrt(mean_square + epsilon)
        g = tl.load(g_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        y = x * scale[:, None] * g[None, :]
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
        for start in range(0, h, BLOCK):
            c = start + cols
            mask = row_mask[:, None] & (c < h)[None, :]
            x = tl.load(x_ptr + base[:, None] + c[None, :], mask=mask, other=0.0).to(tl.float32)
            acc += x * x
        mean_square = tl.sum(acc, axis=1) / h
        scale = 1.0 / tl.sqrt(mean_square + epsilon)
        for start in range(0, h, BLOCK):
            c = start + cols
            col_mask = c < h
            mask = row_mask[:, None] & col_mask[None, :]
            offs = base[:, None] + c[None, :]
            x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            g = tl.load(g_ptr + c, mask=col_mask, other=0.0).to(tl.float32)
            y = x * scale[:, None] * g[None, :]
            tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rms_scale(x, gamma, epsilon=1e-6):
    """x / sqrt(mean(x^2, last dim) + epsilon) * gamma, gamma of shape (H,)."""
    x = dense(x)
    gamma = dense(gamma)
    y = new_output(x)
    if x.numel() == 0:
        return y
    h = int(x.shape[-1])
    rows = x.numel() // h
    tile_rows, block, single = _row_plan(rows, h)
    grid = (triton.cdiv(rows, tile_rows),)
    _rms_scale_kernel[grid](x, gamma, y, rows, h, float(epsilon), ROWS=tile_rows, BLOCK=block, SINGLE=single,
                            num_warps=_warps(tile_rows * block))
    return y


# ---------------------------------------------------------------- log_softmax


@triton.jit
def _log_softmax_rows_kernel(x_ptr, y_ptr, rows, n,
                             ROWS: tl.constexpr, BLOCK: tl.constexpr, SINGLE: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_mask = r < rows
    base = r.to(tl.int64) * n
    cols = tl.arange(0, BLOCK)
    if SINGLE:
        mask = row_mask[:, None] & (cols < n)[None, :]
        offs = base[:, None] + cols[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
        m = tl.max(x, axis=1)
        e = tl.where(mask, tl.exp(x - m[:, None]), 0.0)
        log_sum = log_at_least_one(tl.sum(e, axis=1))
        y = x - m[:, None] - log_sum[:, None]
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # elementwise accumulators, reduced once after each loop
        m_acc = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
        for start in range(0, n, BLOCK):
            c = start + cols
            mask = row_mask[:, None] & (c < n)[None, :]
            x = tl.load(x_ptr + base[:, None] + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
            m_acc = tl.maximum(m_acc, x)
        m = tl.max(m_acc, axis=1)
        s_acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
        for start in range(0, n, BLOCK):
            c = start + cols
            mask = row_mask[:, None] & (c < n)[None, :]
            x = tl.load(x_ptr + base[:, None] + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
            s_acc += tl.where(mask, tl.exp(x - m[:, None]), 0.0)
        log_sum = log_at_least_one(tl.sum(s_acc, axis=1))
        for start in range(0, n, BLOCK):
            c = start + cols
            mask = row_mask[:, None] & (c < n)[None, :]
            offs = base[:, None] + c[None, :]
            x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            y = x - m[:, None] - log_sum[:, None]
            tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _log_softmax_strided_kernel(x_ptr, y_ptr, n, inner,
                                BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr, SINGLE: tl.constexpr):
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    inner_mask = i < inner
    base = tl.program_id(0).to(tl.int64) * n * inner
    j = tl.arange(0, BLOCK_N)
    if SINGLE:
        mask = (j < n)[:, None] & inner_mask[None, :]
        offs = base + j[:, None].to(tl.int64) * inner + i[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
        m = tl.max(x, axis=0)
        e = tl.where(mask, tl.exp(x - m[None, :]), 0.0)
        log_sum = log_at_least_one(tl.sum(e, axis=0))
        y = x - m[None, :] - log_sum[None, :]
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # elementwise accumulators, reduced once after each loop
        m_acc = tl.full([BLOCK_N, BLOCK_I], float("-inf"), tl.float32)
        for start in range(0, n, BLOCK_N):
            k = start + j
            mask = (k < n)[:, None] & inner_mask[None, :]
            offs = base + k[:, None].to(tl.int64) * inner + i[None, :]
            x = tl.load(x_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
            m_acc = tl.maximum(m_acc, x)
        m = tl.max(m_acc, axis=0)
        s_acc = tl.zeros([BLOCK_N, BLOCK_I], dtype=tl.float32)
        for start in range(0, n, BLOCK_N):
            k = start + j
            mask = (k < n)[:, None] & inner_mask[None, :]
            offs = base + k[:, None].to(tl.int64) * inner + i[None, :]
            x = tl.load(x_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
            s_acc += tl.where(mask, tl.exp(x - m[None, :]), 0.0)
        log_sum = log_at_least_one(tl.sum(s_acc, axis=0))
        for start in range(0, n, BLOCK_N):
            k = start + j
            mask = (k < n)[:, None] & inner_mask[None, :]
            offs = base + k[:, None].to(tl.int64) * inner + i[None, :]
            x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            y = x - m[None, :] - log_sum[None, :]
            tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def log_softmax(x, dim=-1):
    """log(softmax(x)) along dim: x - max - log(sum(exp(x - max)))."""
    x = dense(x)
    y = new_output(x)
    if x.numel() == 0:
        return y
    shape = list(x.shape) or [1]  # a 0-d tensor is one slice of one element
    ndim = len(shape)
    if not -ndim <= dim < ndim:
        raise IndexError(f"dim {dim} is out of range for a tensor of {x.dim()} dimension(s)")
    d = dim % ndim
    outer, n, inner = numel(shape[:d]), int(shape[d]), numel(shape[d + 1:])
    if inner == 1:
        tile_rows, block, single = _row_plan(outer, n)
        grid = (triton.cdiv(outer, tile_rows),)
        _log_softmax_rows_kernel[grid](x, y, outer, n, ROWS=tile_rows, BLOCK=block, SINGLE=single,
                                       num_warps=_warps(tile_rows * block))
        return y
    block_i = min(triton.next_power_of_2(inner), MAX_BLOCK_I)
    block_n = min(triton.next_power_of_2(n), max(1, STRIDED_TILE // block_i))
    grid = (outer, triton.cdiv(inner, block_i))
    _log_softmax_strided_kernel[grid](x, y, n, inner, BLOCK_N=block_n, BLOCK_I=block_i, SINGLE=n <= block_n,
                                      num_warps=_warps(block_n * block_i))
    return y

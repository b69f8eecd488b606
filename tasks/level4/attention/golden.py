"""Attention reference: softmax(q k^T / sqrt(D) [causal mask]) v, per batch and head.

Scores are materialised for a group of heads at a time (at most ~32 MiB of them), never for all heads at once.
The fp64 truth and float32 compute in their own precision. For float16/bfloat16 this is the same-precision
reference of a fused attention kernel: scores and softmax in float32, the probabilities rounded to the input
dtype for the second product (a matrix unit multiplies in that dtype), float32 accumulation, one final rounding.
"""

import math

import torch

_SCORE_BYTES = 32 << 20


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    batch, heads, s, d = q.shape
    length = k.shape[2]
    half = q.dtype in (torch.float16, torch.bfloat16)
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    qf = q.reshape(batch * heads, s, d)
    kf = k.reshape(batch * heads, length, d)
    vf = v.reshape(batch * heads, length, v.shape[-1])
    out = torch.empty((batch * heads, s, vf.shape[-1]), dtype=q.dtype)
    mask = torch.ones(s, length, dtype=torch.bool).triu(1) if causal else None
    group = max(1, _SCORE_BYTES // (s * length * 8))
    scale = 1.0 / math.sqrt(d)
    for start in range(0, batch * heads, group):
        stop = min(start + group, batch * heads)
        scores = torch.matmul(qf[start:stop].to(work), kf[start:stop].to(work).transpose(1, 2)) * scale
        if mask is not None:
            scores.masked_fill_(mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        if half:
            probs = probs.to(q.dtype).to(work)
        out[start:stop] = torch.matmul(probs, vf[start:stop].to(work)).to(q.dtype)
    return out.reshape(batch, heads, s, vf.shape[-1])

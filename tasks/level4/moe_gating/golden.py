"""MoeGating reference: softmax over experts, top-k experts per token, weights renormalised to sum 1.

Softmax is strictly increasing, so the k largest probabilities are the k largest logits and two probabilities
are equal exactly when their logits are: the experts are chosen on the logits themselves (a stable descending
sort, so equal logits keep the lower expert first), which no rounding can reorder. The softmax denominator
cancels in the renormalisation, so weights = exp(l_j - l_max) / sum over the chosen j. Weights are float32
(float64 for the truth).
"""

from typing import Any, List, Tuple

import torch

GRID = 2.0 ** -10


def get_input(logits: torch.Tensor, **_: Any) -> List[torch.Tensor]:
    """The generated logits rounded to multiples of 2**-10 (no random numbers drawn).

    Two different logits then differ by at least 2**-10, so their probabilities differ by about 0.1%, far more
    than float32 resolves: a kernel that ranks softmax outputs computed in float32 sees the same order and the
    same ties as the exact softmax. Without the grid, random float32 logits closer than ~1e-7 become equal
    probabilities in float32, and the tie rule would then pick an order the exact softmax does not have.
    """
    return [(torch.round(logits.to(torch.float64) / GRID) * GRID).to(logits.dtype)]


def moe_gating(logits: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    indices = torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k].contiguous()
    work = torch.float64 if logits.dtype == torch.float64 else torch.float32
    chosen = logits.gather(-1, indices).to(work)
    e = torch.exp(chosen - chosen[..., :1])
    weights = e / e.sum(dim=-1, keepdim=True)
    return weights.contiguous(), indices

"""GruCell reference: one step of torch.nn.GRUCell, gates in the order (r, z, n).

The fp64 truth and float32 compute in their own precision. For float16/bfloat16 this is the same-precision
reference of torch's own GRUCell: the two linear maps accumulate in float32 and are rounded to the input dtype
(they are ordinary matrix products with half-precision outputs), then the gate arithmetic runs in float32 and
the new state is rounded once.
"""

import torch


def gru_cell(x: torch.Tensor, h: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor,
             b_hh: torch.Tensor) -> torch.Tensor:
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    hw = h.to(work)
    gi = torch.addmm(b_ih.to(work), x.to(work), w_ih.to(work).t())
    gh = torch.addmm(b_hh.to(work), hw, w_hh.to(work).t())
    if x.dtype in (torch.float16, torch.bfloat16):
        gi, gh = gi.to(x.dtype).to(work), gh.to(x.dtype).to(work)
    i_r, i_z, i_n = gi.chunk(3, dim=1)
    h_r, h_z, h_n = gh.chunk(3, dim=1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    h_new = (1 - z) * n + z * hw
    return h_new.to(x.dtype).contiguous()

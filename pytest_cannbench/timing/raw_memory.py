"""The worker harness's own memory work (output copies, poisoning, the private cache flush) done through libc.

The judge samples a submission worker's instruction pointers over a whole timing batch and classes them by the
object they land in (guard/perf_profile.py): time in libtorch is *builtin compute*, time in libc is the language
runtime's. Done with torch ops, the harness's per-call copies, poisoning and flushes land in libtorch and count as
the submission delegating to builtin kernels: on small memory-bound kernels they cost more than the kernel, and
the bundled example's honest int32 clamp failed as ``builtin_compute``. Through libc they are runtime work.

Every function takes plain, contiguous CPU tensors (or the region) and touches only their bytes: nothing here
gives code in the worker a memory access torch would not (the submission can call these too). No ctypes object
is made after import (the guard's audit hook watches ``ctypes.cdata``); libc is opened at import, before the
hook is installed.
"""

from __future__ import annotations

import ctypes
from typing import Any

_libc = ctypes.CDLL(None)  # the process's own symbols, libc's among them (no ldconfig/gcc lookup)
_memchr = _libc.memchr
_memchr.restype = ctypes.c_void_p
_memchr.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
_memmove = ctypes.memmove
_memset = ctypes.memset


def _span(t: Any) -> tuple[int, int]:
    """(address, bytes) of a plain contiguous CPU tensor, read through TensorBase (no per-instance override)."""
    import torch

    base = torch._C.TensorBase
    if type(t) is not torch.Tensor or t.device.type != "cpu" or not base.is_contiguous(t):
        raise TypeError("a plain contiguous CPU tensor is required")
    return base.data_ptr(t), t.numel() * t.element_size()


def copy_into(mm: Any, offset: int, src: Any) -> None:
    """The bytes of tensor ``src`` into buffer ``mm`` (the shared region) at ``offset``: libc memmove."""
    import torch

    address, nbytes = _span(src)
    if nbytes:
        dst = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes, offset=offset)  # bounds-checked by torch
        _memmove(torch._C.TensorBase.data_ptr(dst), address, nbytes)


def fill(t: Any, byte: int) -> None:
    """Every byte of tensor ``t`` set to ``byte``: libc memset."""
    address, nbytes = _span(t)
    _memset(address, byte, nbytes)


def read_every_line(t: Any) -> None:
    """Read every byte of zeroed tensor ``t`` (libc memchr for a byte it never holds): each cache line is loaded,
    so a buffer twice a cache's size evicts what that cache held. Loads only, never non-temporal stores."""
    address, nbytes = _span(t)
    if _memchr(address, 1, nbytes) is not None:
        raise RuntimeError("the flush buffer was written to")

"""Which builtin ops a submission may run under its own call: allocation, views and copies, nothing that computes.

One list serves every side of the delegation guard: the ops closed at the dispatcher in block mode (everything not
listed, :mod:`forbid`), the profiler's op tree in the worker (op names such as ``aten::exp``) and the ATen symbols a
submission's shared objects import (``at::_ops::exp::call``, :mod:`torch_imports`). Everything
not listed counts as builtin compute, ``exp`` and ``sigmoid`` included: the list is what is allowed, never what
is forbidden, so an op added to a future torch is refused until someone decides otherwise.
"""

from __future__ import annotations

import re

SUBMISSION_NAMESPACE = "cann_bench"
DEVICE_API = re.compile(r"(cuda|cu|hip)[A-Z][A-Za-z0-9_]*\Z")  # cudaLaunchKernel, cuLaunchKernelEx, hipMalloc
# A call into a prebuilt JIT extension's function runs inside a profiler label with this prefix
# (workers.jit_load); the ops its TORCH_LIBRARY extensions register are collected in OWN_OPS, in the worker.
CUSTOM_PREFIX = "cannbench::custom::"
OWN_OPS: set[str] = set()
# BUILTIN_NAMESPACES (below, with LIBRARY_NAMESPACES) are never "own", whatever OWN_OPS holds

ALLOCATION = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted",
    "zeros", "zeros_like", "new_zeros", "zero_", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "fill_", "scalar_tensor", "lift", "lift_fresh", "lift_fresh_copy",
})
VIEWS = frozenset({
    "view", "view_as", "_reshape_alias", "reshape", "_unsafe_view", "as_strided", "expand", "expand_as", "squeeze",
    "unsqueeze", "permute", "transpose", "t", "narrow", "slice", "select", "split", "split_with_sizes", "chunk",
    "unbind", "flatten", "unflatten", "movedim", "detach", "alias", "contiguous", "resolve_conj", "resolve_neg",
    "unfold", "diagonal", "_nested_view_from_buffer",
})
COPIES = frozenset({
    "clone", "copy_", "to", "_to_copy", "_copy_from", "_copy_from_and_resize", "resize_", "resize_as_", "set_",
    "cat", "stack", "pin_memory", "_pin_memory", "is_pinned", "record_stream", "item", "_local_scalar_dense",
    "is_nonzero", "size", "stride", "numel", "dim", "sym_size", "sym_stride", "sym_numel", "is_contiguous",
})
ALLOWED = ALLOCATION | VIEWS | COPIES


# A multi-rank (MC2) case's communication: the collectives of the process group a rank worker joined before the
# submission was imported (workers/ranks_main.py), as the profiler names them: the c10d ops (``c10d::allgather_``,
# ``c10d::allreduce_``) and the backend's own spans (``gloo:all_gather``). Allowed in rank workers only.
COLLECTIVE_PREFIXES = ("c10d::", "_c10d_functional::", "gloo:", "nccl:", "hccl:")
COMMUNICATION: set[str] = set()


def allow_communication() -> None:
    """In a rank worker, before the guard is made: the group's collectives are the operator's communication."""
    COMMUNICATION.update(COLLECTIVE_PREFIXES)


def base_name(op: str) -> str:
    """``aten::add_.Tensor`` -> ``add_``; ``exp`` -> ``exp``."""
    name = op.split("::", 1)[1] if "::" in op else op
    return name.split(".", 1)[0]


# Namespaces other libraries bring when imported (torch's own submodules, its companions): never the
# submission's own, even when they first appear while it is imported.
LIBRARY_NAMESPACES = frozenset({
    "aten", "prims", "prim", "quantized", "_quantized", "profiler", "c10d", "_c10d_functional",
    "_c10d_functional_autograd", "_dtensor", "mkldnn", "mkldnn_prepacked", "onednn", "fbgemm", "torchvision",
    "torchaudio", "torchtext", "torchrec", "torchao", "triton", "inductor", "higher_order", "_inductor_test",
    "xformers", "flash_attn", "vllm", "_C", "npu", "torch_npu", "tensorrt", "torch_tensorrt", "intel_extension",
    "ipex", "quantized_decomposed", "rngprims", "debugprims", "sparse", "_sparse", "mtia", "xla", "cuda",
})


BUILTIN_NAMESPACES = LIBRARY_NAMESPACES | {"mkl"}


def own_namespaces(before: frozenset[str], now: frozenset[str]) -> frozenset[str]:
    """The op namespaces the submission brought: those in ``now`` (registered op names) and not in ``before``
    (the names before its import), other libraries' excepted. Its libraries' ops, in any namespace, are its
    own code; what was registered before it ran is what torch brought."""
    old = {op.split("::", 1)[0] for op in before}
    new = {op.split("::", 1)[0] for op in now if "::" in op}
    return frozenset(ns for ns in new - old if ns not in LIBRARY_NAMESPACES) | {SUBMISSION_NAMESPACE}


def own_op(op: str) -> bool:
    """An op of the submission's own compiled kernels: ``cann_bench::*`` or one its JIT extensions registered."""
    namespace = op.split("::", 1)[0]
    if namespace == SUBMISSION_NAMESPACE:
        return True
    return namespace not in BUILTIN_NAMESPACES and op.split(".", 1)[0] in OWN_OPS


def device_api(name: str) -> bool:
    """A CUDA runtime or driver API call the profiler records beside the ops (``cudaLaunchKernel``, ``cudaMalloc``,
    ``cuLaunchKernelEx`` from Triton's launcher: seen on an H200 with torch 2.11). It is how any kernel is
    launched, the submission's own included; the ATen op that would launch a builtin kernel is recorded itself.
    Ops always carry a namespace (``aten::``, a library's), so a custom op cannot pass for one."""
    return "::" not in name and bool(DEVICE_API.match(name))


def is_allowed(op: str, own: frozenset[str] = frozenset({SUBMISSION_NAMESPACE})) -> bool:
    """An op event name from the profiler: one of the submission's own namespaces (or JIT ops), an allowed ATen
    op, or a device runtime call (:func:`device_api`)."""
    namespace = op.split("::", 1)[0] if "::" in op else ""
    if namespace in own or namespace == SUBMISSION_NAMESPACE or own_op(op) or device_api(op):
        return True
    if COMMUNICATION and op.startswith(tuple(COMMUNICATION)):
        return True
    return namespace == "aten" and base_name(op) in ALLOWED


# ---------------------------------------------------------------- libraries of compiled code
# (the symbols they import: guard/torch_imports.py, an allowlist of what a kernel library may take from torch)

# Libraries a submission's ELF files may not need (DT_NEEDED): their whole job is the compute it should write.
FORBIDDEN_LIBRARIES = {
    "libmkl": "MKL", "libopenblas": "OpenBLAS", "libblas": "BLAS", "libcblas": "BLAS", "liblapack": "LAPACK",
    "libblis": "BLIS", "libflexiblas": "BLAS", "libdnnl": "oneDNN", "libmkldnn": "oneDNN", "libcublas": "cuBLAS",
    "libcudnn": "cuDNN", "libcufft": "cuFFT", "libcusparse": "cuSPARSE", "libcusolver": "cuSOLVER",
    "libxsmm": "LIBXSMM", "libfftw": "FFTW", "libnpps": "NPP", "libnppi": "NPP",
}


def forbidden_library(soname: str) -> str:
    """Why a submission's ELF file may not need the library ``soname`` ("" when it may)."""
    base = soname.rsplit("/", 1)[-1]
    for prefix, why in FORBIDDEN_LIBRARIES.items():
        if base.startswith(prefix):
            return f"links {why}"
    return ""

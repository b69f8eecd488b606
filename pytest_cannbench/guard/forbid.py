"""Builtin kernels unreachable in the candidate worker, not only detected: the CANN rule enforced at the dispatcher.

Before the submission is imported (block mode, CANN submissions; KernelBench's ``kernel`` mode keeps its own rule,
goldens and the baseline run without a guard), every op registered at that moment that the rule forbids (all but
the allocation, view and copy ops of :mod:`builtin_ops`, in every namespace torch brought but ``profiler``, whose
ops are ``record_function``'s labels) gets a kernel of ours at each dispatch key where it has one of its own:

* the backend keys that compute: the CPU and its siblings (``SparseCPU``, ``SparseCsrCPU``, ``QuantizedCPU``,
  ``NestedTensorCPU``) and the same CUDA keys (CPU and CUDA workers; an NPU worker closes nothing, :func:`keys_for`);
* the composite alias keys (``CompositeExplicitAutograd[NonFunctional]``, ``CompositeImplicitAutograd[NestedTensor]``):
  they fill every runtime key without a kernel of its own, so a redispatch to another backend key
  (``PrivateUse1``, ``XLA``, ...) and a composite op's own code (``softmax.int``, the ``fbgemm_*`` ops that call
  FBGEMM without dispatching) land on ours too.

The dispatcher keeps only the newest kernel of a key, so whatever path reaches the op runs ours: a Python call,
``torch.ops.aten.X``, ``OpOverload.redispatch`` with any key set, C++ ``at::exp`` / ``at::_ops::exp::call``,
``c10::Dispatcher::findSchema`` + ``call``/``callBoxed``/``redispatch``, ``_dispatch_call_boxed``, the
``_SafeKernelFunction`` of ``_dispatch_get_computed_kernel_for_dispatch_key`` (alias keys have no computed kernel).
Ours records a ``builtin_compute`` finding naming the op (a caught refusal still fails the case) and raises, so the
call fails with the op in its message. Nothing lets anyone through: the worker's own code after this point uses
allowed ops only (the canary is ``fill_``, the flush ``zero_``), since any bypass it had (a thread-local key set, a
flag) the submission would have as well.

The registrations live as long as the process, with no Python reference left to the library objects that hold
them (one reference is leaked on purpose): dropping or ``reset()``-ing those objects is the only way to undo a
registration, and nothing in Python reaches them (they are not tracked by ``gc``). A submission may register
kernels of its own over ours (its own code, then); it cannot bring torch's back.

What stays open: code that reaches a kernel's machine code through a pointer found in memory never meets the
dispatcher (the judge's CPU sampler is the layer for it), and ops registered after this point (a library
imported later) are not closed (the profiler's op tree still names them). docs/security.md has the figures.
"""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_cannbench.guard import builtin_ops

CPU_KEYS = ("CPU", "SparseCPU", "SparseCsrCPU", "QuantizedCPU", "NestedTensorCPU")
CUDA_KEYS = ("CUDA", "SparseCUDA", "SparseCsrCUDA", "QuantizedCUDA", "NestedTensorCUDA")
ALIAS_KEYS = ("CompositeExplicitAutogradNonFunctional", "CompositeExplicitAutograd", "CompositeImplicitAutograd",
              "CompositeImplicitAutogradNestedTensor")
SPARED_NAMESPACES = frozenset({"profiler"})  # record_function's enter/exit: labels around code, no compute
WHY = "is builtin compute, which the CANN rule forbids in a submission: write the kernel yourself"


def refusal_message(op: str) -> str:
    return f"{op} {WHY} (refused at the dispatcher by pytest-cannbench)"


def finding(op: str) -> str:
    """The guard finding's detail: the op, and that it never ran."""
    return f"{op} refused at the dispatcher ({op.split('.', 1)[0]} {WHY})"


class Refusal:
    """The kernel registered for one op: records the attempt, raises. One class for every op, so the guard's
    identity check of ``__call__`` covers them all."""

    __slots__ = ("op", "report")

    def __init__(self, op: str, report: Callable[[str], None]) -> None:
        self.op = op
        self.report = report

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.report(self.op)
        raise RuntimeError(refusal_message(self.op))


@dataclass(frozen=True)
class Closed:
    """What :func:`close` did, for the worker's log and the docs' figures."""

    ops: int  # operators (overloads) given a refusing kernel
    registrations: int  # (operator, dispatch key) pairs
    keys: tuple[str, ...]  # the keys looked at
    seconds: float

    def summary(self) -> str:
        if not self.keys:
            return "builtin kernels not closed on this device: the profiler's op tree is the layer here"
        return (f"builtin kernels closed: {self.ops} ops, {self.registrations} kernels at "
                f"{', '.join(self.keys)} ({self.seconds * 1e3:.0f} ms)")


def forbidden(op: str) -> bool:
    """Whether a registered op (``ns::name.overload``) is closed: everything but allowed ATen ops and the
    profiler's labels."""
    namespace = op.split("::", 1)[0]
    if namespace in SPARED_NAMESPACES:
        return False
    if builtin_ops.COMMUNICATION and op.startswith(tuple(builtin_ops.COMMUNICATION)):
        return False  # a rank worker's collectives are the operator's communication (allow_communication)
    return not (namespace == "aten" and builtin_ops.base_name(op) in builtin_ops.ALLOWED)


def keys_for(device: str) -> tuple[str, ...]:
    """The dispatch keys closed on a worker of ``device``: the CPU's and CUDA's (compute on the host is builtin
    compute whatever the card, and a CPU worker's torch may have a card too) and the composite aliases. None on
    other devices: an NPU worker's own timing runs builtin ops on the card (the cache clean's ``amax``, the clock
    boost's matmul), so there the profiler's op tree stays the layer."""
    if not device.startswith(("cpu", "cuda")):
        return ()
    return CPU_KEYS + CUDA_KEYS + ALIAS_KEYS


def close(device: str, report: Callable[[str], None]) -> Closed:
    """Register a :class:`Refusal` for every forbidden op at each of :func:`keys_for` where it has a kernel."""
    import torch  # noqa: F401 - imported by the worker long before; not part of the figure

    started = time.perf_counter()
    collecting = gc.isenabled()
    gc.disable()  # some 3,000 new objects would start full collections over all of torch's (most of the time)
    try:
        return _close(device, report, started)
    finally:
        if collecting:
            gc.enable()


def _close(device: str, report: Callable[[str], None], started: float) -> Closed:
    import ctypes

    import torch

    keys = keys_for(device)
    at_keys: dict[str, list[str]] = {}  # op -> the keys where it has a kernel of its own
    for key in keys:
        for op in torch._C._dispatch_get_registrations_for_dispatch_key(key):
            at_keys.setdefault(op, []).append(key)
    libraries: dict[str, Any] = {}
    ops = registrations = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
        for op, found in sorted(at_keys.items()):
            if not forbidden(op):
                continue
            namespace, name = op.split("::", 1)
            library = libraries.get(namespace)
            if library is None:
                library = libraries[namespace] = torch._C._dispatch_library("IMPL", namespace, "", __file__, 0)
            refusal = Refusal(op, report)
            for key in found:
                library.impl(name, key, refusal)  # boxed, called without the key set
            ops += 1
            registrations += len(found)
    for library in libraries.values():  # kept alive with no reference anyone can reach: see the module's doc
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(library))
    libraries.clear()
    return Closed(ops, registrations, keys, time.perf_counter() - started)

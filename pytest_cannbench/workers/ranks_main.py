"""One rank of a multi-rank (MC2) case, inside a worker process: its process group, its inputs, its call.

The official runner (``kernel_eval/eval/mc2_distributed_runner.py``) runs such a case with one process per rank
and an HCCL group; each rank makes its own inputs (the golden's ``mc2_make_rank_inputs(ctx, payload)``, else a
fixed rule over ``x1``/``x2``/``bias`` seeded by the case's ``seed`` attr), computes the truth with the golden's
``mc2_distributed_golden(ctx, inputs, attrs)`` and calls the candidate through ``mc2_call_candidate(candidate,
ctx, inputs, attrs)`` (else a fixed call per operator). Here the same contract runs split over the roles of a
single-rank case:

* **golden ranks** (trusted golden workers, ``golden_main``'s ``mc2_prepare``) join a group of their own, make
  each rank's inputs and run the distributed golden, once on float64 copies (the truth) and once as given (the
  native reference), and hand both with the inputs to the judge;
* **candidate ranks** (candidate workers started with ``--rank``) join their group *before* the submission is
  imported and before the containment filter is installed (:func:`join_group`): the group's connections are made
  by our code, and the filter then refuses every new network socket as for any candidate worker, so the
  submission can talk to its own ranks over the group and to nothing else. A call runs the task's call hook
  (trusted task code, sent as text: the task tree does not exist inside the sandbox) on the submission's
  operator, or, in a self-check, the distributed golden itself.

``ctx`` holds what the official one does: ``rank``, ``world_size``, ``device``, ``dist`` (``torch.distributed``),
``torch_npu`` (on a host without it, a stand-in whose every attribute raises :class:`NeedsNpu`, so a golden that
needs an NPU operator is reported as such), ``hcomm_info`` (the group's name: HCCL's communicator name on an NPU,
the default group's name under gloo), ``case_id``, ``case_num``, ``rel_path``, ``operator`` and ``attrs``.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from pytest_cannbench import procs
from pytest_cannbench.taskformat.dtypes import canonical_dtype
from pytest_cannbench.workers.golden_binding import flatten_outputs, load_golden, upcast

BACKENDS = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}
NPU_MODULE = "torch_npu"


class NeedsNpu(RuntimeError):
    """The golden (or the call hook) used ``torch_npu``, which this host does not have."""


class NpuAbsent:
    """``ctx["torch_npu"]`` on a host without ``torch_npu``: any use names what was needed."""

    def __getattr__(self, name: str) -> Any:
        raise NeedsNpu(f"{NPU_MODULE}.{name} is needed and {NPU_MODULE} is not installed (an Ascend NPU operator)")

    def __bool__(self) -> bool:
        return False


def needs_npu(exc: BaseException) -> bool:
    """Whether a failure is the absence of ``torch_npu`` (a golden written for an NPU only)."""
    if isinstance(exc, NeedsNpu):
        return True
    name = getattr(exc, "name", None) or ""
    return isinstance(exc, ImportError) and (name == NPU_MODULE or name.startswith(NPU_MODULE + "."))


def backend_for(device: str) -> str:
    return BACKENDS.get(device.split(":", 1)[0], "gloo")


def join_group(spec: dict[str, Any], device: str = "cpu") -> str:
    """Join the case's process group (``spec``: rank, world_size, store, timeout_s), rendezvous through a file, so no
    socket is needed to find the others; the backend's own connections are made here, before any submission code.
    Returns a line for the log."""
    import torch.distributed as dist

    backend = backend_for(device)
    if backend == "gloo":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only: the ranks share one host
    elif backend == "hccl":
        import torch_npu  # noqa: F401 - registers the hccl backend

    rank, world_size = int(spec["rank"]), int(spec["world_size"])
    if device.startswith(("cuda", "npu")):  # a card per rank (the rank worker's device is <kind>:<rank>)
        import torch

        accelerator = getattr(torch, device.split(":", 1)[0])
        accelerator.set_device(rank % max(1, accelerator.device_count()))
    store = dist.FileStore(str(spec["store"]), world_size)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=float(spec["timeout_s"])))
    dist.barrier()  # every pair connected now, not lazily inside the first call
    return f"rank {rank} of {world_size} joined its {backend} group (rendezvous {spec['store']})"


def leave_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def group_name(rank: int, device: str) -> str:
    """``hcomm_info``: HCCL's communicator name on an NPU, else the default group's name."""
    import torch
    from torch.distributed.distributed_c10d import _get_default_group

    group = _get_default_group()
    if backend_for(device) == "hccl":
        return str(group._get_backend(torch.device("npu")).get_hccl_comm_name(rank))  # type: ignore[attr-defined]
    return str(group.group_name)


def npu_module() -> Any:
    try:
        import importlib

        return importlib.import_module(NPU_MODULE)
    except ImportError:
        return NpuAbsent()


def make_ctx(rank: int, world_size: int, device: str, payload: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    return {"rank": rank, "world_size": world_size, "device": torch.device(device), "dist": dist,
            "torch_npu": npu_module(), "hcomm_info": group_name(rank, device), "case_id": payload["case_id"],
            "case_num": payload["case_num"], "rel_path": payload["rel_path"], "operator": payload["operator"],
            "attrs": payload["attrs"]}


# ---------------------------------------------------------------- the golden's module, from its text


_MODULES: dict[str, ModuleType] = {}


def load_source(source: str, sha256: str, rel_path: str) -> ModuleType:
    """The golden module from its text (checked against the sha256 collection pinned), once per process."""
    digest = hashlib.sha256(source.encode()).hexdigest()
    if sha256 and digest != sha256:
        raise RuntimeError(f"{rel_path}/golden.py: the text sent does not match the pinned sha256 {sha256[:12]}")
    module = _MODULES.get(digest)
    if module is None:
        name = "_cannbench_mc2." + "".join(c if c.isalnum() else "_" for c in rel_path)
        module = ModuleType(name)
        module.__file__ = f"{rel_path}/golden.py"
        sys.modules[name] = module
        exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 - the pinned golden
        _MODULES[digest] = module
    return module


# ---------------------------------------------------------------- inputs


def rank_tensor(shape: Any, dtype_name: str, value_range: Any, seed: int, device: Any) -> Any:
    """The official runner's tensor rule: a fresh manual seed, a float32 uniform draw cast to the dtype, or integers
    from ``lo`` to ``hi`` inclusive; ``[0, 1]`` without a range."""
    import torch

    if shape is None:
        return None
    torch.manual_seed(int(seed))
    dtype = getattr(torch, canonical_dtype(str(dtype_name)) or str(dtype_name))
    lo, hi = value_range if value_range is not None else (0, 1)
    if dtype.is_floating_point:
        tensor = torch.empty(list(shape), dtype=torch.float32).uniform_(float(lo), float(hi)).to(dtype)
    else:
        tensor = torch.randint(int(lo), int(hi) + 1, list(shape), dtype=dtype)
    return tensor.to(device)


def default_inputs(payload: dict[str, Any], rank: int, device: Any) -> dict[str, Any]:
    """Each rank's inputs where the golden has no ``mc2_make_rank_inputs``: ``x1`` from the case's seed, ``x2``
    from it too (or ``seed + 2 * rank`` with ``weight_same``), ``bias`` from ``3 * rank`` when ``is_bias``."""
    shapes, dtypes = payload["input_shapes"], payload["dtypes"]
    ranges, attrs = payload["value_ranges"] or [], payload["attrs"]
    seed = int(attrs.get("seed", 1))

    def range_of(i: int) -> Any:
        return ranges[i] if len(ranges) > i else None

    x1 = rank_tensor(shapes[0], dtypes[0], range_of(0), seed, device)
    x2_seed = seed + rank * 2 if int(attrs.get("weight_same", 0)) else seed
    x2 = rank_tensor(shapes[1], dtypes[1], range_of(1), x2_seed, device)
    bias = None
    if bool(attrs.get("is_bias", False)) and len(shapes) > 2 and shapes[2] is not None:
        bias = rank_tensor(shapes[2], dtypes[2], range_of(2), rank * 3, device)
    return {"x1": x1, "x2": x2, "bias": bias}


def rank_inputs(module: ModuleType, ctx: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    hook = getattr(module, "mc2_make_rank_inputs", None)
    if callable(hook):
        return dict(hook(ctx, payload))
    return default_inputs(payload, int(ctx["rank"]), ctx["device"])


# ---------------------------------------------------------------- the candidate's call


def _with_fallback(call: Callable[[], Any], positional: Callable[[], Any]) -> Any:
    """The official call convention: keywords, and positionally when the operator refuses them (TypeError)."""
    try:
        return call()
    except TypeError:
        return positional()


def builtin_call(operator: str, candidate: Callable[..., Any], ctx: dict[str, Any], inputs: dict[str, Any],
                 attrs: dict[str, Any]) -> Any:
    """The call of the three operators whose golden has no ``mc2_call_candidate`` (the official runner's own)."""
    x1, x2, comm, world = inputs["x1"], inputs["x2"], ctx["hcomm_info"], ctx["world_size"]
    bias, trans_b = inputs.get("bias"), bool(attrs.get("is_trans_b", False))
    if operator in ("MatmulReduceScatter", "MatmulAllReduce"):
        reduce_op = attrs.get("reduce_op", "sum")
        return _with_fallback(
            lambda: candidate(x1, x2, comm, world, reduce_op=reduce_op, bias=bias, is_trans_b=trans_b),
            lambda: candidate(x1, x2, comm, world, reduce_op, bias, trans_b))
    if operator == "AllGatherMatmul":
        gather = bool(attrs.get("gather_output", False))
        return _with_fallback(
            lambda: candidate(x1, x2, comm, world, bias=bias, gather_output=gather, is_trans_b=trans_b),
            lambda: candidate(x1, x2, comm, world, bias, gather, trans_b))
    raise RuntimeError(f"{operator}: its golden.py must define mc2_call_candidate(candidate, ctx, inputs, attrs) "
                       "(the official runner calls only three MC2 operators without one)")


def mc2_callable(target: dict[str, Any], device: str, candidate: Callable[..., Any] | None) -> Callable[..., Any]:
    """What a candidate rank calls with the rank's inputs as keywords: the task's call hook on the submission's
    operator (``candidate``), or, with none (a self-check), the distributed golden."""
    module = load_source(str(target["golden_source"]), str(target.get("golden_sha256") or ""),
                         str(target["rel_path"]))
    payload = target["payload"]
    attrs = dict(payload["attrs"])
    rank, world_size = int(target["rank"]), int(target["world_size"])
    ctx = make_ctx(rank, world_size, device, payload)
    golden = module.mc2_distributed_golden
    hook = getattr(module, "mc2_call_candidate", None)
    operator = str(payload["operator"])

    def call(**inputs: Any) -> Any:
        if candidate is None:
            return golden(ctx, inputs, attrs)
        if callable(hook):
            return hook(candidate, ctx, inputs, attrs)
        return builtin_call(operator, candidate, ctx, inputs, attrs)

    return call


# ---------------------------------------------------------------- the golden side


def mc2_prepare(req: dict[str, Any]) -> dict[str, Any]:
    """A golden rank: join the case's group, make this rank's inputs, run the distributed golden on float64 copies
    (the truth; ``precision`` fp64_cpu) and on the inputs as made (the native reference), leave the group."""
    stage = "join the process group"
    notes: list[str] = []
    try:
        join_group(req["group"])
        try:
            stage = "import golden.py"
            gm = load_golden(_path(req["op_dir"]), req["rel_path"], req["function_name"], req["name_lower"],
                             str(req.get("golden_sha256") or ""))
            payload = req["payload"]
            rank, world_size = int(req["group"]["rank"]), int(req["group"]["world_size"])
            ctx = make_ctx(rank, world_size, "cpu", payload)
            stage = "mc2_make_rank_inputs"
            inputs = rank_inputs(gm.module, ctx, payload)
            attrs = dict(payload["attrs"])
            hook = gm.module.mc2_distributed_golden
            stage = "mc2_distributed_golden (native)"
            native = flatten_outputs(hook(ctx, _copy(inputs), attrs))
            golden = native
            if req["precision"] == "fp64_cpu":
                stage = "mc2_distributed_golden (float64)"
                try:
                    golden = _rounded_like(flatten_outputs(hook(ctx, _upcast(inputs, upcast), attrs)), native)
                except Exception as exc:  # noqa: BLE001 - every rank takes the same path: the native stands
                    if needs_npu(exc):
                        raise
                    notes.append(f"the distributed golden does not run on float64 inputs ({type(exc).__name__}: "
                                 f"{str(exc)[:200]}): judged against its native-precision outputs")
        finally:
            leave_group()
    except BaseException as exc:  # noqa: BLE001 - every golden failure becomes a report
        reply = _error(stage, exc)
        if needs_npu(exc):
            reply["needs"] = NPU_MODULE
        return reply
    return {"ok": True, "inputs": inputs, "golden": golden, "native": native, "notes": notes}


def _error(stage: str, exc: BaseException) -> dict[str, Any]:
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith("golden.py")]
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    text = str(exc)
    oom = isinstance(exc, MemoryError) or "can't allocate memory" in text or "out of memory" in text.lower()
    return {"ok": False, "stage": stage, "oom": oom, "error": f"{stage}: {type(exc).__name__}: {text}{where}",
            "traceback": "".join(traceback.format_exception(exc))[-4000:]}


def _rounded_like(golden: list[Any], native: list[Any]) -> list[Any]:
    """The float64 truth rounded to each native output's floating dtype where the shapes agree (what the precision
    standard reads, as for a single-process golden)."""
    import torch

    out = []
    for i, g in enumerate(golden):
        n = native[i] if i < len(native) else None
        if (isinstance(g, torch.Tensor) and isinstance(n, torch.Tensor) and g.is_floating_point()
                and n.is_floating_point() and g.shape == n.shape and g.dtype != n.dtype):
            g = g.to(n.dtype)
        out.append(g)
    return out


def _path(text: str) -> Any:
    from pathlib import Path

    return Path(text)


def _copy(inputs: dict[str, Any]) -> dict[str, Any]:
    import torch

    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def _upcast(inputs: dict[str, Any], upcast: Callable[[Any], Any]) -> dict[str, Any]:
    import torch

    return {k: (upcast(v) if isinstance(v, (torch.Tensor, list)) and _tensors(v) else v) for k, v in inputs.items()}


def _tensors(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) or (isinstance(value, list) and bool(value)
                                               and all(isinstance(v, torch.Tensor) for v in value))


# ---------------------------------------------------------------- the ranks' private network


SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
IFF_UP, IFF_RUNNING = 0x1, 0x40


def loopback_up() -> None:
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP | IFF_RUNNING))


def main(argv: list[str]) -> int:
    """The holder of a rank group's private network: run as ``unshare --user --map-root-user --net python -m
    pytest_cannbench.workers.ranks_main <judge pid>``, it brings the new namespace's loopback interface up, says
    ``ready`` and waits until the judge closes its stdin or dies. Its namespaces live as long as it does; the
    group's workers enter them with ``nsenter`` (workers/ranks.py)."""
    procs.die_with_parent(int(argv[0]) if argv else 0)
    try:
        loopback_up()
    except OSError as exc:
        print(f"loopback: {exc}", flush=True)
        return 1
    print("ready", flush=True)
    sys.stdin.buffer.read()  # until the judge closes it (or dies: then the kernel ends this process)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

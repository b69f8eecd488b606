"""KernelBench problems inside a worker: load a problem or submission module, build its model, run it.

Runs only in worker processes, never in the judge. The golden worker runs the
reference ``Model`` (trusted task code) through :func:`prepare`; the candidate
worker builds ``ModelNew`` (untrusted) through :func:`build_callable`, and the
baseline worker builds the reference ``Model`` the same way for timing.

Parameters: both models are built from ``get_init_inputs()`` under the same
seed, and the reference's state dict (written to a judge-owned file by the golden
worker) is copied into the candidate's model wherever names and shapes match, so
weight initialisation cannot decide correctness. The candidate worker reads that
file; it never imports the reference module.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import os
import sys
import time
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any

_MODULES: dict[tuple[str, float], ModuleType] = {}
_MODELS: dict[tuple[Any, ...], Any] = {}


def load_module(path: str) -> ModuleType:
    """Import a problem or submission file under a unique module name (several may share a file name)."""
    key = (os.path.abspath(path), os.path.getmtime(path))
    module = _MODULES.get(key)
    if module is not None:
        return module
    name = "cannbench_kb_" + hashlib.sha256(key[0].encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(name, key[0])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up here
    spec.loader.exec_module(module)
    _MODULES[key] = module
    return module


def set_seed(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def build_model(module: ModuleType, class_name: str, init_inputs: list[Any], init_seed: int) -> Any:
    cls = getattr(module, class_name, None)
    if cls is None:
        raise AttributeError(f"{module.__file__} defines no class {class_name}")
    set_seed(init_seed)
    return cls(*init_inputs)


def copy_parameters(model: Any, state: dict[str, Any]) -> tuple[int, int]:
    """Copy every reference parameter or buffer whose name and shape match; returns (copied, skipped)."""
    import torch

    own = dict(model.named_parameters())
    own.update(dict(model.named_buffers()))
    copied = skipped = 0
    with torch.no_grad():
        for name, value in state.items():
            target = own.get(name)
            if target is None or tuple(target.shape) != tuple(value.shape):
                skipped += 1
                continue
            target.copy_(value.to(dtype=target.dtype))
            copied += 1
    return copied, skipped


def input_bytes(module: ModuleType) -> int:
    """Bytes of the tensors ``get_inputs()`` makes, measured on the meta device (nothing is allocated)."""
    import torch

    with torch.device("meta"):
        values = module.get_inputs()
    return sum(v.numel() * v.element_size() for v in _flat(values) if isinstance(v, torch.Tensor))


def _flat(values: Any) -> list[Any]:
    out: list[Any] = []
    for v in values if isinstance(values, (list, tuple)) else [values]:
        out.extend(_flat(v) if isinstance(v, (list, tuple)) else [v])
    return out


def outputs_of(result: Any) -> list[Any]:
    """A model's result as a flat list of outputs (a tuple or list of tensors, or one tensor)."""
    return _flat(result)


def _upcast(values: list[Any]) -> list[Any]:
    import torch

    return [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]


def _clone(values: list[Any]) -> list[Any]:
    import torch

    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def _reference(path: str, init_seed: int) -> tuple[ModuleType, Any, list[Any]]:
    """The problem module, its reference model and its init inputs, cached per process."""
    module = load_module(path)
    key = (os.path.abspath(path), os.path.getmtime(path), init_seed)
    cached = _MODELS.get(key)
    if cached is None:
        _MODELS.clear()  # one problem at a time: models can be large
        set_seed(init_seed)
        init_inputs = list(module.get_init_inputs())
        cached = _MODELS[key] = (build_model(module, "Model", init_inputs, init_seed), init_inputs)
    return module, cached[0], cached[1]


def _save_state(model: Any, path: str) -> None:
    import torch

    if os.path.exists(path):
        return
    tmp = f"{path}.tmp-{os.getpid()}"
    torch.save({k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, tmp)
    os.replace(tmp, path)


def prepare(req: dict[str, Any]) -> dict[str, Any]:
    """Golden-worker handler: inputs and reference outputs of one trial of one problem.

    ``req``: ``path``, ``seed`` (inputs), ``init_seed`` (model), ``state_file`` (where the reference
    state dict goes), ``accuracy`` (``cann`` adds the fp64 truth) and ``max_input_bytes`` (0: no limit).
    """
    import torch

    stage = "import problem"
    seconds: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        module = load_module(req["path"])
        limit = int(req.get("max_input_bytes") or 0)
        if limit:
            stage = "size inputs"
            size = input_bytes(module)
            if size > limit:
                return {"ok": True, "too_large": f"get_inputs() makes {size / 2**30:.2f} GiB of tensors, over the "
                                                 f"{limit / 2**30:.2f} GiB budget (cann_kb_max_input_gib)"}
        stage = "build Model"
        module, model, init_inputs = _reference(req["path"], req["init_seed"])
        _save_state(model, req["state_file"])
        stage = "get_inputs"
        set_seed(req["seed"])
        inputs = list(module.get_inputs())
        seconds["inputs"] = time.perf_counter() - t0
        stage = "Model.forward"
        t0 = time.perf_counter()
        with torch.no_grad():
            native = outputs_of(model(*_clone(inputs)))
        seconds["native"] = time.perf_counter() - t0
        golden = None
        if req.get("accuracy") == "cann":
            stage = "Model.forward in float64"
            t0 = time.perf_counter()
            with torch.no_grad():
                wide = copy.deepcopy(model).double()
                golden = outputs_of(wide(*_upcast(inputs)))
            golden = [g.to(n.dtype) if isinstance(g, torch.Tensor) and isinstance(n, torch.Tensor)
                      and g.is_floating_point() and n.is_floating_point() else g for g, n in zip(golden, native)]
            seconds["golden"] = time.perf_counter() - t0
    except BaseException as exc:  # noqa: BLE001 - every reference failure becomes a golden_error
        return {"ok": False, "oom": isinstance(exc, MemoryError), "error": f"{stage}: {type(exc).__name__}: {exc}",
                "traceback": "".join(traceback.format_exception(exc))[-4000:]}
    return {"ok": True, "inputs": inputs, "init_inputs": init_inputs, "native": native, "golden": golden,
            "seconds": seconds}


def build_callable(target: dict[str, Any], device: str) -> Callable[..., Any]:
    """Candidate/baseline-worker resolve step for ``{"kind": "kernelbench", ...}`` targets.

    ``module``: the file to import (a submission's ModelNew, or the problem itself for self-check and
    the baseline); ``class_name``; ``init_inputs`` and ``init_seed`` as the reference was built;
    ``state_file``: the reference state dict; ``arity``: positional inputs ``x0``...; ``compile``:
    wrap in ``torch.compile`` (the optional compiled baseline).
    """
    import torch

    module = load_module(target["module"])
    model = build_model(module, target["class_name"], list(target["init_inputs"]), int(target["init_seed"]))
    if target.get("state_file"):
        copy_parameters(model, torch.load(target["state_file"], map_location="cpu", weights_only=True))
    if device != "cpu":
        model = model.to(device)
    runner = torch.compile(model) if target.get("compile") else model
    names = [f"x{i}" for i in range(int(target["arity"]))]

    def call(**kwargs: Any) -> Any:
        with torch.no_grad():
            return runner(*[kwargs[n] for n in names])

    return call

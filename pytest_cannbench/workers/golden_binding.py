"""Load a ``golden.py`` and bind case data to its functions, as the official harness does.

Runs inside the golden worker only (never in the judge, never in the candidate
worker). The binding rules are the official ones (docs/task-format.md, "golden.py"):

* the main function is the identifier before ``(`` in proto's ``schema``, else ``name.lower()``;
  ``<fn>_oracle`` replaces it for the fp64 truth, ``<fn>_bench`` for the same-precision reference;
* a parameter is a tensor if its annotation text contains ``Tensor`` (a TensorList if it also
  contains ``List[``); tensor parameters take the generated inputs by position, in signature order;
  every other parameter is an attr, filled by name from the case, else from the Python default
  (passed explicitly, so the candidate receives the same value the golden used);
* ``get_input`` receives the proto input names and the case attrs and returns the inputs, in the
  order of the golden's tensor parameters; ``get_output`` post-processes all outputs alike.

Differences, on purpose: ``skip2_exist`` is passed to ``get_input`` only when it accepts it
(the official harness injects it everywhere: docs/task-format.md); a tensor parameter left without a value is
omitted when it has a default, so a truncated ``input_shape`` reads as "not given".
"""

from __future__ import annotations

import hashlib
import inspect
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

_SPECIAL_FLOATS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan, "+inf": math.inf}


class GoldenError(RuntimeError):
    """The golden (not the candidate) failed; the judge reports it as ``golden_error``."""


@dataclass
class GoldenModule:
    module: ModuleType
    main: Callable[..., Any]
    oracle: Callable[..., Any] | None
    bench: Callable[..., Any] | None
    get_input: Callable[..., Any] | None
    get_output: Callable[..., Any] | None
    sha256: str = ""  # of the bytes that were run


_MODULES: dict[str, GoldenModule] = {}


def source_hash(op_dir: Path) -> str:
    """What the golden cache keys on: golden.py's bytes (a changed golden invalidates its cache)."""
    return hashlib.sha256((op_dir / "golden.py").read_bytes()).hexdigest()


def load_golden(op_dir: Path, rel_path: str, function_name: str, name_lower: str, sha256: str = "") -> GoldenModule:
    """Import ``golden.py`` under a unique module name (they all share one file name); cached per process.

    ``sha256`` pins the content collection saw: the bytes are read once, checked and compiled as read, so a
    golden rewritten during the session (by anything) is refused with its name, never run as a new truth.
    """
    key = str(op_dir.resolve())
    cached = _MODULES.get(key)
    if cached is not None and (not sha256 or cached.sha256 == sha256):
        return cached
    path = op_dir / "golden.py"
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise GoldenError(f"{path}: cannot be read: {exc.strerror}") from None
    digest = hashlib.sha256(source).hexdigest()
    if sha256 and digest != sha256:
        raise GoldenError(f"{path} changed after collection (pinned sha256 {sha256[:12]}, now {digest[:12]}): "
                          "the harness refuses a golden that changes during a session; restore it and rerun")
    module_name = "_cannbench_golden." + "".join(c if c.isalnum() else "_" for c in rel_path)
    module = ModuleType(module_name)
    module.__file__ = str(path)
    sys.modules[module_name] = module
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - the pinned golden, as read
    except BaseException as exc:  # the golden's import-time failure, reported with its file
        sys.modules.pop(module_name, None)
        raise GoldenError(f"{path}: import failed: {type(exc).__name__}: {exc}") from exc
    main_name = function_name if callable(getattr(module, function_name, None)) else name_lower
    main = getattr(module, main_name, None)
    if not callable(main):
        raise GoldenError(f"{op_dir / 'golden.py'}: no function {function_name!r} (schema) or {name_lower!r}")

    def hook(name: str) -> Callable[..., Any] | None:
        value = getattr(module, name, None)
        return value if callable(value) else None

    loaded = GoldenModule(module=module, main=main, oracle=hook(f"{main_name}_oracle"),
                          bench=hook(f"{main_name}_bench"), get_input=hook("get_input"),
                          get_output=hook("get_output"), sha256=digest)
    _MODULES[key] = loaded
    return loaded


# ------------------------------------------------------------------------------------------
# parameters


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "tensor" | "list" | "attr"
    has_default: bool
    default: Any


def signature_params(func: Callable[..., Any]) -> list[Param]:
    params = []
    for name, p in inspect.signature(func).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        annotation = "" if p.annotation is inspect.Parameter.empty else str(p.annotation)
        if "Tensor" in annotation:
            kind = "list" if "List[" in annotation or "list[" in annotation else "tensor"
        else:
            kind = "attr"
        has_default = p.default is not inspect.Parameter.empty
        params.append(Param(name, kind, has_default, p.default if has_default else None))
    return params


def convert_attr(value: Any) -> Any:
    """Special-float strings become floats; other strings stay strings (their type is the author's intent)."""
    if isinstance(value, str) and value.strip().lower() in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[value.strip().lower()]
    return value


@dataclass(frozen=True)
class Binding:
    """How one case maps onto the golden's parameters; plain data so it can be cached and sent."""

    entries: tuple[tuple[str, str, Any], ...]  # (param, "input", index) | (param, "attr", value)

    def kwargs(self, inputs: list[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, source, value in self.entries:
            out[name] = inputs[value] if source == "input" else value
        return out


def _plain(value: Any) -> bool:
    """Builtin data only: it is cached and sent between processes."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return False


def bind(func: Callable[..., Any], inputs: list[Any], attrs: dict[str, Any]) -> Binding:
    """Tensors by position in signature order, attrs by name, defaults for the rest."""
    entries: list[tuple[str, str, Any]] = []
    tensor_index = 0
    missing = []
    for p in signature_params(func):
        if p.kind in ("tensor", "list"):
            index = tensor_index
            tensor_index += 1
            if index < len(inputs) and inputs[index] is not None:
                entries.append((p.name, "input", index))
            elif not p.has_default:
                if index < len(inputs):
                    entries.append((p.name, "input", index))  # an explicit null placeholder
                else:
                    missing.append(p.name)
        elif p.name in attrs:
            entries.append((p.name, "attr", convert_attr(attrs[p.name])))
        elif p.has_default:
            if _plain(p.default):  # passed explicitly, as the official calling convention does
                entries.append((p.name, "attr", p.default))
        else:
            missing.append(p.name)
    if missing:
        raise GoldenError(f"golden parameter(s) {', '.join(map(repr, missing))} get no value: not enough "
                          f"inputs in input_shape or attrs, and no default in golden.py")
    return Binding(tuple(entries))


def call_get_input(hook: Callable[..., Any], input_names: list[str], inputs: list[Any],
                   attrs: dict[str, Any]) -> list[Any]:
    kwargs: dict[str, Any] = {name: (inputs[i] if i < len(inputs) else None) for i, name in enumerate(input_names)}
    for key, value in attrs.items():
        kwargs.setdefault(key, value)
    params = inspect.signature(hook).parameters
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    if "skip2_exist" not in kwargs and ("skip2_exist" in params or accepts_any):
        kwargs["skip2_exist"] = True
    if not accepts_any:
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    result = hook(**kwargs)
    if isinstance(result, (list, tuple)):
        return list(result)
    raise GoldenError(f"get_input returned {type(result).__name__}, expected a list or tuple of inputs")


def call_get_output(hook: Callable[..., Any], outputs: list[Any], output_names: list[str],
                    attrs: dict[str, Any]) -> list[Any]:
    kwargs: dict[str, Any] = {name: (outputs[i] if i < len(outputs) else None) for i, name in enumerate(output_names)}
    for key, value in attrs.items():
        kwargs.setdefault(key, value)
    params = inspect.signature(hook).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    result = hook(**kwargs)
    return flatten_outputs(result)


# ------------------------------------------------------------------------------------------
# tensors


def upcast(value: Any) -> Any:
    """Floating tensors to float64 (the fp64 truth); integers, bools and None unchanged."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(torch.float64) if value.is_floating_point() else value
    if isinstance(value, list):
        return [upcast(v) for v in value]
    return value


def flatten_outputs(result: Any) -> list[Any]:
    """One nesting level flattened, non-tensors as None, tensors detached, contiguous and on the CPU."""
    import torch

    items = list(result) if isinstance(result, (list, tuple)) else [result]
    flat: list[Any] = []
    for item in items:
        for value in (item if isinstance(item, (list, tuple)) else [item]):
            flat.append(value.detach().cpu().contiguous() if isinstance(value, torch.Tensor) else None)
    return flat


def describe(native: list[Any]) -> list[Any] | None:
    """What a prepare request's ``like`` carries: (dtype name, shape) of each native output, or None when any
    output is not a tensor (then nothing can stand in for running the reference)."""
    import torch

    if not all(isinstance(n, torch.Tensor) for n in native):
        return None
    return [[str(n.dtype).removeprefix("torch."), list(n.shape)] for n in native]

"""JIT extensions (``torch.utils.cpp_extension.load_inline`` / ``load``): the key of a call, the manifest of what
the build stage compiled, and the worker-side router that loads exactly those artefacts.

The candidate worker may not exec (seccomp), so it cannot run ninja or a compiler, and torch's ``load_inline``
always invokes ninja, even when its build directory is up to date. The build stage (``submission.jit_main``, a child
of the build sandbox) therefore runs the real ``load_inline`` once per session and records, for each call, a
key (the extension's name plus a hash of its sources and flags) and the built library. In the worker,
:func:`install_router` replaces ``load_inline`` and ``load`` before the submission is imported: a call whose
key the manifest holds gets the prebuilt library (loaded the way torch itself loads it); any other call fails
with "this extension was not compiled at build time". Functions of a loaded Python extension are wrapped in a
profiler label (:data:`CUSTOM_PREFIX`) so the guard can see that a custom kernel ran (``--cann-guard kernel``).

This module runs in the build child and in the candidate worker: standard library at import, torch inside.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench.guard.builtin_ops import CUSTOM_PREFIX, OWN_OPS

MANIFEST_ENV = "CANNBENCH_JIT_MANIFEST"  # the worker's pointer to the manifest (set by the build stage)
MANIFEST_NAME = "manifest.json"
ARTEFACTS = "_cannbench_jit"  # the folder under the private install that holds the prebuilt libraries
NOT_BUILT = "this extension was not compiled at build time"
# Arguments that do not change the library that is built.
IGNORED = frozenset({"verbose", "build_directory", "keep_intermediates"})


@dataclass
class Extension:
    """One compiled extension: its key, torch's (possibly versioned) module name and the library's folder."""

    key: str
    name: str
    module_name: str
    directory: str  # holds <module_name><LIB_EXT>
    python_module: bool


@dataclass
class Manifest:
    """What the build stage compiled (``extensions``) and, per imported module, whether its import succeeded."""

    extensions: list[Extension] = field(default_factory=list)
    modules: dict[str, str] = field(default_factory=dict)  # module label -> "" (ok) or the error message

    def to_json(self) -> str:
        return json.dumps({"extensions": [asdict(e) for e in self.extensions], "modules": self.modules}, indent=1)

    @classmethod
    def read(cls, path: Path) -> Manifest:
        data = json.loads(path.read_text())
        return cls(extensions=[Extension(**e) for e in data.get("extensions", [])],
                   modules={str(k): str(v) for k, v in dict(data.get("modules", {})).items()})

    def find(self, key: str) -> Extension | None:
        return next((e for e in self.extensions if e.key == key), None)


def _digest_file(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return f"unreadable:{os.path.basename(path)}"


def call_key(function: Callable[..., Any], kind: str, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[str, str, bool]:
    """``(key, name, is_python_module)`` of a ``load_inline``/``load`` call: the name plus a hash of every
    argument that shapes the library; ``load``'s source files count by content, never by path."""
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    values = {k: v for k, v in bound.arguments.items() if k not in IGNORED}
    if kind == "load":
        sources = values.get("sources")
        files = [sources] if isinstance(sources, str) else list(sources or [])
        values["sources"] = [_digest_file(str(f)) for f in files]
    text = json.dumps({"kind": kind, **values}, sort_keys=True, default=repr)
    name = str(values.get("name"))
    return f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:24]}", name, bool(values.get("is_python_module"))


def _labelled(module: Any, label: str) -> Any:
    """A stand-in for a Python extension whose callables run inside a profiler label of ours."""
    from torch.autograd import profiler

    record = profiler.record_function
    proxy = types.ModuleType(getattr(module, "__name__", label))
    for attr in dir(module):
        value = getattr(module, attr)
        if callable(value) and not attr.startswith("__") and not isinstance(value, type):
            def wrapped(*a: Any, __fn: Callable[..., Any] = value, __tag: str = f"{CUSTOM_PREFIX}{label}.{attr}",
                        **k: Any) -> Any:
                with record(__tag):
                    return __fn(*a, **k)
            wrapped.__name__ = wrapped.__qualname__ = attr
            wrapped.__doc__ = getattr(value, "__doc__", None)
            setattr(proxy, attr, wrapped)
        else:
            setattr(proxy, attr, value)
    # torch resolves record_function's exit op lazily, inside the first label (1-13 ms measured): the first call
    # of an extension would carry it as its own kernel's time (guard.coverage). Resolved here, outside any call.
    with record(f"{CUSTOM_PREFIX}{label}"):
        pass
    return proxy


def load_prebuilt(ext: Extension) -> Any:
    """The prebuilt library loaded as torch's own ``_import_module_from_library`` loads a fresh build."""
    import torch
    from torch.utils import cpp_extension

    before = set(torch._C._dispatch_get_all_op_names()) if not ext.python_module else set()
    loaded = cpp_extension._import_module_from_library(ext.module_name, ext.directory, ext.python_module)
    if not ext.python_module:
        OWN_OPS.update(set(torch._C._dispatch_get_all_op_names()) - before)
        return loaded
    return _labelled(loaded, ext.name)


def install_router(manifest: Manifest) -> None:
    """In the candidate worker, before the submission's import: ``load_inline``/``load`` load the prebuilt
    library of their key, or fail; nothing is ever compiled here."""
    from torch.utils import cpp_extension

    def router(kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def route(*args: Any, **kwargs: Any) -> Any:
            key, name, _ = call_key(original, kind, args, kwargs)
            ext = manifest.find(key)
            if ext is None:
                raise RuntimeError(f"{NOT_BUILT}: {kind}(name={name!r}) with these sources and flags (key {key}) "
                                   "was not called while the submission was imported in the build stage; "
                                   "compile at import time (module level), with the same arguments")
            return load_prebuilt(ext)
        route.__name__ = route.__qualname__ = kind
        route.__wrapped__ = original  # type: ignore[attr-defined]
        return route

    cpp_extension.load_inline = router("load_inline", cpp_extension.load_inline)
    cpp_extension.load = router("load", cpp_extension.load)


def route_from_environment() -> Manifest | None:
    """The worker's entry: route when the build stage left a manifest (``$CANNBENCH_JIT_MANIFEST``)."""
    path = os.environ.get(MANIFEST_ENV)
    if not path:
        return None
    manifest = Manifest.read(Path(path))
    install_router(manifest)
    return manifest


def uses_jit(text: str) -> bool:
    """Whether a source may compile at import (cheap text test deciding whether the build stage runs)."""
    return "load_inline" in text or "cpp_extension" in text

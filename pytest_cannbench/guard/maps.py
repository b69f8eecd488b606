"""Code mapped into the candidate worker from outside the places code may come from, read from its
``/proc/<pid>/maps``.

A library the submission loads after its import (``ctypes``, ``dlopen`` from C, ``torch.ops.load_library`` of
a file it wrote to TMPDIR, a ``memfd``) is a finding unless it lies in the submission's private install (its
own code, already scanned by :mod:`elf_symbols`), under the interpreter's, torch's and the system's library
directories, or in a directory where the worker builds code while it runs (its private Triton cache: there the
judge reads the file's imports itself, :func:`library_problems`). Only executable file mappings count: that is
what loaded code is, whatever the file's name, and data files mapped for reading are not code. The judge reads
the maps of the frozen worker, so nothing the submission does inside its process changes what is read; the
worker's guard reads its own as a first line.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import sys
from collections.abc import Iterable
from pathlib import Path

from pytest_cannbench.guard import builtin_ops
from pytest_cannbench.guard.elf_symbols import read_imports, torch_exports
from pytest_cannbench.guard.torch_imports import forbidden_symbol
from pytest_cannbench.outcome import BUILTIN_COMPUTE, HOST_LIBRARY

DELETED = " (deleted)"
RUNTIME_LOADER = frozenset({"dlopen", "dlmopen", "dlsym", "dlvsym", "dlclose", "dlerror", "dladdr", "dlinfo"})
SYSTEM_LIBRARY_DIRS = ("/lib", "/lib32", "/lib64", "/libx32", "/usr/lib", "/usr/lib32", "/usr/lib64",
                       "/usr/libx32")


def executable_files(maps_text: str) -> list[str]:
    """Paths of the file-backed executable mappings, in order, each once (`` (deleted)`` kept: it matters)."""
    found: dict[str, None] = {}
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and "x" in parts[1] and parts[5].startswith("/"):
            found.setdefault(parts[5].rstrip("\n"), None)
    return list(found)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def foreign_mappings(maps_text: str, install_dir: str | None, allowed_prefixes: Iterable[str]) -> list[str]:
    """The executable mappings outside ``install_dir`` and ``allowed_prefixes`` (all real paths). A deleted file
    or a ``memfd`` is foreign wherever it was: nobody can scan it any more."""
    # "/" as a root would allow everything: a prefix that broad is dropped, never trusted
    roots = [r.rstrip(os.sep) for r in ([install_dir] if install_dir else []) + list(allowed_prefixes)]
    roots = [r for r in roots if r]
    foreign = []
    for path in executable_files(maps_text):
        if path.endswith(DELETED) or path.startswith("/memfd:") or not any(_under(path, r) for r in roots):
            foreign.append(path)
    return foreign


def trusted_prefixes() -> tuple[str, ...]:
    """Where the worker's code may come from besides the install: the interpreter, torch, the system's library
    directories. Found without importing torch (the judge has no need to)."""
    roots = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        roots.append(os.path.dirname(spec.origin))
    roots += [d for d in SYSTEM_LIBRARY_DIRS if os.path.isdir(d)]
    return tuple(dict.fromkeys(os.path.realpath(r) for r in roots))


def foreign_findings(pid: int, install_dir: str | None, allowed: Iterable[str] | None = None,
                     own_dirs: Iterable[str] = ()) -> list[tuple[str, str]]:
    """``(host_library, detail)`` findings for the worker ``pid`` (read while it is frozen); [] when its maps
    cannot be read (it is gone: the caller sees that anyway). ``own_dirs``: where the worker builds code while it
    runs (its private Triton cache): a library mapped from there is its own once the judge's own reading of its
    imports passes the wheel's symbol rules (a ``builtin_compute`` finding otherwise). Seen on an H200: Triton's
    launcher modules, built there at the first launch, were refused as ``host_library``."""
    try:
        with open(f"/proc/{pid}/maps") as fh:
            text = fh.read()
    except OSError:
        return []
    install = os.path.realpath(install_dir) if install_dir else None
    found = foreign_mappings(text, install, trusted_prefixes() if allowed is None else allowed)
    roots = [os.path.realpath(d) for d in own_dirs if d]
    findings: list[tuple[str, str]] = []
    for path in found:
        if roots and not path.endswith(DELETED) and any(_under(path, r) for r in roots):
            findings += [(BUILTIN_COMPUTE, detail) for detail in library_problems(path)]
        else:
            findings.append((HOST_LIBRARY, f"mapped code from outside its install: {path}"))
    return findings[:10]


def library_problems(path: str) -> list[str]:
    """What a shared object built while the submission runs imports that its wheel's libraries may not (ATen's
    kernels, BLAS and friends: :mod:`torch_imports`), as the build's symbol scan says it for those."""
    try:
        imports = read_imports(Path(path))
    except (OSError, ValueError, struct.error) as exc:
        return [f"{path}: unreadable shared object ({exc})"]
    # dlopen/dlsym are allowed here: Triton's launchers find libcuda with them, and whatever they load is mapped,
    # so the mapped-library check sees it (a wheel's libraries are scanned before anything runs, and may not)
    names = sorted({name.split("@", 1)[0] for name in imports.undefined} - RUNTIME_LOADER)
    exported = torch_exports()
    found = [f"{os.path.basename(path)} imports {name} ({why})" for name in names
             if (why := forbidden_symbol(name, exported))]
    found += [f"{os.path.basename(path)} {why}" for lib in imports.needed
              if (why := builtin_ops.forbidden_library(lib))]
    return found

"""Code mapped into the candidate worker from outside the places code may come from, read from its
``/proc/<pid>/maps``.

A library the submission loads after its import (``ctypes``, ``dlopen`` from C, ``torch.ops.load_library`` of
a file it wrote to TMPDIR, a ``memfd``) is a finding unless it lies in the submission's private install (its
own code, already scanned by :mod:`elf_symbols`) or under the interpreter's, torch's and the system's library
directories. Only executable file mappings count: that is what loaded code is, whatever the file's name, and
data files mapped for reading are not code. The judge reads the maps of the frozen worker, so nothing the
submission does inside its process changes what is read; the worker's guard reads its own as a first line.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterable

from pytest_cannbench.outcome import HOST_LIBRARY

DELETED = " (deleted)"
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


def foreign_findings(pid: int, install_dir: str | None,
                     allowed: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """``(host_library, detail)`` findings for the worker ``pid`` (read while it is frozen); [] when its maps
    cannot be read (it is gone: the caller sees that anyway)."""
    try:
        with open(f"/proc/{pid}/maps") as fh:
            text = fh.read()
    except OSError:
        return []
    install = os.path.realpath(install_dir) if install_dir else None
    found = foreign_mappings(text, install, trusted_prefixes() if allowed is None else allowed)
    return [(HOST_LIBRARY, f"mapped code from outside its install: {path}") for path in found[:10]]

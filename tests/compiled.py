"""Shared objects compiled for the tests straight with the C/C++ compiler (against torch's headers where asked),
cached per machine by their source, flags and compiler: one build serves every test and session that needs it."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

CACHE = Path(tempfile.gettempdir()) / f"cannbench-test-guard-evidence-{os.getuid()}"


def compile_library(kind: str, source: Path, *extra: str) -> Path:
    """``source`` compiled into a shared object (``kind`` "torch": C++ against torch's headers and libraries,
    "c": plain C), cached by its bytes, the flags and the compiler."""
    flags = list(extra)
    if kind == "torch":
        import torch
        from torch.utils import cpp_extension

        lib = Path(torch.__file__).parent / "lib"
        flags += [f"-I{p}" for p in cpp_extension.include_paths()] + [
            "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-L{lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}"]
    compiler = "c++" if kind in ("torch", "c++") else "cc"
    key = hashlib.sha256(source.read_bytes() + "\0".join([compiler, *flags]).encode()).hexdigest()[:16]
    target = CACHE / f"{source.stem}-{key}.so"
    if not target.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-g0", "-w", str(source), "-o", str(partial), *flags],
                       check=True, capture_output=True)
        os.replace(partial, target)
    return target

"""What a submission's shared objects import: the undefined dynamic symbols of an ELF file, read by the judge.

The profiler sees every ATen op a kernel calls through the dispatcher; compiled code can also call a kernel
directly (``at::native::exp``, ``at::cpu::exp``, a BLAS routine) or look one up by name at run time. Those
calls leave no trace in the profiler, but they do leave a trace here: the symbol must be imported. Each
import is checked against :mod:`builtin_ops` (the same allowlist as the profiler's), before any submission
code runs. Plain ``struct`` parsing: no binutils needed, nothing of the file is executed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from pytest_cannbench.guard.builtin_ops import forbidden_symbol

ELF_MAGIC = b"\x7fELF"
SHT_DYNSYM = 11


@dataclass(frozen=True)
class SymbolProblem:
    library: str
    symbol: str
    reason: str

    def detail(self) -> str:
        return f"{Path(self.library).name} imports {self.symbol} ({self.reason})"


def undefined_symbols(path: Path) -> list[str]:
    """Names of the undefined symbols in the dynamic symbol table; raises ValueError for a file that is not
    a well-formed 64-bit or 32-bit ELF."""
    data = path.read_bytes()
    if data[:4] != ELF_MAGIC or len(data) < 64:
        raise ValueError("not an ELF file")
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    if wide:
        shoff, = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
        header, symbol, entry = order + "IIQQQQIIQQ", order + "IBBHQQ", 24
    else:
        shoff, = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
        header, symbol, entry = order + "IIIIIIIIII", order + "IIIBBH", 16
    sections = []
    for i in range(shnum):
        start = shoff + i * shentsize
        if start + struct.calcsize(header) > len(data):
            raise ValueError("section header table runs past the end of the file")
        f = struct.unpack_from(header, data, start)
        sections.append((f[1], f[4], f[5], f[6]))  # type, offset, size, link (same places in both classes)
    names: list[str] = []
    for kind, offset, size, link in sections:
        if kind != SHT_DYNSYM or link >= len(sections):
            continue
        str_offset, str_size = sections[link][1], sections[link][2]
        for pos in range(offset, min(offset + size, len(data) - entry + 1), entry):
            fields = struct.unpack_from(symbol, data, pos)
            name_at, shndx = fields[0], fields[3] if wide else fields[5]
            if shndx != 0 or not name_at or name_at >= str_size:
                continue
            end = data.find(b"\0", str_offset + name_at, str_offset + str_size)
            names.append(data[str_offset + name_at:end if end >= 0 else str_offset + str_size].decode("ascii",
                                                                                                   "replace"))
    return names


def scan_libraries(root: Path) -> tuple[list[SymbolProblem], list[str]]:
    """``(problems, unreadable)`` over every shared object under ``root`` (the private install)."""
    found: list[tuple[str, str, str]] = []
    unreadable: list[str] = []
    for lib in sorted(p for p in root.rglob("*") if p.is_file() and (p.suffix == ".so" or ".so." in p.name)):
        try:
            names = undefined_symbols(lib)
        except (OSError, ValueError, struct.error) as exc:
            unreadable.append(f"{lib}: {exc}")
            continue
        for name in sorted(set(names)):
            reason = forbidden_symbol(name.split("@", 1)[0])
            if reason:
                found.append((str(lib), name, reason))
    readable = demangle([name for _, name, _ in found])
    return [SymbolProblem(lib, shown, reason) for (lib, _, reason), shown in zip(found, readable)], unreadable


def demangle(names: list[str]) -> list[str]:
    """Readable forms for messages, in one c++filt run (when present; the mangled names otherwise)."""
    import shutil
    import subprocess

    tool = shutil.which("c++filt")
    if tool is None or not names:
        return list(names)
    try:
        done = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return list(names)
    shown = done.stdout.splitlines()
    return [s or n for n, s in zip(names, shown)] if len(shown) == len(names) else list(names)

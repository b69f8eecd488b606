"""What a submission's compiled code imports: the undefined dynamic symbols and the needed libraries of every ELF
file in its private install, read by the judge.

The profiler sees every ATen op a kernel calls through the dispatcher; compiled code can also call a kernel
directly (``at::native::exp``, ``at::cpu::exp``, a BLAS routine) or look one up by name at run time. Those
calls leave no trace in the profiler, but they do leave a trace here: the symbol must be imported. Each
import is checked against :mod:`builtin_ops` (the same allowlist as the profiler's), before any submission
code runs.

The file is read the way the dynamic loader reads it, not the way a linker does: program headers, then
``PT_DYNAMIC``, then ``DT_SYMTAB``/``DT_STRTAB``/``DT_STRSZ`` with the symbol count from ``DT_HASH`` or
``DT_GNU_HASH``. Section headers are optional to the loader, so a library with ``e_shnum`` zeroed still loads:
here it scans the same. Files are picked by their magic number, whatever their name (``kernel.bin`` loaded with
``torch.ops.load_library`` is a library too). Plain ``struct`` parsing: no binutils, nothing executed.
"""

from __future__ import annotations

import importlib.util
import os
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from pytest_cannbench.guard.builtin_ops import forbidden_library
from pytest_cannbench.guard.torch_imports import forbidden_symbol, qualified_name

ELF_MAGIC = b"\x7fELF"
PT_LOAD, PT_DYNAMIC = 1, 2
SHT_SYMTAB, SHT_DYNSYM = 2, 11
DT_NULL, DT_NEEDED, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT = 0, 1, 4, 5, 6, 10, 11
DT_GNU_HASH = 0x6FFFFEF5
MAX_SYMBOLS = 1 << 22  # more than any real library; a forged count must not make the scan spin


@dataclass(frozen=True)
class SymbolProblem:
    library: str
    symbol: str  # as a person reads it (demangled, with its parameters)
    reason: str
    name: str = ""  # short: the qualified name without parameters (``c10::Dispatcher::findSchemaOrThrow``)

    def detail(self) -> str:
        return f"{Path(self.library).name} imports {self.symbol} ({self.reason})"


def summary(problems: list[SymbolProblem], names: int = 4) -> list[str]:
    """One line per library and reason, a few short names each: what a case's message says (the board keeps the
    full list), so that a library with many refused imports leaves room for the other findings."""
    groups: dict[tuple[str, str], list[str]] = {}
    for p in problems:
        groups.setdefault((Path(p.library).name, p.reason), []).append(p.name or p.symbol)
    lines = []
    for (library, reason), found in groups.items():
        shown = list(dict.fromkeys(found))
        more = f" and {len(shown) - names} more" if len(shown) > names else ""
        lines.append(f"{library} imports {', '.join(shown[:names])}{more} ({reason})")
    return lines


@dataclass
class ElfImports:
    """What one ELF file needs from outside itself."""

    undefined: list[str] = field(default_factory=list)
    needed: list[str] = field(default_factory=list)


class _Elf:
    """Field access over one file's bytes in its class (32/64-bit) and byte order; ValueError when malformed."""

    def __init__(self, data: bytes) -> None:
        if data[:4] != ELF_MAGIC or len(data) < 52:
            raise ValueError("not an ELF file")
        if data[4] not in (1, 2) or data[5] not in (1, 2):
            raise ValueError("unknown ELF class or byte order")
        self.data, self.wide = data, data[4] == 2
        o = "<" if data[5] == 1 else ">"
        if self.wide:
            self.phdr, self.shdr, self.dyn, self.sym = o + "IIQQQQQQ", o + "IIQQQQIIQQ", o + "qQ", o + "IBBHQQ"
            self.e_type, = self.unpack(o + "H", 0x10)
            self.phoff, = self.unpack(o + "Q", 0x20)
            self.shoff, = self.unpack(o + "Q", 0x28)
            self.phentsize, self.phnum, self.shentsize, self.shnum = self.unpack(o + "HHHH", 0x36)
        else:
            self.phdr, self.shdr, self.dyn, self.sym = o + "IIIIIIII", o + "IIIIIIIIII", o + "iI", o + "IIIBBH"
            self.e_type, = self.unpack(o + "H", 0x10)
            self.phoff, = self.unpack(o + "I", 0x1C)
            self.shoff, = self.unpack(o + "I", 0x20)
            self.phentsize, self.phnum, self.shentsize, self.shnum = self.unpack(o + "HHHH", 0x2A)
        self.order = o

    def unpack(self, fmt: str, at: int) -> tuple[Any, ...]:
        if at < 0 or at + struct.calcsize(fmt) > len(self.data):
            raise ValueError(f"a structure at offset {at:#x} runs past the end of the file")
        return struct.unpack_from(fmt, self.data, at)

    def segments(self) -> list[tuple[int, int, int, int]]:
        """``(type, offset, vaddr, filesz)`` of every program header."""
        if self.phnum and self.phentsize < struct.calcsize(self.phdr):
            raise ValueError("program headers too small")
        found = []
        for i in range(self.phnum):
            f = self.unpack(self.phdr, self.phoff + i * self.phentsize)
            found.append((f[0], f[2], f[3], f[5]) if self.wide else (f[0], f[1], f[2], f[4]))
        return found

    def string(self, table: int, size: int, at: int) -> str:
        if at >= size or table + at >= len(self.data):
            raise ValueError("a name lies outside its string table")
        end = self.data.find(b"\0", table + at, min(table + size, len(self.data)))
        return self.data[table + at:end if end >= 0 else table + size].decode("ascii", "replace")

    def symbols(self, table: int, count: int, strtab: int, strsz: int, defined: bool = False) -> list[str]:
        """Undefined (``st_shndx == 0``) named symbols of a symbol table at file offset ``table``; the defined
        ones instead with ``defined``."""
        size = struct.calcsize(self.sym)
        names = []
        for i in range(1, count):  # entry 0 is the null symbol
            fields = self.unpack(self.sym, table + i * size)
            name_at, shndx = fields[0], fields[3] if self.wide else fields[5]
            if (shndx != 0) is defined and name_at:
                names.append(self.string(strtab, strsz, name_at))
        return names


def _offset(loads: list[tuple[int, int, int, int]], address: int) -> int:
    """The file offset of a virtual address, through the ``PT_LOAD`` segments (as the loader maps them)."""
    for _kind, offset, vaddr, filesz in loads:
        if vaddr <= address < vaddr + filesz:
            return offset + address - vaddr
    raise ValueError(f"address {address:#x} is in no loaded segment")


def _gnu_hash_count(elf: _Elf, at: int) -> int:
    """Symbols covered by a ``DT_GNU_HASH`` table: one past the last chain's end (``symoffset`` if empty)."""
    nbuckets, symoffset, bloom_size, _shift = elf.unpack(elf.order + "IIII", at)
    buckets_at = at + 16 + bloom_size * (8 if elf.wide else 4)
    if nbuckets > MAX_SYMBOLS or bloom_size > MAX_SYMBOLS:
        raise ValueError("implausible GNU hash table")
    last = max(elf.unpack(f"{elf.order}{nbuckets}I", buckets_at), default=0) if nbuckets else 0
    if last < symoffset:
        return symoffset
    chains_at = buckets_at + 4 * nbuckets
    while last - symoffset < MAX_SYMBOLS:
        value, = elf.unpack(elf.order + "I", chains_at + 4 * (last - symoffset))
        if value & 1:
            return last + 1
        last += 1
    raise ValueError("unterminated GNU hash chain")


def _dynamic_imports(elf: _Elf, defined: bool = False) -> ElfImports | None:
    """Imports through ``PT_DYNAMIC`` (None for a file without a dynamic segment); with ``defined``, ``undefined``
    holds the symbols the file defines instead (its exports)."""
    segments = elf.segments()
    loads = [s for s in segments if s[0] == PT_LOAD]
    dynamic = [s for s in segments if s[0] == PT_DYNAMIC]
    if not dynamic:
        return None
    _kind, dyn_offset, _vaddr, dyn_size = dynamic[0]
    tags: dict[int, int] = {}
    needed_at: list[int] = []
    entry = struct.calcsize(elf.dyn)
    for pos in range(dyn_offset, dyn_offset + dyn_size - entry + 1, entry):
        tag, value = elf.unpack(elf.dyn, pos)
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            needed_at.append(value)
        else:
            tags.setdefault(tag, value)
    if DT_STRTAB not in tags:
        raise ValueError("a dynamic segment without a string table")
    strtab, strsz = _offset(loads, tags[DT_STRTAB]), tags.get(DT_STRSZ, 0)
    imports = ElfImports(needed=[elf.string(strtab, strsz, at) for at in needed_at])
    if DT_SYMTAB not in tags:
        return imports
    symtab = _offset(loads, tags[DT_SYMTAB])
    sym_size = tags.get(DT_SYMENT, struct.calcsize(elf.sym))
    if sym_size != struct.calcsize(elf.sym):
        raise ValueError(f"unexpected symbol entry size {sym_size}")
    if DT_HASH in tags:
        count, = elf.unpack(elf.order + "I", _offset(loads, tags[DT_HASH]) + 4)  # nbucket, nchain
    elif DT_GNU_HASH in tags:
        count = _gnu_hash_count(elf, _offset(loads, tags[DT_GNU_HASH]))
    elif strtab > symtab:  # no hash table: the loader cannot look anything up; read up to the strings
        count = (strtab - symtab) // sym_size
    else:
        raise ValueError("a dynamic symbol table without a hash table")
    if count > MAX_SYMBOLS:
        raise ValueError(f"implausible symbol count {count}")
    imports.undefined = elf.symbols(symtab, count, strtab, strsz, defined)
    return imports


def _section_symbols(elf: _Elf, kinds: tuple[int, ...]) -> list[str]:
    """Undefined symbols through the section headers (relocatable objects, and a second opinion)."""
    if not elf.shnum or not elf.shoff:
        return []
    sections = []
    for i in range(elf.shnum):
        f = elf.unpack(elf.shdr, elf.shoff + i * elf.shentsize)
        sections.append((f[1], f[4], f[5], f[6]))  # type, offset, size, link (same places in both classes)
    names: list[str] = []
    size = struct.calcsize(elf.sym)
    for kind, offset, length, link in sections:
        if kind in kinds and link < len(sections):
            names += elf.symbols(offset, length // size, sections[link][1], sections[link][2])
    return names


def read_imports(path: Path) -> ElfImports:
    """Undefined symbols and ``DT_NEEDED`` of one ELF file; ValueError when it is not a well-formed ELF."""
    elf = _Elf(path.read_bytes())
    dynamic = _dynamic_imports(elf)
    imports = dynamic or ElfImports()
    # the loader reads only the dynamic symbols; without a dynamic segment (an object file) the full table
    extra = _section_symbols(elf, (SHT_DYNSYM,) if dynamic is not None else (SHT_DYNSYM, SHT_SYMTAB))
    if extra:
        imports.undefined = list(dict.fromkeys(imports.undefined + extra))
    return imports


def defined_symbols(path: Path) -> list[str]:
    """Names of the dynamic symbols the file defines (what it exports), through ``PT_DYNAMIC``; the file is mapped,
    not read (libtorch_cpu is 400 MB)."""
    import mmap

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        elf = _Elf(data)  # type: ignore[arg-type]  # an mmap reads like bytes here
        dynamic = _dynamic_imports(elf, defined=True)
        names = dynamic.undefined if dynamic is not None else []
        del elf
    return names


def undefined_symbols(path: Path) -> list[str]:
    """Names of the undefined symbols the file imports (see :func:`read_imports`)."""
    return read_imports(path).undefined


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


def elf_files(root: Path) -> list[Path]:
    """Every regular file under ``root`` that starts with the ELF magic number, whatever its name."""
    return sorted(p for p in root.rglob("*") if p.is_file() and is_elf(p))


def scan_libraries(root: Path) -> tuple[list[SymbolProblem], list[str]]:
    """``(problems, unreadable)`` over every ELF file under ``root`` (the private install)."""
    found: list[tuple[str, str, str]] = []
    unreadable: list[str] = []
    exported = torch_exports()
    for lib in elf_files(root):
        try:
            imports = read_imports(lib)
        except (OSError, ValueError, struct.error) as exc:
            unreadable.append(f"{lib}: {exc}")
            continue
        for name in sorted(set(imports.undefined)):
            reason = forbidden_symbol(name.split("@", 1)[0], exported)
            if reason:
                found.append((str(lib), name, reason))
        for needed in imports.needed:
            reason = forbidden_library(needed)
            if reason:
                found.append((str(lib), f"the library {needed}", reason))
    readable = demangle([name for _, name, _ in found])
    return [SymbolProblem(lib, shown, reason, short_name(name)) for (lib, name, reason), shown in zip(found, readable)
            ], unreadable


def short_name(name: str) -> str:
    """A symbol's qualified name without parameters, or the name as it is (C names, ``the library ...``)."""
    return qualified_name(name.split("@", 1)[0]) or name


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


@lru_cache(maxsize=1)
def torch_exports() -> frozenset[str]:
    """The dynamic symbols torch's own shared libraries define (``libtorch*``, ``libc10*``, ``libshm``), read
    without importing torch; empty when torch or its libraries cannot be found or read."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return frozenset()
    lib = Path(os.path.dirname(spec.origin)) / "lib"
    names: set[str] = set()
    for path in sorted(lib.glob("lib*.so*")) if lib.is_dir() else []:
        if path.name.startswith(("libtorch", "libc10", "libshm")) and "test" not in path.name:
            try:
                names.update(n.split("@", 1)[0] for n in defined_symbols(path))
            except (OSError, ValueError, struct.error):
                continue
    return frozenset(names)

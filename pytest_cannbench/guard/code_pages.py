"""Code patched in the worker's memory, found by the judge in the frozen worker's page tables.

The worker's own tamper check compares Python objects, and native code goes below it: ``mprotect`` libc's text
writable, write a jump into ``clock_gettime`` (or into the vDSO's), ``mprotect`` it back, and every clock read of
the process runs slow, while ``/proc/<pid>/maps`` still names libc at the same address. Writing a private file
mapping copies the page: the mapping now holds an anonymous page where the file's was. So after each call and
batch, with the worker frozen, the judge reads ``/proc/<pid>/maps`` and, for every executable file-backed mapping
and the ``[vdso]``, the ``/proc/<pid>/pagemap`` entries of its pages: a page present (or swapped) that is not a
file page is a private copy, i.e. code the process wrote (smaps counts the same pages as ``Anonymous`` /
``Private_Dirty``; pagemap reads only the executable ranges, 0.7 ms against 7.6 ms for a whole smaps beside a
1 GiB region, and a page-cache page not yet written back, as a freshly built library's, is not mistaken for one).
It also finds code **replaced** rather than written: an executable mapping of anything else (anonymous memory,
another file) lying inside a library's image (between two of its mappings, or before its first one when that one
does not start at offset 0), and a worker without the ``[vdso]`` every process gets. Each is ``api_tampered``.

What it cannot see: a patch undone before the judge looks (the file mapped again over the page from inside the
patched function), and the clock reached through a data pointer (a GOT entry of libpython or the interpreter
rewritten to the submission's own function): neither leaves an executable page written. The CPU-time floor, from
a meter that keeps exited threads (``workers.cpu_meter``), is the layer against the slowed clock either way.
A host whose tracing agents attach uprobes to a library the worker maps shows their breakpoint pages as written
code too; the finding says so when the kernel lists uprobes.
"""

from __future__ import annotations

import os
import struct
import sys
from typing import NamedTuple

from pytest_cannbench.outcome import API_TAMPERED

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
VDSO = "[vdso]"
# pagemap's top byte: bit 7 present, bit 6 swapped, bit 5 a file page (or shared anonymous memory)
_COPY_TABLE = bytes(1 if v & 0xC0 and not v & 0x20 else 0 for v in range(256))
UPROBE_EVENTS = ("/sys/kernel/tracing/uprobe_events", "/sys/kernel/debug/tracing/uprobe_events")


class Mapping(NamedTuple):
    start: int
    end: int
    perms: str
    offset: int
    identity: tuple[str, int, str]  # (device, inode, path) of a file; ("", 0, name) otherwise
    path: str  # "" for anonymous memory; [vdso], [heap], [anon:...] for the kernel's names
    executable: bool
    file_backed: bool

    @property
    def name(self) -> str:
        return os.path.basename(self.path.removesuffix(" (deleted)")) if self.file_backed else (
            self.path or "anonymous memory")


def parse_maps(text: str) -> list[Mapping]:
    found = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        try:
            low, _, high = parts[0].partition("-")
            path = parts[5].strip() if len(parts) == 6 else ""
            inode = int(parts[4])
            backed = inode != 0 and path.startswith("/")
            found.append(Mapping(int(low, 16), int(high, 16), parts[1], int(parts[2], 16),
                                 (parts[3], inode, path) if backed else ("", 0, path), path, "x" in parts[1],
                                 backed))
        except ValueError:
            continue
    return found


def replaced(mappings: list[Mapping], expect_vdso: bool = True) -> list[str]:
    """Executable mappings that took the place of a library's own pages, and a missing vDSO."""
    problems = []
    has_code = {m.identity for m in mappings if m.file_backed and m.executable}
    first: dict[tuple[str, int, str], int] = {}  # each file's lowest mapping
    for i, m in enumerate(mappings):
        if m.file_backed:
            first.setdefault(m.identity, i)
    for i, m in enumerate(mappings):
        if not m.executable or i + 1 >= len(mappings):
            continue
        after = mappings[i + 1]
        if after.identity == m.identity or after.start != m.end or after.identity not in has_code:
            continue
        inside = i > 0 and mappings[i - 1].end == m.start and mappings[i - 1].identity == after.identity
        in_front = after.offset > 0 and first[after.identity] == i + 1
        if inside or in_front:
            problems.append(f"{after.name}'s code at {m.start:#x}-{m.end:#x} was replaced by "
                            f"{m.name} ({m.perms})")
    if expect_vdso and not any(m.path == VDSO for m in mappings):
        problems.append("the vDSO (the kernel's clock code) was unmapped or replaced")
    return problems


def _copied_pages(pid: int, code: list[Mapping]) -> dict[Mapping, list[int]]:
    """Per mapping, the addresses of its pages that are private copies (read from pagemap)."""
    found: dict[Mapping, list[int]] = {}
    fd = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY)
    try:
        for m in code:
            pages = (m.end - m.start) // PAGE
            data = os.pread(fd, pages * 8, m.start // PAGE * 8)
            if len(data) < pages * 8:
                continue
            # the entries' top bytes, flagged at C speed: present or swapped, not a file page
            flags = (data[7::8] if sys.byteorder == "little" else data[0::8]).translate(_COPY_TABLE)
            if 1 in flags:
                found[m] = [m.start + k * PAGE for k, bad in enumerate(flags) if bad]
    finally:
        os.close(fd)
    return found


def _copied_pages_smaps(pid: int, code: list[Mapping]) -> dict[Mapping, list[int]]:
    """The same from smaps' ``Anonymous`` (slower: it walks every mapping), where pagemap cannot be read."""
    wanted = {(m.start, m.end): m for m in code}
    found: dict[Mapping, list[int]] = {}
    current: Mapping | None = None
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                try:
                    low, high = (int(v, 16) for v in head.split("-"))
                except ValueError:
                    current = None
                    continue
                current = wanted.get((low, high))
            elif current is not None and head == "Anonymous:":
                kib = int(line.split()[1])
                if kib:
                    found[current] = [current.start] * max(1, kib * 1024 // PAGE)
    return found


def _differs(pid: int, m: Mapping, address: int) -> str:
    """How the page at ``address`` differs from the file's bytes, when both can be read ("" otherwise)."""
    if not m.file_backed or m.path.endswith(" (deleted)"):
        return ""
    try:
        with open(f"/proc/{pid}/mem", "rb") as mem:
            mem.seek(address)
            now = mem.read(PAGE)
        with open(m.path, "rb") as fh:
            fh.seek(m.offset + (address - m.start))
            then = fh.read(PAGE)
    except (OSError, OverflowError, ValueError):
        return ""
    changed = [k for k in range(min(len(now), len(then))) if now[k] != then[k]]
    if not changed:
        return "its bytes equal the file's (written back or rewritten)"
    first = m.offset + address - m.start + changed[0]
    return f"{len(changed)} byte(s) differ from the file, from file offset {first:#x}"


def _uprobes() -> str:
    for path in UPROBE_EVENTS:
        try:
            with open(path) as fh:
                lines = [line.strip() for line in fh if line.strip()]
        except OSError:
            continue
        if lines:
            return f" (this host lists {len(lines)} uprobe(s), whose breakpoints also copy pages: {lines[0][:120]})"
    return ""


def findings(pid: int, expect_vdso: bool = True, unread: list[str] | None = None) -> list[tuple[str, str]]:
    """``(api_tampered, detail)`` for code written or replaced in the frozen worker ``pid``; [] when its maps
    cannot be read (it is gone: the caller sees that anyway). Why written pages could not be looked for (neither
    pagemap nor smaps readable: only replaced code is found then) is appended to ``unread``."""
    try:
        with open(f"/proc/{pid}/maps") as fh:
            mappings = parse_maps(fh.read())
    except OSError:
        return []
    if not mappings:  # gone (a zombie has no maps): nothing left to judge
        return []
    problems = [f"code replaced in memory: {p}" for p in replaced(mappings, expect_vdso)]
    code = [m for m in mappings if m.executable and (m.file_backed or m.path == VDSO)]
    try:
        copied = _copied_pages(pid, code)
    except OSError:
        try:
            copied = _copied_pages_smaps(pid, code)
        except (OSError, ValueError, struct.error) as exc:
            copied = {}
            if unread is not None:
                unread.append(f"the worker's pagemap and smaps are unreadable ({exc}): code written in memory is "
                              "not looked for, only code replaced")
    for m, pages in copied.items():
        how = _differs(pid, m, pages[0])
        problems.append(f"code patched in memory: {len(pages)} page(s) of {m.name}'s executable mapping "
                        f"{m.start:#x}-{m.end:#x} are private copies the process wrote (first at {pages[0]:#x}"
                        f"{', ' + how if how else ''}){_uprobes()}")
    return [(API_TAMPERED, p[:600]) for p in problems[:5]]


def vdso_expected() -> bool:
    """Whether processes here get a vDSO (the judge's own maps show one)."""
    try:
        with open("/proc/self/maps") as fh:
            return any(line.rstrip().endswith(VDSO) for line in fh)
    except OSError:
        return False

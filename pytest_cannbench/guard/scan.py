"""A static scan of a submission's sources, reported as telemetry (leaderboard ``flags``), never as a verdict.

It walks the submission's tree and reports every line of its Python (:mod:`scan_python`) and C/C++/CUDA
(:mod:`scan_cpp`) sources that matches a rule: the cheap, naive-form detectors of the reward-hacking threat
model. Renaming, ``getattr`` with computed strings or ``exec`` of an encoded blob evade them, and an honest
submission can trip some, so a hit is something to look at; the runtime checks decide. The rules and the
scan's bookkeeping hits are listed in docs/security.md. Nothing scanned is imported or executed, and torch
is not imported: the scan runs wherever the sources are.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from pytest_cannbench.guard.scan_cpp import scan_cpp
from pytest_cannbench.guard.scan_hits import RULES, Collector, Hit
from pytest_cannbench.guard.scan_python import scan_python

__all__ = ["RULES", "Hit", "flags_of", "scan_file", "scan_source", "scan_tree", "summarize"]

PY_SUFFIXES = frozenset({".py"})
C_SUFFIXES = frozenset({".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp"})
SKIP_DIRS = frozenset({
    "build", "dist", ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", ".eggs",
    "site-packages", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache",
})


def _decode(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return data.decode("utf-8", errors="replace")


def scan_source(path: str, data: bytes | str, *, own_packages: Iterable[str] = ()) -> list[Hit]:
    """Scan one file's contents; ``path`` (relative, ``/``-separated) picks the language by its suffix."""
    raw = data.encode("utf-8", errors="replace") if isinstance(data, str) else data
    text = data if isinstance(data, str) else _decode(data)
    lines = text.splitlines()
    out = Collector(path, lines)
    suffix = os.path.splitext(path)[1].lower()
    if suffix in PY_SUFFIXES:
        scan_python(path, raw, lines, out, own_packages)
    elif suffix in C_SUFFIXES:
        scan_cpp(text, out)
    return sorted(out.hits.values(), key=_sort_key)


def _sort_key(hit: Hit) -> tuple[str, int, str, str]:
    return (hit.path, hit.line, hit.rule, hit.snippet)


def _skip_dir(path: str, name: str) -> bool:
    return name in SKIP_DIRS or name.endswith(".egg-info") or os.path.isfile(os.path.join(path, "pyvenv.cfg"))


def _own_packages(root: str) -> frozenset[str]:
    """Top-level module and package names of the tree (patching them is not ``monkeypatch``)."""
    names: set[str] = set()
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return frozenset()
    for entry in entries:
        if entry.name.endswith(".py"):
            names.add(entry.name[:-3])
        elif entry.is_dir(follow_symlinks=False) and not _skip_dir(entry.path, entry.name):
            names.add(entry.name)
            if entry.name == "src":  # src layout
                names.update(_own_packages(entry.path))
    return frozenset(names)


def scan_file(path: str | Path, rel: str | None = None, *, max_bytes: int = 2_000_000,
              own_packages: Iterable[str] = ()) -> list[Hit]:
    """Scan one file (not following a symbolic link, reading at most ``max_bytes + 1`` bytes)."""
    path = os.fspath(path)
    rel = rel or os.path.basename(path)
    try:
        st = os.lstat(path)
    except OSError:
        return []
    if stat.S_ISLNK(st.st_mode):
        return [Hit("symlink", rel, 0, "symbolic link, not followed")]
    if not stat.S_ISREG(st.st_mode):
        return []
    if st.st_size > max_bytes:
        return [Hit("file_too_large", rel, 0, f"{st.st_size} bytes > {max_bytes}")]
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError:
        return []
    if len(data) > max_bytes:
        return [Hit("file_too_large", rel, 0, f"over {max_bytes} bytes")]
    return scan_source(rel, data, own_packages=own_packages)


def scan_tree(root: Path, *, max_files: int = 2000, max_bytes: int = 2_000_000) -> list[Hit]:
    """Scan the Python and C/C++/CUDA sources under ``root``; hits sorted by path, line and rule.

    Skips ``build``, ``dist``, VCS, cache and virtual-environment directories (any directory holding a
    ``pyvenv.cfg``), does not follow symbolic links, reads no file over ``max_bytes`` (``file_too_large``) and
    stops after ``max_files`` sources (``too_many_files``). ``root`` may also be a single file.
    """
    root_s = os.fspath(root)
    if os.path.isfile(root_s) and not os.path.islink(root_s):
        return scan_file(root_s, os.path.basename(root_s), max_bytes=max_bytes)
    own = _own_packages(root_s)
    suffixes = PY_SUFFIXES | C_SUFFIXES
    hits: list[Hit] = []
    count = 0
    for dirpath, dirnames, filenames in os.walk(root_s, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not _skip_dir(os.path.join(dirpath, d), d))
        for name in sorted(filenames):
            if os.path.splitext(name)[1].lower() not in suffixes:
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root_s).replace(os.sep, "/")
            if count >= max_files:
                hits.append(Hit("too_many_files", ".", 0, f"stopped after {max_files} files at {rel}"))
                return sorted(hits, key=_sort_key)
            count += 1
            hits.extend(scan_file(full, rel, max_bytes=max_bytes, own_packages=own))
    return sorted(hits, key=_sort_key)


def summarize(hits: Iterable[Hit]) -> dict[str, int]:
    """Rule -> number of hits, keys sorted."""
    counts: dict[str, int] = {}
    for hit in hits:
        counts[hit.rule] = counts.get(hit.rule, 0) + 1
    return dict(sorted(counts.items()))


def flags_of(hits: Iterable[Hit]) -> list[str]:
    """The leaderboard flags: ``scan:<rule>`` for every rule with a hit, sorted."""
    return sorted({f"scan:{hit.rule}" for hit in hits})

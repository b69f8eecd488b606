"""On-disk cache of golden outputs, so a second run of the same cases computes no golden.

The key covers everything the outputs depend on: golden.py's bytes, the case
as written, the seed, the input options, the golden precision, the torch
version and this cache's format. Entries are written atomically (temp file +
rename), so parallel xdist workers and killed runs never leave a torn entry;
an unreadable entry is treated as a miss and rewritten. Its size is bounded: at the end of a
session the least recently used entries go until it holds at most ``--cann-golden-cache-max`` GiB
(:func:`prune`; reading an entry counts as using it), with the partial files killed writers left.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_cannbench.options import DEFAULT_MIN_FREE_GIB

FORMAT = 3


def cache_key(*, golden_sha: str, case: dict[str, Any], seed: int, dist: str, compat: str, precision: str,
              torch_version: str, input_names: list[str], lean: bool = False) -> str:
    """``lean``: an entry whose native reference may be deferred (asked ``like`` another input set)."""
    fields = {"format": FORMAT, "golden": golden_sha, "case": case, "seed": seed, "dist": dist,
              "compat": compat, "precision": precision, "torch": torch_version, "inputs": input_names}
    if lean:  # full entries keep the keys they always had
        fields["lean"] = True
    blob = json.dumps(fields, sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()


class GoldenCacheWarning(UserWarning):
    """The cache stopped writing; grading goes on without it."""


STALE_PARTIAL_S = 3600.0  # a partial write this old belongs to a killed writer, not a running one


@dataclass
class GoldenCache:
    root: Path
    min_free_bytes: int = int(DEFAULT_MIN_FREE_GIB * (1 << 30))  # stop writing below this much free disk
    disabled_reason: str | None = None  # set once the cache stops writing (disk full, unwritable)

    def _low_disk(self, where: Path) -> str | None:
        free = shutil.disk_usage(where).free
        if free >= self.min_free_bytes:
            return None
        return (f"{free / (1 << 30):.1f} GiB free on {where}, under the {self.min_free_bytes / (1 << 30):g} GiB "
                "floor (cann_golden_cache_min_free)")

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.pt"

    def writable(self) -> bool:
        """Still writing, with room left on the disk (checked before each entry)."""
        if self.disabled_reason:
            return False
        probe = self.root if self.root.exists() else self.root.parent
        try:
            self.disabled_reason = self._low_disk(probe)
        except OSError:
            pass
        return self.disabled_reason is None

    def load(self, key: str) -> dict[str, Any] | None:
        import torch

        path = self.path(key)
        if not path.is_file():
            return None
        try:
            entry = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception:  # noqa: BLE001 - a damaged entry is a miss
            return None
        try:
            os.utime(path)  # used now: the last entry prune removes (a read-only cache is still read)
        except OSError:
            pass
        return entry

    def store(self, key: str, entry: dict[str, Any]) -> bool:
        """Write an entry; a cache that cannot be written stops writing but never fails a case."""
        import torch

        if self.disabled_reason:
            return False
        path = self.path(key)
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.disabled_reason = self._low_disk(path.parent)
            if self.disabled_reason:
                return False
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pt")
            with os.fdopen(fd, "wb") as fh:
                torch.save(entry, fh)
            os.replace(tmp, path)
            return True
        except OSError as exc:
            self.disabled_reason = f"cannot write {path.parent}: {exc.strerror or exc}"
            if tmp:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            return False


@dataclass
class Pruned:
    """What :func:`prune` did: entries and partial files removed, and what the cache holds after."""

    removed: int = 0
    freed_bytes: int = 0
    kept: int = 0
    kept_bytes: int = 0

    def describe(self, max_bytes: int) -> str:
        gib = 1 << 30
        return (f"golden cache: removed {self.removed} least recently used files ({self.freed_bytes / gib:.1f} "
                f"GiB); it holds {self.kept} entries, {self.kept_bytes / gib:.1f} GiB, under its "
                f"{max_bytes / gib:g} GiB bound (cann_golden_cache_max)")


def _is_partial(name: str) -> bool:
    return name.startswith(".tmp-") or ".pt.tmp-" in name  # GoldenCache.store's and the golden worker's


def prune(root: Path, max_bytes: int, *, now: float | None = None) -> Pruned:
    """Remove the least recently used entries of the cache at ``root`` until it holds at most ``max_bytes``,
    and every partial write older than :data:`STALE_PARTIAL_S` (a running writer's are younger). An entry's
    modification time is its last use (:meth:`GoldenCache.load` touches it). Another session reading an entry
    removed under it keeps its mapping (or sees a miss and computes it again): pruning never fails a case."""
    now = time.time() if now is None else now
    done = Pruned()
    entries: list[tuple[float, int, Path]] = []
    try:
        shards = [d for d in root.iterdir() if d.is_dir()]
    except OSError:
        return done
    for shard in shards:
        try:
            files = list(os.scandir(shard))
        except OSError:
            continue
        for f in files:
            try:
                st = f.stat(follow_symlinks=False)
            except OSError:
                continue
            if not f.is_file(follow_symlinks=False):
                continue
            if _is_partial(f.name):
                if now - st.st_mtime > STALE_PARTIAL_S and _remove(Path(f.path)):
                    done.removed += 1
                    done.freed_bytes += st.st_size
            elif f.name.endswith(".pt"):
                entries.append((st.st_mtime, st.st_size, Path(f.path)))
    total, kept = sum(size for _, size, _ in entries), len(entries)
    entries.sort(key=lambda e: (e[0], str(e[2])))  # oldest use first; ties in a stable order
    for _, size, path in entries:
        if total <= max_bytes:
            break
        if _remove(path):
            total, kept = total - size, kept - 1
            done.removed += 1
            done.freed_bytes += size
    done.kept, done.kept_bytes = kept, total
    return done


def _remove(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except OSError:
        return False

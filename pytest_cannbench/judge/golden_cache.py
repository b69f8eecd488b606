"""On-disk cache of golden outputs, so a second run of the same cases computes no golden.

The key covers everything the outputs depend on: golden.py's bytes, the case
as written, the seed, the input options, the golden precision, the torch
version and this cache's format. Entries are written atomically (temp file +
rename), so parallel xdist workers and killed runs never leave a torn entry;
an unreadable entry is treated as a miss and rewritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = 3


def cache_key(*, golden_sha: str, case: dict, seed: int, dist: str, compat: str, precision: str,
              torch_version: str, input_names: list[str]) -> str:
    blob = json.dumps({"format": FORMAT, "golden": golden_sha, "case": case, "seed": seed, "dist": dist,
                       "compat": compat, "precision": precision, "torch": torch_version, "inputs": input_names},
                      sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()


class GoldenCacheWarning(UserWarning):
    """The cache stopped writing; grading goes on without it."""


DEFAULT_MIN_FREE_GIB = 4.0  # never fill the disk with cache entries (--cann-golden-cache-min-free)


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
                "floor (--cann-golden-cache-min-free)")

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
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception:  # noqa: BLE001 - a damaged entry is a miss
            return None

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

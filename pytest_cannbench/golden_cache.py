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
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

FORMAT = 2


def cache_key(*, golden_sha: str, case: dict, seed: int, dist: str, compat: str, precision: str,
              torch_version: str, input_names: list[str]) -> str:
    blob = json.dumps({"format": FORMAT, "golden": golden_sha, "case": case, "seed": seed, "dist": dist,
                       "compat": compat, "precision": precision, "torch": torch_version, "inputs": input_names},
                      sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class GoldenCache:
    root: Path

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.pt"

    def load(self, key: str) -> Optional[dict[str, Any]]:
        import torch

        path = self._path(key)
        if not path.is_file():
            return None
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # noqa: BLE001 - a damaged entry is a miss
            return None

    def store(self, key: str, entry: dict[str, Any]) -> None:
        import torch

        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pt")
        try:
            with os.fdopen(fd, "wb") as fh:
                torch.save(entry, fh)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

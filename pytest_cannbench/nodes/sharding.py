"""``--cann-shard K/N``: a deterministic share of the operators, so N CI jobs grade disjoint parts of a task tree.

The plugin decides per operator directory while collecting, without seeing the others, so a share cannot be a
round robin over a sorted list: an operator goes to shard ``sha256(rel_path) mod N``. That is stable across
processes, machines and Python versions (no ``hash()`` randomisation), keeps every case of an operator in one
shard (its scores need all of them), and is balanced on average; ``cannbench merge`` joins the shards' boards.
"""

from __future__ import annotations

import hashlib

from pytest_cannbench.options.values import check_shard as _check
from pytest_cannbench.options.values import parse_shard

__all__ = ["in_shard", "normalise", "parse_shard", "shard_of"]


def normalise(rel_path: str) -> str:
    """The operator's path relative to the bench root, in the one spelling every machine agrees on."""
    return "/".join(part for part in str(rel_path).replace("\\", "/").split("/") if part not in ("", "."))


def shard_of(rel_path: str, n: int) -> int:
    """The 1-based shard of N that grades this operator."""
    _check(1, n)
    digest = hashlib.sha256(normalise(rel_path).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % n + 1


def in_shard(rel_path: str, k: int, n: int) -> bool:
    """Whether shard K of N grades the operator at ``rel_path`` (e.g. ``level1/exp``)."""
    _check(k, n)
    return shard_of(rel_path, n) == k

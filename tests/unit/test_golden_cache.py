"""The golden cache and the worker-side truncation of goldens: units, no processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from pytest_cannbench.judge.golden_cache import STALE_PARTIAL_S, GoldenCache, cache_key, prune
from pytest_cannbench.workers.golden_main import truncate_to_reference

KEY_ARGS = dict(golden_sha="a" * 64, case={"case_id": 1, "input_shape": [[4]]}, seed=1, dist="uniform",
                compat="fixed", precision="fp64_cpu", torch_version="2.13.0", input_names=["x"])


def test_key_changes_with_every_ingredient() -> None:
    base = cache_key(**KEY_ARGS)
    assert base == cache_key(**KEY_ARGS)
    for name, value in [("golden_sha", "b" * 64), ("case", {"case_id": 2, "input_shape": [[4]]}), ("seed", 2),
                        ("dist", "normal"), ("compat", "official"), ("precision", "native_cpu"),
                        ("torch_version", "2.14.0"), ("input_names", ["y"])]:
        assert cache_key(**{**KEY_ARGS, name: value}) != base, name


def test_round_trip_and_damaged_entry(tmp_path: Path) -> None:
    cache = GoldenCache(tmp_path, min_free_bytes=0)  # whatever the disk of the machine running the tests has
    entry = {"binding": [["x", "input", 0], ["alpha", "attr", 2.0]], "hooked": None,
             "golden": [torch.arange(4.0)], "native": [torch.arange(4.0).half()], "native_error": None,
             "has_get_output": False}
    assert cache.store("k" * 64, entry)
    loaded = cache.load("k" * 64)
    assert loaded["binding"] == entry["binding"] and torch.equal(loaded["golden"][0], entry["golden"][0])
    assert loaded["native"][0].dtype == torch.float16
    (path,) = list(tmp_path.rglob("*.pt"))
    path.write_bytes(b"garbage")
    assert cache.load("k" * 64) is None
    assert not list(tmp_path.rglob(".tmp-*"))


def test_low_disk_stops_writing_without_raising(tmp_path: Path) -> None:
    cache = GoldenCache(tmp_path, min_free_bytes=1 << 62)
    assert cache.store("k" * 64, {"golden": []}) is False
    assert "GiB free" in cache.disabled_reason and "cann_golden_cache_min_free" in cache.disabled_reason
    assert cache.store("j" * 64, {"golden": []}) is False
    assert not list(tmp_path.rglob("*.pt"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_directory_stops_writing(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        cache = GoldenCache(tmp_path / "sub", min_free_bytes=0)
        assert cache.store("k" * 64, {"golden": []}) is False
        assert "cannot write" in cache.disabled_reason
    finally:
        tmp_path.chmod(0o700)


def test_golden_truncated_to_reference_dtype_only_where_safe() -> None:
    golden = [torch.tensor([1 / 3], dtype=torch.float64), torch.tensor([2.5], dtype=torch.float64),
              torch.tensor([3], dtype=torch.int64), torch.tensor([1.0, 2.0], dtype=torch.float64), None]
    native = [torch.tensor([0.0], dtype=torch.float16), torch.tensor([0], dtype=torch.int32),
              torch.tensor([0], dtype=torch.int64), torch.tensor([0.0], dtype=torch.bfloat16), None]
    out = truncate_to_reference(golden, native)
    assert out[0].dtype == torch.float16 and out[0].item() == torch.tensor(1 / 3).half().item()
    assert out[1].dtype == torch.float64  # integer reference: the float truth is kept
    assert out[2] is golden[2]
    assert out[3].dtype == torch.float64  # shape differs from the reference: left for the checker to report
    assert out[4] is None


def _entry(root: Path, key: str, size: int, used: float) -> Path:
    path = root / key[:2] / f"{key}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (used, used))
    return path


def test_prune_removes_the_least_recently_used_until_under_the_bound(tmp_path: Path) -> None:
    now = 1_000_000.0
    paths = {name: _entry(tmp_path, name * 64, 1000, now - age) for name, age in
             [("a", 50), ("b", 40), ("c", 30), ("d", 20), ("e", 10)]}
    done = prune(tmp_path, 2500, now=now)
    assert [k for k, p in paths.items() if p.exists()] == ["d", "e"]  # the two used last
    assert (done.removed, done.freed_bytes, done.kept, done.kept_bytes) == (3, 3000, 2, 2000)
    assert "removed 3 least recently used files" in done.describe(2500)
    again = prune(tmp_path, 2500, now=now)  # already under: nothing more goes
    assert (again.removed, again.kept) == (0, 2)
    assert prune(tmp_path, 0, now=now).kept == 0  # a bound of nothing empties it


def test_reading_an_entry_counts_as_using_it(tmp_path: Path) -> None:
    cache = GoldenCache(tmp_path, min_free_bytes=0)
    assert cache.store("a" * 64, {"golden": [torch.zeros(100)]})
    assert cache.store("b" * 64, {"golden": [torch.zeros(100)]})
    old = cache.path("a" * 64).stat().st_mtime - 3600
    for key in ("a", "b"):
        os.utime(cache.path(key * 64), (old - (key == "b"), old - (key == "b")))
    assert cache.load("a" * 64) is not None  # "a" is read now: "b" is the least recently used
    prune(tmp_path, cache.path("a" * 64).stat().st_size)
    assert cache.path("a" * 64).exists() and not cache.path("b" * 64).exists()


def test_prune_removes_only_partial_writes_a_killed_writer_left(tmp_path: Path) -> None:
    now = 1_000_000.0
    stale = [tmp_path / "ab" / ".tmp-x1.pt", tmp_path / "ab" / f"{'a' * 64}.pt.tmp-123"]
    fresh = tmp_path / "ab" / ".tmp-x2.pt"  # a running writer's
    for path, age in [(stale[0], STALE_PARTIAL_S + 5), (stale[1], STALE_PARTIAL_S + 5), (fresh, 5)]:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"partial")
        os.utime(path, (now - age, now - age))
    done = prune(tmp_path, 1 << 40, now=now)
    assert done.removed == 2 and not any(p.exists() for p in stale) and fresh.exists()
    assert prune(tmp_path / "missing", 0).removed == 0  # no cache yet: nothing to do, no error

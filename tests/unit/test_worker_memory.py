"""What an idle worker keeps between cases (issue 22): a trusted worker gives its freed heap back after a call."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pytest_cannbench.workers.candidate_client import CandidateWorker

# 4,000 heap chunks of 64 KiB (under glibc's mmap threshold), then one small chunk above them that stays alive:
# freeing the 250 MiB below it leaves them in the heap, where only malloc_trim gives them back.
GOLDEN = '''import torch

_PINS = []


def fragment(x):
    chunks = [torch.empty(16384) for _ in range(4000)]
    for c in chunks:
        c.fill_(1.0)
    _PINS.append(torch.empty(16))
    del chunks
    return x * 2
'''


def _anon_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Anonymous: line")


@pytest.fixture
def golden_dir(tmp_path: Path) -> Path:
    op_dir = tmp_path / "level1" / "fragment"
    op_dir.mkdir(parents=True)
    (op_dir / "golden.py").write_text(GOLDEN)
    return op_dir


def test_a_trusted_worker_gives_freed_heap_back_after_a_call(tmp_path: Path, golden_dir: Path) -> None:
    worker = CandidateWorker(log_path=tmp_path / "w.log", workdir=tmp_path / "work", threads=1, mode="golden")
    worker.start()
    try:
        target = {"kind": "golden", "op_dir": str(golden_dir), "rel_path": "level1/fragment",
                  "function_name": "fragment", "name_lower": "fragment"}
        before = _anon_bytes(worker.pid)  # started: torch imported, its thread pools warm
        result = worker.call(target, {"x": torch.ones(1024)}, expected_out_bytes=4096, timeout=60)
        assert result.status == "ok", result.message
        assert float(result.outputs[0][0]) == 2.0
        assert _anon_bytes(worker.pid) < before + (64 << 20)  # without the trim: +250 MiB
    finally:
        worker.close()

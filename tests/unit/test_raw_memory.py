"""The harness's libc memory helpers: exact bytes, plain contiguous CPU tensors only, no ctypes object at call."""

from __future__ import annotations

import mmap
import sys

import pytest
import torch

from pytest_cannbench.timing import raw_memory


def test_copy_into_writes_the_tensors_bytes_at_the_offset() -> None:
    mm = mmap.mmap(-1, 4096)
    src = torch.arange(10, dtype=torch.float32)
    raw_memory.copy_into(mm, 64, src)
    assert torch.equal(torch.frombuffer(mm, dtype=torch.float32, count=10, offset=64), src)
    assert mm[:64] == bytes(64)
    with pytest.raises(ValueError):  # past the end of the buffer: refused by torch before any byte moves
        raw_memory.copy_into(mm, 4090, src)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64])
def test_fill_with_all_ones_bytes_is_nan_in_every_float_format(dtype) -> None:
    t = torch.ones(7, dtype=dtype)
    raw_memory.fill(t, 0xFF)
    assert torch.isnan(t).all()


def test_only_plain_contiguous_cpu_tensors() -> None:
    class Sub(torch.Tensor):
        pass

    for bad in (torch.ones(4, 4).t(), torch.ones(3).as_subclass(Sub), b"bytes"):
        with pytest.raises(TypeError):
            raw_memory.fill(bad, 0)


def test_no_ctypes_audit_event_after_import() -> None:
    """The guard's audit hook treats ctypes objects made after import as the submission's (host_library)."""
    events: list[str] = []
    armed = [True]

    def hook(event: str, args: tuple) -> None:
        if armed[0] and event.startswith("ctypes"):
            events.append(event)

    sys.addaudithook(hook)
    try:
        t, mm = torch.zeros(1 << 16), mmap.mmap(-1, 1 << 18)
        raw_memory.read_every_line(t)
        raw_memory.fill(t, 0)
        raw_memory.copy_into(mm, 0, t)
    finally:
        armed[0] = False  # audit hooks cannot be removed
    assert events == []


def test_read_every_line_notices_a_written_buffer() -> None:
    t = torch.zeros(1024)
    raw_memory.read_every_line(t)
    t.view(torch.uint8)[2000] = 1
    with pytest.raises(RuntimeError):
        raw_memory.read_every_line(t)

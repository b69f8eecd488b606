"""A case's generated inputs handed from the golden worker to the judge through a file.

The judge used to generate every input set a second time, bit for bit the same as the golden worker had: 0.72 s
for a 256 MiB input on this project's CI machine, 10% of an accuracy-only run's CPU. Writing the worker's copy into
a file costs 0.20 s, and the judge maps it (no read, no copy) and copies it once into the candidate's region.

The worker draws generic inputs straight into the file (:func:`generate`; :func:`write` for inputs made in memory
when that fails), before the golden or the native reference run, so a golden that writes into its inputs changes
nothing the judge sees. The judge maps the file copy-on-write and unlinks it at once: the mapping stays valid,
nothing is left on disk, and nothing written into the mapped tensors reaches the file. The worker holds no copy of
its own: it maps the file (also copy-on-write, :func:`view`) for each phase that reads the inputs, so at its peak it
holds their fp64 copies without the native ones beside them. Layout: each tensor's bytes at a 64-byte aligned
offset; the layout travels in the reply.
Hook-made inputs (``get_input``) keep travelling in the reply itself, and a golden-cache hit regenerates. The file
lives in the golden service's scratch directory beside the reply files (0600, created exclusively), which the
sandbox does not show a candidate (docs/security.md), and only between the worker's write and the judge's map.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from pytest_cannbench.taskformat.generate import DRAW_CHUNK, generate_inputs

ALIGN = 64

# one input: None, ["t", entry] for a tensor, ["l", [entry, ...]] for a tensor list; entry = [dtype, shape, offset]
Layout = list[Any]


def plan(inputs: list[Any]) -> tuple[Layout, int, list[tuple[Any, int]]] | None:
    """The layout, the file's size and every tensor with its offset; None when an input is of a kind the file
    cannot carry."""
    import torch

    layout: Layout = []
    placed: list[tuple[Any, int]] = []
    size = 0

    def place(t: Any) -> list[Any] | None:
        nonlocal size
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.is_sparse or t.is_quantized:
            return None
        placed.append((t, size))
        entry = [str(t.dtype).removeprefix("torch."), list(t.shape), size]
        size += _padded(t.numel() * t.element_size())
        return entry

    for item in inputs:
        if item is None:
            layout.append(None)
        elif isinstance(item, (list, tuple)):
            entries = [place(t) for t in item]
            if any(e is None for e in entries):
                return None
            layout.append(["l", entries])
        else:
            entry = place(item)
            if entry is None:
                return None
            layout.append(["t", entry])
    return layout, size, placed


def write(path: str, inputs: list[Any]) -> Layout | None:
    """The inputs' bytes into a new file at ``path``; the layout, or None when they cannot go through a file
    (then nothing is left at ``path``)."""
    import torch

    planned = plan(inputs)
    if planned is None:
        return None
    layout, size, placed = planned

    def fill(fd: int) -> None:
        for t, offset in placed:
            if t.numel():
                _write_all(fd, t.detach().contiguous().reshape(-1).view(torch.uint8).numpy(), offset)

    _new_file(path, size, fill)
    return layout


def _new_file(path: str, size: int, fill: Callable[[int], None]) -> None:
    """A new file of ``size`` bytes at ``path`` (created exclusively, 0600), written by ``fill(fd)``; on any
    error nothing is left there.

    Written with pwrite, not through a shared mapping: a store into a mapped page that is not yet in the page
    cache makes the kernel read it first (a reserved block reads as zeros it has to write), which cost 4.4 s of
    memset in the golden workers of an official level-1 run; a write of whole pages copies the bytes once. A full
    disk is ENOSPC, an OSError the caller turns into "no file" (the judge then generates its own copy), never a
    SIGBUS from a store into a mapping the disk cannot back."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)
        fill(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def generate(path: str, plans: Any, seed: int, *, dist: str, compat: str) -> Layout | None:
    """The case's inputs generated straight into a new file at ``path`` (``taskformat.generate.generate_inputs``
    with a sink): the same bytes and layout as :func:`write` of the generated tensors, without the tensors. Drawn
    in chunks, the values go from a small staging buffer into the page cache with ``pwrite``, so the golden
    worker never faults in (and the kernel never zeroes) a fresh copy of every input. None when an input is of
    a kind the file cannot carry (nothing is left at ``path``); an OSError (a full disk) leaves nothing either."""
    import torch

    layout: Layout = []
    places: list[tuple[Any, int]] = []  # per tensor in plan order: dtype, offset
    size = 0
    for plan in plans:
        if plan.kind == "none":
            layout.append(None)
            continue
        entries = []
        for t in plan.tensors:
            dtype = getattr(torch, t.dtype, None)
            if dtype is None:
                return None
            entries.append([t.dtype, list(t.shape), size])
            places.append((dtype, size))
            size += _padded(math.prod(t.shape) * dtype.itemsize)
        layout.append(["t", entries[0]] if plan.kind == "tensor" else ["l", entries])
    stages: dict[Any, Any] = {}

    def fill(fd: int) -> None:
        def sink(k: int) -> Callable[[int, Any], None]:
            dtype, base = places[k]

            def emit(start: int, values: Any) -> None:
                if values.dtype != dtype and values.numel() > DRAW_CHUNK:
                    values = values.to(dtype)
                elif values.dtype != dtype:  # a chunk of float64 draws: cast through a reused buffer
                    stage = stages.get(dtype)
                    if stage is None:
                        stage = stages[dtype] = torch.empty(DRAW_CHUNK, dtype=dtype)
                    values = stage[:values.numel()].copy_(values)
                if values.numel():
                    _write_all(fd, values.contiguous().view(torch.uint8).numpy(), base + start * dtype.itemsize)
            return emit

        generate_inputs(plans, seed, dist=dist, compat=compat, emit=sink)

    _new_file(path, size, fill)
    return layout


def _padded(nbytes: int) -> int:
    """A tensor's room in the file: its bytes, rounded up so the next one starts ``ALIGN``-aligned."""
    return -(-nbytes // ALIGN) * ALIGN


def _write_all(fd: int, data: Any, offset: int) -> None:
    """All of ``data`` (a 1-D uint8 array) at ``offset``: one pwrite moves at most about 2 GiB."""
    view = memoryview(data)
    while len(view):
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


def read(path: str, layout: Layout) -> list[Any]:
    """The inputs, as tensors over a private (copy-on-write) mapping of the file, which is unlinked here."""
    try:
        return view(path, layout)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def view(path: str, layout: Layout) -> list[Any]:
    """The inputs, as tensors over a private (copy-on-write) mapping of the file, which stays on disk: the
    golden worker's own copy once it has written the file, paged in from the page cache only while a tensor is
    held, so between its golden's phases it holds no second copy (a golden writing into them changes nothing
    in the file)."""
    import torch

    whole = torch.from_file(path, shared=False, size=os.path.getsize(path), dtype=torch.uint8)

    def tensor(entry: list[Any]) -> Any:
        dtype_name, shape, offset = entry
        dtype = getattr(torch, dtype_name)
        nbytes = math.prod(shape) * dtype.itemsize
        return whole[offset:offset + nbytes].view(dtype).reshape(shape)

    out: list[Any] = []
    for item in layout:
        if item is None:
            out.append(None)
        elif item[0] == "l":
            out.append([tensor(e) for e in item[1]])
        else:
            out.append(tensor(item[1]))
    return out

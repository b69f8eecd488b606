"""The input draw's compiled kernel: ``draw_kernel.c``, torch's float64 ``uniform_(0, 1)`` on a CPU generator,
the same bits about four times faster (benchmarks/results/performance-rounds.md, Round 16).

Input generation replays the official generator element for element, so its cost is one Mersenne Twister draw
per input element, which torch makes through a serial kernel at about 5.4 ns an element: four fifths of the
golden worker's ``inputs`` phase on official level 1. The kernel runs the same engine on the generator's own state
(``get_state``), writes the same doubles and hands the advanced state back (``set_state``), so every later draw,
of any kind, continues the same sequence.

A process builds it (:mod:`..cbuild`) on its first draw of at least ``MIN_DRAW`` elements (smaller inputs, as in
most tests, never pay the 0.1 s build) and uses it only after a self-test on draws of awkward lengths and offsets
agrees with torch bit for bit, generator state included. Without a compiler, with a failed build or self-test, or
with ``CANNBENCH_DRAW_KERNEL=0``, torch draws as before: the same inputs either way.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any

from pytest_cannbench import cbuild

SOURCE = Path(__file__).with_name("draw_kernel.c")
ENV_SWITCH = "CANNBENCH_DRAW_KERNEL"  # "0": torch draws (to compare the two, or to rule the kernel out)
MIN_DRAW = 1 << 20  # elements: the smallest draw worth building the kernel for (torch: 5 ms; the build: 0.1 s)


class DrawKernel:
    """The loaded library: fills float64 buffers from a generator's state."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._uniform = lib.cb_uniform64
        self._uniform.restype = ctypes.c_int
        lib.cb_state_bytes.restype = ctypes.c_int64
        self.state_bytes = int(lib.cb_state_bytes())

    def uniform(self, gen: Any, out: Any) -> bool:
        """``out.uniform_(0.0, 1.0, generator=gen)`` (a contiguous float64 CPU tensor); False, with nothing drawn,
        where the generator's state is not one the kernel reads."""
        state = gen.get_state()  # a copy: the generator is untouched until set_state
        if not self.fill(state, out):
            return False
        gen.set_state(state)
        return True

    def fill(self, state: Any, out: Any) -> bool:
        """Fill ``out`` from ``state`` (``get_state()``'s bytes, advanced in place); False, with neither changed,
        for bytes that are not an engine state the kernel reads (the layout of another torch, say)."""
        if state.numel() < self.state_bytes:
            return False
        return self._uniform(ctypes.c_void_p(state.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                             ctypes.c_int64(out.numel())) == 0


_lock = threading.Lock()
_state: dict[str, Any] = {}  # "kernel": the process's DrawKernel or None, once decided; "note": how or why not


def kernel_for(numel: int) -> DrawKernel | None:
    """The process's kernel for a draw of ``numel`` elements: None below ``MIN_DRAW`` while none is loaded, and
    where it cannot be built or failed its self-test (decided once per process, thread-safe)."""
    if "kernel" in _state:
        return _state["kernel"]
    if numel < MIN_DRAW:
        return None
    return load()


def load() -> DrawKernel | None:
    """Build, load and self-test the kernel once per process; later calls return the same."""
    with _lock:
        if "kernel" not in _state:
            _state["kernel"], _state["note"] = _load()
        return _state["kernel"]


def note() -> str:
    """How the process draws: the kernel and how it was built, or torch and why (empty before the first draw that
    needed a decision)."""
    return str(_state.get("note", ""))


def _load() -> tuple[DrawKernel | None, str]:
    if cbuild.switched_off(ENV_SWITCH):
        return None, f"torch ({ENV_SWITCH}=0)"
    with cbuild.built(SOURCE) as (path, how):
        if path is None:
            return None, f"torch: {how}"
        try:
            kernel = DrawKernel(ctypes.CDLL(str(path)))
        except (OSError, AttributeError) as exc:  # e.g. a temporary directory mounted noexec
            return None, f"torch: the built library would not load: {exc}"
    problem = self_test(kernel)
    if problem:
        return None, f"torch: the kernel's self-test differed ({problem})"
    return kernel, f"kernel, built with {how}, self-tested"


def self_test(kernel: DrawKernel) -> str:
    """Where ``kernel`` and torch disagree: draws of lengths that end inside, at and across the engine's blocks of
    624 words, from a fresh seed and after odd and even numbers of 32-bit words were taken, then the generators'
    states and a later draw of another kind; "" when they agree bit for bit."""
    import torch

    for seed, offset in ((0, 0), (20261205, 3), (2**40 + 7, 624), (1, 1)):
        mine, theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        if offset:
            torch.rand(offset, generator=mine)  # float32 draws: one 32-bit word each
            torch.rand(offset, generator=theirs)
        for n in (1, 311, 312, 313, 623, 624, 625, 5000, 70001):
            ours, ref = torch.empty(n, dtype=torch.float64), torch.empty(n, dtype=torch.float64)
            if not kernel.uniform(mine, ours):
                return f"the generator's state was refused (seed {seed})"
            ref.uniform_(0.0, 1.0, generator=theirs)
            if not torch.equal(ours, ref):
                return f"{n} draws from seed {seed} after {offset} words"
        if not torch.equal(mine.get_state(), theirs.get_state()):
            return f"the generator's state after seed {seed}"
        if not torch.equal(torch.randn(1001, generator=mine, dtype=torch.float64),
                           torch.randn(1001, generator=theirs, dtype=torch.float64)):
            return f"a later normal draw from seed {seed}"
    return ""

"""Transparent huge pages for the grader's own large tensors.

On the 2-core VMs this was measured on, faulting in a fresh 4 KiB page costs about 1.5 µs, so filling a new
256 MiB tensor spent 0.1 s in the kernel against 0.013 s for the fill itself, and system time was a third of an
accuracy-only run's CPU. torch's CPU allocator advises huge pages (``MADV_HUGEPAGE``: 2 MiB, one fault where there
were 512) for buffers of 2 MiB and more when ``THP_MEM_ALLOC_ENABLE`` is set at its first allocation; with the
kernel's THP mode at ``madvise`` (the Debian and Ubuntu default) or ``always`` that fill took 0.035 s. Where the
mode is ``never`` the advice does nothing, and nothing else changes: the same values, the same memory.

Applied to the judge's side: the golden worker (its environment) and the judge process itself (set for its
first allocation, then the variable is restored, so nothing it starts inherits it). To the candidate and baseline
workers only in a session that times nothing (``--cann-no-perf``, :func:`untimed_worker_env`): how fast their
allocations are is part of what is timed, and stays what any process sees; untimed, it is only the session's
wall (official level 1 accuracy-only: the candidate calls' CPU 26.6 -> 16.1 s, docs/performance.md Round 16).
A variable the user set is left as it is, everywhere.
"""

from __future__ import annotations

import os

ENV = "THP_MEM_ALLOC_ENABLE"


def worker_env(env: dict[str, str]) -> dict[str, str]:
    """The golden worker's environment: huge pages on, unless the user chose a value."""
    return env if ENV in env else {**env, ENV: "1"}


def untimed_worker_env(timed: bool) -> dict[str, str]:
    """What a candidate or baseline worker's environment gains: huge pages where nothing it runs is timed."""
    return {} if timed or ENV in os.environ else {ENV: "1"}


def latch_in_judge() -> bool:
    """Turn huge pages on for this process's torch allocator without leaving the variable set.

    torch reads the variable once, at its first CPU allocation, so this works only before the process has
    allocated a tensor (the judge calls it before its first case); afterwards it changes nothing. Returns whether
    the variable was set for the latch."""
    if ENV in os.environ:
        return False
    import torch

    os.environ[ENV] = "1"
    try:
        torch.empty(1)  # the first allocation reads it (a no-op when an earlier one already did)
    finally:
        del os.environ[ENV]
    return True

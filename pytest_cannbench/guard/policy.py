"""What the judge does with the guard's findings: which fail a call, in which guard mode, and which one it reports.

The worker's guard (:mod:`runtime`) and the symbol scan only find; this is the one place that decides. Findings
arrive as JSON from the candidate worker, an untrusted process, so they are validated here first.
"""

from __future__ import annotations

from typing import Any

from pytest_cannbench.outcome import API_TAMPERED, BUILTIN_COMPUTE, FORBIDDEN_ACCESS, GUARD_FAILURES

OFF, WARN, BLOCK, KERNEL = "off", "warn", "block", "kernel"
MODES = (OFF, WARN, BLOCK, KERNEL)
# KERNEL is KernelBench's rule: a custom kernel must run in forward (no_custom_kernel otherwise); builtin ops
# alongside it are reported as flags, not failed; everything else is decided as in BLOCK.
KERNEL_FLAGS_ONLY = (BUILTIN_COMPUTE,)

# Fail the call in every mode: forbidden access was refused anyway, and a changed clock, profiler or worker
# function means the call's times and outputs cannot be trusted.
ALWAYS_DECIDING = (FORBIDDEN_ACCESS, API_TAMPERED)
# What the judge measured of a call, reported as a flag and never a verdict in any mode (guard.coverage)
KERNEL_COVERAGE = "kernel_coverage"
# The default floor of KernelBench's kernel coverage (guard.coverage; docs/kernelbench.md, "Kernel coverage")
COVERAGE_FLOOR = 0.5

Finding = tuple[str, str]  # (kind, detail)


def guard_problems(reply: dict[str, Any]) -> list[Finding]:
    """The worker's guard findings, validated (they arrive as JSON from an untrusted process)."""
    found = []
    raw = reply.get("guard")
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict) and item.get("kind") in GUARD_FAILURES:
            found.append((str(item["kind"]), str(item.get("detail", ""))[:300]))
    return found[:20]


def guard_verdict(problems: list[Finding], mode: str) -> tuple[str | None, str, list[str]]:
    """``(status, message, flags)``: in block mode the most serious finding fails the call. In every mode,
    forbidden access (it was refused anyway) and tampering with the clocks, the profiler or the worker's
    own functions fail it too: a changed clock means the times cannot be trusted, whatever the mode; the
    other findings become flags."""
    flags = [f"{kind}: {detail}" for kind, detail in problems]
    deciding = [p for p in problems if p[0] in GUARD_FAILURES and (mode == BLOCK or p[0] in ALWAYS_DECIDING
                or (mode == KERNEL and p[0] not in KERNEL_FLAGS_ONLY))]
    if not deciding:
        return None, "", flags
    deciding.sort(key=lambda p: GUARD_FAILURES.index(p[0]))
    kind = deciding[0][0]
    details = "; ".join(dict.fromkeys(d for k, d in deciding if k == kind))
    return kind, f"the guard refused the call ({kind}): {details}"[:1500], flags


def mode_for(fmt: str, guard: str, kb_guard: str) -> str:
    """The guard mode of a format's worker: KernelBench ModelNews follow KernelBench's rule (``kernel``) by
    default, unless --cann-kb-guard cann or a laxer --cann-guard (warn, off) says otherwise; CANN is strict."""
    if fmt == "kernelbench" and kb_guard in ("coverage", "kernelbench") and guard == BLOCK:
        return KERNEL
    return guard


def coverage_floor(fmt: str, guard: str, kb_guard: str) -> float | None:
    """The kernel coverage a KernelBench call must reach (``guard.coverage``): :data:`COVERAGE_FLOOR` under the
    default rule (``--cann-kb-guard coverage`` with ``--cann-guard block``), none otherwise (then a flag only)."""
    return COVERAGE_FLOOR if fmt == "kernelbench" and kb_guard == "coverage" and guard == BLOCK else None

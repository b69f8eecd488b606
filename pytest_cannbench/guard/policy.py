"""What the judge does with the guard's findings: which fail a call, in which guard mode, and which one it reports.

The worker's guard (:mod:`runtime`) and the symbol scan only find; this is the one place that decides. Findings
arrive as JSON from the candidate worker, an untrusted process, so they are validated here first.
"""

from __future__ import annotations

from pytest_cannbench.outcome import API_TAMPERED, FORBIDDEN_ACCESS, GUARD_FAILURES

OFF, WARN, BLOCK = "off", "warn", "block"
MODES = (OFF, WARN, BLOCK)

# Fail the call in every mode: forbidden access was refused anyway, and a changed clock, profiler or worker
# function means the call's times and outputs cannot be trusted.
ALWAYS_DECIDING = (FORBIDDEN_ACCESS, API_TAMPERED)

Finding = tuple[str, str]  # (kind, detail)


def guard_problems(reply: dict) -> list[Finding]:
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
    deciding = [p for p in problems if mode == BLOCK or p[0] in ALWAYS_DECIDING]
    if not deciding:
        return None, "", flags
    deciding.sort(key=lambda p: GUARD_FAILURES.index(p[0]))
    kind = deciding[0][0]
    details = "; ".join(dict.fromkeys(d for k, d in deciding if k == kind))
    return kind, f"the guard refused the call ({kind}): {details}"[:1500], flags

"""Pure arithmetic on what a case's timing recorded, shared by the judge (which decides with it) and the report
(which shows it), so neither reaches into the other: Eq.3's HAP with every official edge case
(docs/leaderboard.md, "The formula"; the rest of the score is ``report.scoring``), the HAP at the two ends of a
paired speed-up's interval, and the load figures of a case's timed windows (``timing.isolation`` flags a case timed
under load with them). Standard library only: nothing here reads or writes anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def _bad(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def baseline_proxy(t_hw: float) -> float:
    return max(10.0 * t_hw, 10.0)


def hap(t_base: float | None, t_cand: float | None, t_hw: float | None, *,
        cap: bool = False) -> tuple[float | None, list[str]]:
    """Eq.3 with every official edge case; returns the score and flags explaining it."""
    flags: list[str] = []
    if _bad(t_cand) or _bad(t_hw):
        return None, ["missing_time"]
    assert t_cand is not None and t_hw is not None
    if t_cand <= 0 or t_hw <= 0:
        return None, ["non_positive_time"]
    if t_base is not None and math.isnan(t_base):
        return None, ["missing_time"]
    if t_base is None or t_base <= 0:  # missing: the official proxy
        t_base = baseline_proxy(t_hw)
        flags.append("baseline_proxy")
    if t_base < t_hw:
        flags.append("baseline_below_t_hw")
    denom = (t_cand - t_hw) + (t_base - t_hw)
    if denom <= 0:
        return None, flags + ["degenerate_anchors"]
    score = (t_base - t_hw) / denom
    if t_cand < t_hw:
        flags.append("implausible_time")
        cap = True  # no reward for beating the hardware limit
    if cap and score > 1.0:
        score = 1.0
        flags.append("hap_capped")
    return score, flags


def hap_interval(t_base: float | None, t_hw: float | None, speedup: Mapping[str, object] | None,
                 *, cap: bool = False) -> tuple[float, float] | None:
    """HAP at the two ends of the paired speed-up's interval (T_cand = T_base / speed-up): HAP rises with the
    speed-up, so the interval maps end to end. None without a live pairing or usable anchors."""
    if not speedup or _bad(t_base) or _bad(t_hw):
        return None
    low, high = speedup.get("low"), speedup.get("high")
    if not isinstance(low, (int, float)) or not isinstance(high, (int, float)) or low <= 0 or high <= 0:
        return None
    assert t_base is not None
    ends = [hap(t_base, t_base / s, t_hw, cap=cap)[0] for s in (low, high)]
    if ends[0] is None or ends[1] is None:
        return None
    return ends[0], ends[1]


def _delta(window: dict[str, Any], name: str) -> float | None:
    start, end = (window.get(edge) or {} for edge in ("start", "end"))
    a, b = start.get(name), end.get(name)
    return b - a if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b >= a else None


def window_figures(windows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Over a case's timed windows together: the share of their time some task waited for a CPU
    (``cpu_stall_pct``) and the share of the machine's CPU time the hypervisor stole (``steal_pct``); None where
    the totals could not be read."""
    spans = [(_delta(w, "t"), _delta(w, "cpu_some_total_us"), _delta(w, "steal_s")) for w in windows]
    cores = max([int((w.get("end") or {}).get("cpus") or 1) for w in windows] or [1])
    stalled = [(dt, stall) for dt, stall, _ in spans if dt and stall is not None]
    robbed = [(dt, steal) for dt, _, steal in spans if dt and steal is not None]
    return {"cpu_stall_pct": 100.0 * sum(v for _, v in stalled) / 1e6 / sum(dt for dt, _ in stalled)
            if stalled else None,
            "steal_pct": 100.0 * sum(v for _, v in robbed) / (cores * sum(dt for dt, _ in robbed))
            if robbed else None}

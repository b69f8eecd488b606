"""Evaluation profiles: how hard a request is graded, as ``Settings`` overrides of the grading core.

| profile  | warm-up | timed calls | timing target | HAP target | timing budget | case timeout | build timeout |
|----------|---------|-------------|---------------|------------|---------------|--------------|---------------|
| quick    | 1       | 3..10       | +-10%         | +-0.05     | 2 s           | 30 s         | 180 s         |
| standard | 3       | 10..100     | +-2%          | +-0.02     | 10 s          | 120 s        | 600 s         |
| thorough | 5       | 30..1000    | +-1%          | +-0.01     | 30 s          | 300 s        | 600 s         |

KernelBench correctness trials 3, 5 and 10; default deadlines 120 s, 600 s and 1800 s.

Timed calls run until the paired speed-up's 95% interval is within the timing target, the HAP's within the HAP
target, or the timing budget is spent (``docs/timing.md``); ``perf: false`` drops timing altogether. The case
timeout kills a call that does not return; the build timeout a ``build.sh`` that does not finish. The numbers
follow KernelGYM's presets (3/10, 5/100, 10/1000 correctness/timed trials) in spirit: quick for dense RL
rewards, thorough for a leaderboard entry.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Profile:
    name: str
    warmup: int
    repeat_min: int
    repeat_max: int
    timing_target: float  # a fraction
    hap_target: float
    timing_budget_s: float
    case_timeout_s: float
    build_timeout_s: float
    kb_trials: int
    deadline_s: float

    def overrides(self, *, perf: bool) -> dict[str, Any]:
        """The ``Settings`` fields this profile sets (``settings_for`` keywords)."""
        return {
            "warmup": self.warmup,
            "repeat": self.repeat_min,
            "repeat_auto": True,
            "repeat_max": self.repeat_max,
            "timing_target": self.timing_target,
            "hap_target": self.hap_target,
            "timing_budget_s": self.timing_budget_s,
            "case_timeout_s": self.case_timeout_s,
            "build_timeout_s": self.build_timeout_s,
            "kb_trials": self.kb_trials,
            "perf": perf,
        }


PROFILES = {
    "quick": Profile("quick", 1, 3, 10, 0.10, 0.05, 2.0, 30.0, 180.0, 3, 120.0),
    "standard": Profile("standard", 3, 10, 100, 0.02, 0.02, 10.0, 120.0, 600.0, 5, 600.0),
    "thorough": Profile("thorough", 5, 30, 1000, 0.01, 0.01, 30.0, 300.0, 600.0, 10, 1800.0),
}


def seed_overrides(policy: str, value: int, secret: str) -> dict[str, Any]:
    """``secret``: seed 0 with the epoch's secret mixed in (nobody knows the inputs in advance); ``fixed``: the
    public seed alone (anyone can regenerate the inputs: reproducible, and flagged ``seed_public``)."""
    if policy == "fixed":
        return {"seed": value, "secret": ""}
    return {"seed": 0, "secret": secret}


def overrides_for(
    profile: str, *, perf: bool, policy: str, value: int, secret: str, caps: dict[str, float] | None = None
) -> dict[str, Any]:
    """Every ``Settings`` override of a request: its profile, its seed policy and the server's caps. Judges key
    their warm graders by this dict, so the server's warm-up and its requests build it the same way."""
    overrides = {**PROFILES[profile].overrides(perf=perf), **seed_overrides(policy, value, secret)}
    overrides.update({k: min(v, overrides[k]) for k, v in (caps or {}).items()})
    return overrides


# Settings fields that say where a judge keeps its files, not how it grades: left out of the settings hash, so
# two judges grading alike report the same hash
_LOCAL_FIELDS = frozenset(
    {
        "report_dir",
        "leaderboard",
        "golden_cache",
        "source",
        "sources",
        "reveal_secret",
        "markdown",
        "eval_report",
        "secret",
    }
)


def settings_hash(settings: dict[str, Any]) -> str:
    """sha256 (first 16 hex digits) of the settings that decide verdicts, in a stable JSON form."""
    kept = {k: v for k, v in sorted(settings.items()) if k not in _LOCAL_FIELDS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]

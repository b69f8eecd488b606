"""The rule on a sampled profile: is the call's CPU time builtin compute?

Set from measured profiles (benchmarks/perf_profile.py, figures in docs/security.md). Honest kernels put at most
about a tenth of their work samples in foreign code (allocation and dispatch glue), delegation 76-98%; the limit
sits at 40%, more than five standard errors from both at the minimum sample count. Every
call also runs a fixed amount of torch's dispatch and allocation glue (argument parsing, the dispatcher,
``at::empty``), which dominates a tiny call: a per-call allowance of it is taken off the foreign samples first,
so a 64-element case is not delegation for spending its few microseconds in libtorch.

A share can be diluted: own busy work beside the delegated call lowers it under any limit. So the foreign time
beyond the glue allowance is also judged per call on its own (``FOREIGN_BUDGET_US``): delegation that costs more
than that per call is builtin compute whatever the share, once enough foreign samples say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cannbench.guard.perf_profile import FOREIGN_KINDS, CallProfile
from pytest_cannbench.outcome import BUILTIN_COMPUTE

MAX_FOREIGN_SHARE = 0.4
MIN_WORK_SAMPLES = 40  # at 40 samples both measured sides sit more than 5 standard errors from the limit
GLUE_US_PER_CALL = 30.0  # 1.5x the most an honest tiny call was measured to spend in torch (21 us)
FOREIGN_BUDGET_US = 1500.0  # foreign time per call beyond the glue: 2.5x the most an honest case or operator showed
MIN_BUDGET_SAMPLES = 10  # foreign samples beyond the glue before the budget decides (not a stray few)


@dataclass(frozen=True)
class ProfileVerdict:
    """``finding`` is ``builtin_compute`` or None; ``conclusive`` False means too few samples to say."""

    finding: str | None
    conclusive: bool
    samples: int
    work_samples: int
    foreign_share: float  # after the glue allowance
    shares: dict[str, float] = field(default_factory=dict)
    lost: int = 0
    detail: str = ""
    foreign_us_per_call: float = 0.0  # foreign CPU time per call beyond the glue allowance

    @property
    def problems(self) -> list[tuple[str, str]]:
        """The finding as guard problems ``[(kind, detail)]``, the shape ``guard.policy.guard_verdict`` takes."""
        return [(self.finding, self.detail)] if self.finding else []


def foreign_excess(profile: CallProfile, glue_us: float = GLUE_US_PER_CALL) -> float:
    """Foreign samples beyond ``glue_us`` per call of foreign time."""
    period = profile.period_ns or 1
    return max(0.0, profile.foreign_samples - profile.calls * glue_us * 1000 / period)


def foreign_beyond_glue(profile: CallProfile, glue_us: float = GLUE_US_PER_CALL) -> float:
    """The foreign share of the work samples once ``glue_us`` per call of foreign time is taken off."""
    excess = foreign_excess(profile, glue_us)
    rest = profile.work_samples - (profile.foreign_samples - excess)
    return excess / rest if rest > 0 else 0.0


def foreign_us_per_call(profile: CallProfile, glue_us: float = GLUE_US_PER_CALL) -> float:
    """The foreign CPU time per call beyond ``glue_us``, in microseconds."""
    return foreign_excess(profile, glue_us) * (profile.period_ns or 0) / 1000 / max(1, profile.calls)


def judge_profile(profile: CallProfile, *, max_foreign: float = MAX_FOREIGN_SHARE,
                  min_samples: int = MIN_WORK_SAMPLES, glue_us: float = GLUE_US_PER_CALL,
                  budget_us: float = FOREIGN_BUDGET_US, symbols: bool = True) -> ProfileVerdict:
    """``builtin_compute`` when foreign code (builtin libraries, JIT code, unmapped code, CPU no sample saw) holds
    more than ``max_foreign`` of the work samples beyond the glue allowance, over ``min_samples`` at least; or when
    it took more than ``budget_us`` per call beyond the glue, over ``MIN_BUDGET_SAMPLES`` foreign samples at least
    (dilution lowers the share, not the time)."""
    work = profile.work_samples
    share = foreign_beyond_glue(profile, glue_us)
    per_call = foreign_us_per_call(profile, glue_us)
    over_budget = per_call > budget_us and foreign_excess(profile, glue_us) >= MIN_BUDGET_SAMPLES
    conclusive = (work >= min_samples or over_budget) and not profile.error
    finding = BUILTIN_COMPUTE if conclusive and (share > max_foreign or over_budget) else None
    text = describe(profile, symbols=symbols)
    if profile.error:
        head = f"sampling inconclusive: {profile.error}"
    elif not conclusive:
        head = f"sampling inconclusive: {work} work samples, under the {min_samples} a verdict needs"
    else:
        sigma = math.sqrt(max(share * (1 - share), 1e-9) / max(work, 1))  # the share's one-sigma sampling error
        head = (f"{share:.0%} (±{sigma:.0%}) of {work} work samples over {profile.calls} call(s) ran in code "
                f"that is not the submission's, beyond {glue_us:g} us per call of dispatch glue "
                f"(limit {max_foreign:.0%}); {per_call:.0f} us per call of foreign CPU time "
                f"(budget {budget_us:g} us)")
    lost = f"; {profile.lost} samples lost" if profile.lost else ""
    books = f"; {profile.accounting}" if profile.accounting else ""
    return ProfileVerdict(finding, conclusive, profile.samples, work, share, profile.shares, profile.lost,
                          f"{head}{lost}{books}: {text}", per_call)


def describe(profile: CallProfile, n: int = 4, *, symbols: bool = True) -> str:
    """The top objects by samples, foreign ones with their top symbols: what a person needs to see why."""
    total = profile.samples or 1
    parts = []
    for name, obj in profile.top(n):
        label = f"{Path(name).name if name.startswith('/') else name} [{obj.kind}] {obj.samples / total:.0%}"
        if symbols and obj.kind in FOREIGN_KINDS:
            top = profile.symbols(name, 2)
            if top:
                label += " (" + ", ".join(f"{sym[:80]} {count / total:.0%}" for sym, count in top) + ")"
        parts.append(label)
    return "; ".join(parts) or "no samples"

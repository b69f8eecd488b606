"""What the judge observes of a submission worker from outside it, call by call.

Two sources the submission cannot switch off from inside its process: the worker's instruction pointers,
sampled with ``perf_event_open`` at random intervals (guard.perf_sample; in a timing batch only those inside the
windows of its timed calls; merged over a case's calls and over its operator's, since one call rarely holds
enough samples to decide), and the executable mappings of the frozen worker
(guard.maps). Both yield ``(kind, detail)`` guard problems for :func:`guard.policy.guard_verdict`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench.guard.containment import processes_allowed
from pytest_cannbench.guard.coverage import Ledger
from pytest_cannbench.guard.maps import foreign_findings
from pytest_cannbench.guard.perf_sample import CallSampler, Unavailable
from pytest_cannbench.guard.perf_verdict import judge_profile
from pytest_cannbench.guard.policy import guard_problems
from pytest_cannbench.workers.triton_helper import CACHE_NAME

Problem = tuple[str, str]


@dataclass
class OutsideEvidence:
    """The sampler of one worker process and the profiles merged so far (reset with each new process)."""

    site_dir: str | None = None
    own_dirs: tuple[str, ...] = ()  # code the worker builds while it runs (guard.maps.foreign_findings)
    # the worker may start no process (containment): samples of its children are its compiler helper's tools
    children_are_toolchain: bool = False
    sampler: Any = None  # guard.perf_sample.CallSampler
    note: str = ""  # why there is no sampler (perf_event_open refused)
    profiles: dict[str, Any] = field(default_factory=dict)  # case / operator key -> merged CallProfile
    # a KernelBench worker's guard.coverage.Ledger: its samples measure kernel coverage, not the CANN verdict
    ledger: Any = None

    @classmethod
    def of_worker(cls, site_dir: str | None, workdir: Path, contain: bool, device: str, mode: str = "submission",
                  coverage_floor: float | None = None) -> OutsideEvidence:
        """For a candidate worker: it builds code into its private Triton cache; contained on a CPU or a CUDA
        card it may start no process, so its children are the compiler helper's (an NPU runtime starts its own).
        A KernelBench worker (``mode``) gets a coverage ledger judged against ``coverage_floor``."""
        return cls(site_dir=site_dir, own_dirs=(str(workdir / CACHE_NAME),),
                   children_are_toolchain=contain and not processes_allowed(device),
                   ledger=Ledger(coverage_floor, host=device == "cpu") if mode == "kernelbench" else None)

    def open(self, pid: int) -> None:
        """Sample the new worker before it starts threads (they inherit the events)."""
        self.close()
        opened = CallSampler.open(pid, own=tuple(p for p in (self.site_dir,) if p),
                                  children_are_toolchain=self.children_are_toolchain)
        if isinstance(opened, Unavailable):
            self.note = f"CPU sampling unavailable: {opened.reason}"
        else:
            self.sampler, self.note = opened, ""

    def weaker(self) -> list[str]:
        """What the judge could not observe of this worker (the kernel refused a facility), for the case's notes."""
        found = [self.note] if self.note else []
        if self.sampler is not None and self.sampler.accounting:
            found.append(f"CPU sampling: {self.sampler.accounting}")
        if self.sampler is not None and self.sampler.crowded:
            found.append(f"CPU sampling: {self.sampler.crowded} threads, too many to follow each with events of the "
                         "judge's own: the later ones were sampled at the period of their birth")
        return found

    def close(self) -> None:
        sampler, self.sampler = self.sampler, None
        if sampler is not None:
            sampler.close()

    def arm(self) -> None:
        """Just before a request is sent (it thaws the worker)."""
        if self.sampler is not None:
            self.sampler.arm()

    def open_window(self) -> None:
        """A timed call of a streamed batch is about to be let go (the worker frozen)."""
        if self.sampler is not None:
            self.sampler.open_window()

    def close_window(self) -> None:
        """Its frame arrived and the worker is frozen again."""
        if self.sampler is not None:
            self.sampler.close_window()

    def sampled(self, keys: tuple[str, ...], calls: int) -> list[Problem]:
        """The samples of what just ran (the worker is frozen), judged merged with the earlier calls of each key."""
        if self.sampler is None:
            return []

        profile = self.sampler.collect(calls=calls)
        for key in keys:
            merged = self.profiles[key] = profile if key not in self.profiles else self.profiles[key].merge(profile)
            if self.ledger is not None:
                continue
            verdict = judge_profile(merged)
            if verdict.finding is not None:
                return [(kind, f"CPU samples taken by the judge: {detail}") for kind, detail in verdict.problems]
        return []

    def mapped(self, pid: int) -> list[Problem]:
        """Executable code the frozen worker mapped from outside its install, torch and the system."""
        return [(str(k), str(d)) for k, d in foreign_findings(pid, self.site_dir, own_dirs=self.own_dirs)]

    def after_call(self, pid: int, keys: tuple[str, ...], calls: int,
                   reply: dict[str, Any] | None = None) -> list[Problem]:
        found = self.sampled(keys, calls) + self.mapped(pid)
        if self.ledger is not None and reply is not None:  # KernelBench: its kernel coverage, judged
            found += self.ledger.judge(keys, reply, self.profiles, found + guard_problems(reply))
        return found


def profile_keys(target: dict[str, Any], case_log: Path | None) -> tuple[str, ...]:
    """The case (its log is unique to it) and the operator a call belongs to."""
    operator = "op:" + str(target.get("rel_path") or target.get("name"))
    return (f"case:{case_log}", operator) if case_log is not None else (operator,)

"""What a run decides once, before any judge runs a case: the submission's build, the goldens' pins, the memory
plan and its ledger, the timing fence's file, the cases an earlier identical run recorded.

One controller per run: the pytest session's controller (or its only process), the service, a plain-Python
:class:`~pytest_cannbench.core.grader.Grader`. It hands each judge a :class:`~pytest_cannbench.core.judge.JudgeSetup`
and, at the end, removes what it made.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_cannbench.core.judge import (
    MAX_LIVE_WORKERS,
    JudgeSetup,
    device_plan,
    protected_paths,
    run_timed_threads,
)
from pytest_cannbench.guard import sandbox
from pytest_cannbench.options import Settings
from pytest_cannbench.submission import kernelbench as kernelbench_submission
from pytest_cannbench.submission.build import Box, SubmissionState, cleanup, prepare
from pytest_cannbench.submission.generations import expand, is_generation
from pytest_cannbench.taskformat.dirs import pin_goldens
from pytest_cannbench.timing.devices import lock_dir
from pytest_cannbench.timing.isolation import new_fence_path, remove_fence
from pytest_cannbench.workers import limits, memory_plan
from pytest_cannbench.workers.dispatch import needs_path
from pytest_cannbench.workers.limits import usable_cores
from pytest_cannbench.workers.memory_plan import MemoryPlan

if TYPE_CHECKING:
    from pytest_cannbench.timing.devices import DevicePlan

Announce = Callable[[str], None]


class SetupError(Exception):
    """The run cannot start as configured (e.g. the sandbox asked for is unavailable); the message says why."""


class Controller:
    """A run's once-only decisions; ``processes`` is the number of judges that will run cases."""

    def __init__(self, settings: Settings, processes: int = 1, task_roots: Sequence[Path | str] = ()) -> None:
        self.settings = settings
        self.processes = max(1, processes)
        self.task_roots = tuple(str(p) for p in task_roots)
        self.submission: SubmissionState | None = None
        self.submissions: dict[str, SubmissionState] = {}
        self.pins: dict[str, str] = {}
        self.resumed: frozenset[str] = frozenset()
        self.owns_submission = False
        self._candidates: list[str] | None = None
        self._fence_path: Path | None = None
        self._fence_made = False
        self._memory_plan: MemoryPlan | None = None
        self._box: Box | None = None
        self._device: DevicePlan | None = None

    @property
    def report_dir(self) -> Path:
        return Path(self.settings.report_dir)

    @property
    def log_dir(self) -> Path:
        return self.report_dir / "logs"

    # ------------------------------------------------------------ candidates

    @property
    def multi(self) -> bool:
        """Several candidates: several sources, or a KernelBench generation directory."""
        if self._candidates is not None:
            return bool(self._candidates)
        s = self.settings
        return len(s.sources) > 1 or any(is_generation(src) for src in s.sources)

    def candidate_names(self) -> list[str]:
        """The candidates cases are graded for (empty: a single-candidate run)."""
        if self._candidates is None:
            self._candidates = [c.name for c in expand(list(self.settings.sources))] if self.multi else []
        return list(self._candidates)

    # ------------------------------------------------------------ the submission

    def box(self) -> Box:
        """The OS sandbox every piece of submission code runs in, chosen once (:class:`SetupError` when the one
        asked for is unavailable)."""
        if self._box is None:
            try:
                self._box = Box(sandbox.choose(self.settings.sandbox), tuple(self.protected_paths()))
            except sandbox.SandboxUnavailable as exc:
                raise SetupError(str(exc)) from None
        return self._box

    def pin_goldens(self) -> None:
        """The goldens' hashes, before any build script can touch them."""
        self.pins = pin_goldens([Path(p) for p in self.task_roots])

    def start_submission(self, announce: Announce | None = None) -> None:
        """Build, install and discover the run's submission(s) once, in the sandbox."""
        s = self.settings
        if not (s.source or s.no_install):
            return

        self.pin_goldens()
        box = self.box()
        if self.multi:
            self._start_candidates(announce, box)
            return
        if announce is not None:
            announce(f"cannbench: preparing submission {s.source or '(installed cann_bench)'} ...")
        if kernelbench_submission.wanted(s):  # ModelNew modules: nothing to build or install
            assert s.source is not None  # wanted() is false without a source
            self.submission = kernelbench_submission.prepare(s.source, self.log_dir, s.build_timeout_s, box=box)
        else:
            self.submission = prepare(
                s.source,
                no_install=s.no_install,
                report_dir=self.report_dir,
                build_timeout=s.build_timeout_s,
                guard=s.guard,
                box=box,
                rebuild=s.rebuild,
                announce=announce,
            )
        self.owns_submission = True

    def prepare_candidate(
        self,
        name: str,
        source: str,
        *,
        kernelbench: bool = False,
        sample: int | None = None,
        discovery: bool = True,
        session: Path | None = None,
    ) -> SubmissionState:
        """One more candidate, built into its own private install and logs (``<report dir>/candidates/<name>``).
        ``discovery=False`` (CANN packages): its judge, in this process, lists its interfaces in the worker that
        grades it (:meth:`Judge.discover`); ``session``: the private directory to build it into (a spare worker of
        its judge already shows it, :meth:`Judge.start_spare`)."""
        s = self.settings
        report_dir = self.report_dir / "candidates" / name
        if kernelbench:
            sub = kernelbench_submission.prepare(source, report_dir / "logs", s.build_timeout_s, sample, box=self.box())
        else:
            sub = prepare(
                source,
                no_install=False,
                report_dir=report_dir,
                build_timeout=s.build_timeout_s,
                guard=s.guard,
                box=self.box(),
                discovery=discovery,
                session=session,
            )
        # not the run's ``submission``: a later candidate's workers would be shown its directory (the judge's
        # readable paths), and dropping it would keep its install; a pytest run with several names sets it after
        self.submissions[name] = sub
        self.owns_submission = True
        return sub

    def drop_candidate(self, name: str) -> None:
        """Remove a candidate's private install (its workers are its judge's to close)."""
        sub = self.submissions.pop(name, None)
        if sub is not None and sub is not self.submission:
            cleanup(sub)

    def _start_candidates(self, announce: Announce | None, box: Box) -> None:
        s = self.settings
        for cand in expand(list(s.sources)):
            if announce is not None:
                announce(f"cannbench: preparing candidate {cand.name} ({cand.source}) ...")
            kb = s.bench == "stanford" or (s.bench == "auto" and kernelbench_submission.looks_like(cand.source))
            self.prepare_candidate(cand.name, cand.source, kernelbench=kb, sample=cand.sample)
        self.submission = next(iter(self.submissions.values()), None)

    def protected_paths(self) -> list[str]:
        return protected_paths(self.settings, self.task_roots)

    # ------------------------------------------------------------ plans shared by every judge

    def fence_path(self) -> Path | None:
        """The run's fence file, made on first use; None when isolation is off or nothing is timed."""
        s = self.settings
        if not (s.active and s.perf and s.timing_isolation == "fence"):
            return None
        if self._fence_path is None:
            self._fence_path, self._fence_made = new_fence_path(), True
        return self._fence_path

    def judges_per_process(self) -> int:
        """Worker processes one judge holds at once: golden, candidate(s), baseline, and the hidden split's own
        golden, candidate and baseline workers."""
        s = self.settings
        candidates = min(len(self.candidate_names()) or 1, MAX_LIVE_WORKERS)
        own = 2 + candidates + (1 if s.perf else 0)  # the judge, its golden worker, candidate(s), baseline
        if s.hidden:
            own += 2 + (1 if s.perf else 0)
        return own

    def memory_plan(self) -> MemoryPlan:
        """The run's memory plan, made once so every judge plans with the same numbers."""
        if self._memory_plan is None:
            s, gib = self.settings, 1 << 30
            candidates = min(len(self.candidate_names()) or 1, MAX_LIVE_WORKERS)
            plan = memory_plan.make_plan(
                limits.inherited(),
                memory_plan.mem_available(),
                self.processes,
                self.judges_per_process(),
                int(s.golden_memory_gib * gib) if s.golden_memory_gib else None,
                int(s.worker_memory_gib * gib) if s.worker_memory_gib else None,
                int(s.session_memory_gib * gib) if s.session_memory_gib else None,
                timed_regions=candidates + 1 if s.perf else 0,
            )
            if self.processes > 1:  # the memory pool's ledger: one file per run, like the timing fence
                ledger = lock_dir() / f"memory-{os.getpid()}-{os.urandom(6).hex()}.pool"
                ledger.touch()
                plan = replace(plan, pool_file=str(ledger))
            self._memory_plan = plan
        return self._memory_plan

    def judge_setup(self, worker_id: str = "main", cpu_slot: int | None = None) -> JudgeSetup:
        """What a judge of this run is given; ``cpu_slot``: its index for its workers' CPUs (a service's judge)."""
        fence = self.fence_path()
        return JudgeSetup(
            worker_id=worker_id,
            processes=self.processes,
            memory_plan=self.memory_plan(),
            submission=self.submission,
            submissions=dict(self.submissions),
            pins=dict(self.pins),
            resumed=self.resumed,
            fence_path=str(fence) if fence is not None else None,
            task_roots=self.task_roots,
            candidates=tuple(self.candidate_names()),
            cpu_slot=cpu_slot,
        )

    def device(self, detected: str | None = None) -> DevicePlan:
        """The run's device plan as the controller sees it; ``detected``, the kind a judge found for
        ``--cann-device auto``, spares detecting it here (importing torch)."""
        if self._device is None:
            self._device = device_plan(self.settings, "main", detected)
        return self._device

    def timed_threads(self) -> int:
        return run_timed_threads(self.settings, self.processes)

    def budget_line(self) -> str:
        """The effective memory and thread budgets of the run's workers, and the inherited limits behind them."""
        plan, threads = self.memory_plan(), max(1, usable_cores() // self.processes)  # goldens, comparisons
        return limits.header_line(limits.inherited(), plan.golden, plan.candidate, threads)

    # ------------------------------------------------------------ end

    def close(self) -> None:
        """Remove what the run made: the private installs, the pool's ledger, the fence."""
        if self.owns_submission:
            subs = [x for x in [self.submission, *self.submissions.values()] if x is not None]
            for sub in {id(x): x for x in subs}.values():
                cleanup(sub)
            self.owns_submission = False
        plan = self._memory_plan
        if plan is not None and plan.pool_file:
            Path(plan.pool_file).unlink(missing_ok=True)
            needs_path(plan.pool_file).unlink(missing_ok=True)
        if self._fence_path is not None and self._fence_made:
            remove_fence(self._fence_path)
            self._fence_made = False
        self._fence_path = None

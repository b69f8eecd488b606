"""The session's memory plan: how the memory this run may use is split between its processes.

Each pytest process (the judge: one per xdist worker, or the only one) runs a golden worker, a candidate worker
and, when timing, a baseline worker. Before the plan each child's budget was a share of the whole machine (80% of
RAM per golden worker, half per candidate), so under ``-n 2`` the budgets summed to several times RAM and a level
with large cases ended in the kernel's OOM killer.

The plan is computed once, on the controller, and travels to the xdist workers with the other session state:

- ``usable`` = the tightest of MemAvailable (other users of the machine keep theirs), the cgroup limit and the
  inherited ``RLIMIT_AS``, less :data:`HEADROOM` for the page cache, the controller and whatever else starts;
- each of the ``workers`` pytest processes gets an equal ``share`` of it;
- within a share, every process of that judge is charged :data:`IDLE_BYTES` (an imported torch), and the rest,
  the ``slot``, belongs to the one case in flight. A judge runs its case's golden (setup) and then the candidate
  (call) one after the other, never together, so the golden worker and the candidate worker each get the whole
  slot; the judge's own case data (inputs, golden outputs, the comparison) comes out of the same slot, which is
  why a case is checked against it as a whole (:mod:`pytest_cannbench.taskformat.memory_need`).

So at any moment the sum over the session is at most ``workers * share <= usable``. The golden worker's limit is
an address-space limit (``RLIMIT_AS``), which also counts mapped-but-untouched library pages, so it gets
:data:`ADDRESS_SPACE_SLACK` on top of the slot. Pure arithmetic: the numbers come from :mod:`.limits`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_cannbench.workers.limits import Inherited

GIB = 1 << 30
HEADROOM = 0.10  # of the usable memory, never planned: page cache, the xdist controller, short-lived children
# what a process with torch imported and nothing to do adds to the machine's use: its proportional set size, which
# counts a shared library once across the processes that map it (measured 2026-12-04 on official level 1: idle
# judges 0.21-0.25 GiB, candidate workers 0.19, golden workers 0.15; benchmarks/results/performance-rounds.md, Round
# 10). Its resident
# size, 0.35-0.5 GiB, counts torch's libraries again in every process: the plan used it until 2026-12-04, and a
# 5 GiB session left a case running alone 2.5 GiB.
IDLE_BYTES = 256 << 20
ADDRESS_SPACE_SLACK = 2 * GIB  # RLIMIT_AS counts reserved, untouched mappings (torch's libraries, thread stacks)
MIN_SLOT = 1 * GIB  # below this nothing useful runs; the plan says so instead of planning nonsense
# What each shared region (one per candidate-side worker) keeps backed between cases. Accuracy only: 64 MiB, inside
# its worker's IDLE_BYTES (idle regions had held 2 GiB of a 6.8 GiB peak, Round 10). Timed: a timed case maps
# every set of a window, and on a VM that hands freed pages back to its host (free page reporting) faulting in a
# released region again ran at about 0.8 GB/s: 138 ms a window for the README main job's sets, more than their
# references (benchmarks/results/performance-rounds.md, Round 13). So timed sessions keep up to TIMED_REGION_KEEP and
# charge the
# difference as idle memory of each region's worker, where the plan leaves a slot of 2 * MIN_SLOT or more.
REGION_KEEP = 64 << 20
TIMED_REGION_KEEP = 256 << 20
WORKERINPUT_KEY = "cannbench_memory_plan"


@dataclass(frozen=True)
class MemoryPlan:
    """Budgets of one session's processes, in bytes, and what bounded them."""

    usable: int  # what the whole session may hold, headroom already taken off
    bound: str  # what decided ``usable``: "MemAvailable", "cgroup", "ulimit -v" or "MemTotal"
    workers: int  # pytest processes (xdist workers, or 1)
    processes: int  # per pytest process: the judge and its worker processes
    share: int  # per pytest process: usable / workers
    slot: int  # per pytest process: the share less every process's idle memory; one case's whole need
    golden: int  # the golden worker's RLIMIT_AS
    candidate: int  # the candidate (and baseline) worker's resident-memory watchdog limit
    whole: int = 0  # one case running alone: usable less every other process's idle memory (>= slot)
    region_keep: int = REGION_KEEP  # what each shared region keeps backed between cases (charged past REGION_KEEP)
    pool_file: str | None = None  # the memory pool's ledger under xdist (workers.memory_pool); None: one judge
    asked_golden: bool = False  # --cann-golden-memory overrode the plan's golden budget
    asked_candidate: bool = False  # --cann-worker-memory overrode the plan's candidate budget

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryPlan:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def alone(self, need: int) -> bool:
        """Whether a case of this need runs alone: over a slot, so only once the other judges hold nothing of
        the memory pool, with the whole session's memory and the budgets raised to it."""
        return need > self.slot and self.pool_file is not None

    @property
    def largest(self) -> int:
        """The most one case may need: the whole session's room where cases can run alone, else a slot."""
        return max(self.slot, self.whole) if self.pool_file is not None else self.slot

    @property
    def golden_whole(self) -> int:
        """The golden worker's address-space budget for a case that runs alone."""
        return self.golden if self.asked_golden else max(self.golden, self.whole + ADDRESS_SPACE_SLACK)

    @property
    def candidate_whole(self) -> int:
        return self.candidate if self.asked_candidate else max(self.candidate, self.whole)

    def describe(self) -> str:
        """One line for the session header."""
        golden = f"golden {gib(self.golden)} address space{' (asked)' if self.asked_golden else ''}"
        candidate = f"candidate {gib(self.candidate)} resident{' (asked)' if self.asked_candidate else ''}"
        alone = (f", up to {gib(self.whole)} alone (the other workers wait)" if self.pool_file is not None
                 and self.whole > self.slot else "")
        kept = "" if self.bound == "--cann-session-memory" else f", {HEADROOM:.0%} kept free"
        regions = (f"; shared regions keep {self.region_keep >> 20} MiB between timed cases"
                   if self.region_keep > REGION_KEEP else "")
        return (f"cannbench: memory plan: {gib(self.usable)} usable ({self.bound}{kept}) / "
                f"{self.workers} worker(s) = {gib(self.share)} each, {self.processes} processes each; a case may "
                f"use {gib(self.slot)} ({golden}, {candidate}){alone}; larger cases are too_large{regions}")


def gib(value: int) -> str:
    return f"{value / GIB:.1f} GiB"


def mem_available(meminfo: str | None = None) -> int | None:
    """MemAvailable from ``/proc/meminfo`` (what can be had without swapping), None when unreadable."""
    if meminfo is None:
        try:
            meminfo = Path("/proc/meminfo").read_text()
        except OSError:
            return None
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                return int(fields[1]) * 1024
    return None


def usable_memory(limits: Inherited, available: int | None, asked: int | None = None) -> tuple[int, str]:
    """The tightest bound on what this session may hold, and its name; ``asked`` (--cann-session-memory) is taken
    as it is, only never above the machine's hard bounds (MemTotal, the cgroup, ulimit -v)."""
    hard = [(limits.physical, "MemTotal"), (limits.cgroup_memory, "cgroup"), (limits.address_space, "ulimit -v")]
    if asked is not None:
        return min([asked, *(value for value, _ in hard if value)]), "--cann-session-memory"
    known = [(value, name) for value, name in [*hard, (available, "MemAvailable")] if value]
    if not known:
        return 0, "unknown"
    value, name = min(known)
    return int(value * (1 - HEADROOM)), name


def make_plan(limits: Inherited, available: int | None, workers: int, processes: int,
              asked_golden: int | None = None, asked_candidate: int | None = None,
              asked_total: int | None = None, timed_regions: int = 0) -> MemoryPlan:
    """Split the usable memory between ``workers`` judges of ``processes`` processes each (judge included).

    ``timed_regions``: the shared regions of each judge's timed workers (candidates and baseline; 0 when nothing
    is timed), which keep :data:`TIMED_REGION_KEEP` backed between cases where the slot stays 2 * MIN_SLOT or
    more, charged as idle memory.
    ``--cann-golden-memory``/``--cann-worker-memory`` still win when given (the user knows the machine), but never
    above the inherited limits the workers could not exceed anyway."""
    usable, bound = usable_memory(limits, available, asked_total)
    workers, processes = max(1, workers), max(2, processes)
    share = usable // workers
    idle = (processes - 1) * IDLE_BYTES
    kept = max(0, timed_regions) * (TIMED_REGION_KEEP - REGION_KEEP)  # a judge's regions beyond their idle part
    if share - idle - kept < 2 * MIN_SLOT:  # too little room: the regions keep what accuracy runs keep
        kept = 0
    region_keep = TIMED_REGION_KEEP if kept else REGION_KEEP
    slot = max(MIN_SLOT, share - idle - kept)
    whole = max(slot, usable - (workers * processes - 1) * IDLE_BYTES - (workers - 1) * kept)
    golden = asked_golden if asked_golden is not None else slot + ADDRESS_SPACE_SLACK
    if limits.address_space is not None:
        golden = min(golden, limits.address_space)
    candidate = asked_candidate if asked_candidate is not None else slot
    ceiling = limits.memory
    if ceiling:
        candidate = min(candidate, ceiling)
    return MemoryPlan(usable=usable, bound=bound, workers=workers, processes=processes, share=share, slot=slot,
                      golden=golden, candidate=candidate, whole=whole, region_keep=region_keep,
                      asked_golden=asked_golden is not None, asked_candidate=asked_candidate is not None)


def too_large(need: int, detail: str, plan: MemoryPlan, room: int | None = None) -> str | None:
    """The ``too_large`` message of a case needing at least ``need`` bytes, or None when it fits (alone);
    ``room``: what it may have now, when less than the plan's."""
    room = plan.largest if room is None else room
    if need <= room:
        return None
    return (f"the case needs at least {gib(need)} ({detail}), over the {gib(room)} one "
            f"case may use under "
            f"this session's memory plan ({gib(plan.usable)} usable, {plan.bound}, / {plan.workers} worker(s)); "
            "not graded: run it with fewer xdist workers or on a machine with more memory")

"""What this process inherited (rlimits, cgroup v1/v2 memory and CPU limits) and the budgets clamped to it.

Every budget the plugin sets for its children is at most what the pytest process itself may use: raising an
rlimit above the inherited hard limit fails ("not allowed to raise maximum limit"), and a budget above a cgroup's
memory limit is one the kernel never lets the worker reach. No torch here: the header uses it.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

UNLIMITED = 1 << 60  # cgroup files write "max" (v2) or a page-rounded 2**63 (v1) for no limit
CGROUP_ROOT = Path("/sys/fs/cgroup")
GOLDEN_SHARE = 0.8  # of the memory ceiling, each golden worker (see golden_memory_bytes)
CANDIDATE_SHARE = 0.5  # of the memory ceiling, the candidate worker's resident memory


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text in ("", "max"):
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 < value < UNLIMITED else None


def _cgroup_dirs(proc_cgroup: str, root: Path) -> list[tuple[Path, str]]:
    """(directory, version) of this process's memory cgroup and its ancestors, from ``/proc/self/cgroup`` text."""
    found: list[tuple[Path, str]] = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "" and parts[0] == "0":
            base, version = root, "v2"
        elif "memory" in controllers.split(","):
            base, version = root / "memory", "v1"
        else:
            continue
        rel_path = Path(rel.lstrip("/"))
        for depth in range(len(rel_path.parts), -1, -1):  # own cgroup first, then each ancestor
            found.append((base.joinpath(*rel_path.parts[:depth]), version))
    return found


def cgroup_memory_bytes(proc_cgroup: str | None = None, root: Path = CGROUP_ROOT) -> int | None:
    """The tightest memory limit of this process's cgroups (v2 ``memory.max``, v1 ``memory.limit_in_bytes``),
    ancestors included; None when there is none or it cannot be read."""
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            return None
    limits = [_read_limit(d / ("memory.max" if v == "v2" else "memory.limit_in_bytes"))
              for d, v in _cgroup_dirs(proc_cgroup, root)]
    values = [value for value in limits if value is not None]
    return min(values) if values else None


def cgroup_cpus(proc_cgroup: str | None = None, root: Path = CGROUP_ROOT) -> int | None:
    """Whole CPUs a cgroup v2 ``cpu.max`` quota (or v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``) allows."""
    candidates = [root / "cpu.max"]
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            proc_cgroup = ""
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] == "0" and parts[1] == "":
            candidates.insert(0, root / parts[2].lstrip("/") / "cpu.max")
    for path in candidates:
        try:
            fields = path.read_text().split()
        except OSError:
            continue
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit() and int(fields[1]) > 0:
            return max(1, int(fields[0]) // int(fields[1]))
    quota_v1 = _read_limit(root / "cpu" / "cpu.cfs_quota_us")
    period_v1 = _read_limit(root / "cpu" / "cpu.cfs_period_us")
    if quota_v1 and period_v1:
        return max(1, quota_v1 // period_v1)
    return None


def physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def soft_limit(which: int) -> int | None:
    """The soft rlimit, None when unlimited."""
    try:
        soft, _hard = resource.getrlimit(which)
    except (ValueError, OSError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


@dataclass(frozen=True)
class Inherited:
    """The limits this pytest process runs under (None: none)."""

    physical: int
    cgroup_memory: int | None
    address_space: int | None  # RLIMIT_AS (ulimit -v, prlimit --as)
    open_files: int | None  # RLIMIT_NOFILE (ulimit -n)
    processes: int | None  # RLIMIT_NPROC: threads count against it
    file_size: int | None  # RLIMIT_FSIZE
    cpus: int | None  # a cgroup CPU quota

    @property
    def memory(self) -> int:
        """What a child may use at most: physical memory, the cgroup limit, whichever is lower."""
        values = [v for v in (self.physical, self.cgroup_memory) if v]
        return min(values) if values else 0


def inherited() -> Inherited:
    return Inherited(physical=physical_memory_bytes(), cgroup_memory=cgroup_memory_bytes(),
                     address_space=soft_limit(resource.RLIMIT_AS), open_files=soft_limit(resource.RLIMIT_NOFILE),
                     processes=soft_limit(resource.RLIMIT_NPROC), file_size=soft_limit(resource.RLIMIT_FSIZE),
                     cpus=cgroup_cpus())


def golden_memory_bytes(limits: Inherited | None = None, asked: int | None = None) -> int:
    """Each golden worker's address-space budget: ``asked`` (--cann-golden-memory), else 80% of the memory
    ceiling; never above the inherited ``RLIMIT_AS`` (setrlimit could not raise it).

    Not divided by the number of pytest processes: heavy goldens rarely peak together, and the official tree
    has goldens needing well over half of a 24 GiB machine. If they do collide, the kernel's OOM killer takes
    a golden worker (``oom_score_adj`` 1000), never the judge, and that case reports a golden_error.
    """
    limits = limits or inherited()
    budget = asked if asked is not None else int(limits.memory * GOLDEN_SHARE)
    if limits.address_space is not None:
        budget = min(budget, limits.address_space)
    return budget


def candidate_memory_bytes(limits: Inherited | None = None, asked: int | None = None) -> int:
    """The candidate worker's resident-memory budget (--cann-worker-memory, else half of the memory ceiling),
    at most the memory ceiling: room for any honest kernel, and the judge keeps the rest."""
    limits = limits or inherited()
    ceiling = limits.memory
    budget = asked if asked is not None else int(ceiling * CANDIDATE_SHARE)
    return min(budget, ceiling) if ceiling else budget


def clamp_rlimit(which: int, wanted: int) -> None:
    """Set both limits to ``wanted``, lowered to the inherited hard limit: a child can never raise it."""
    _soft, hard = resource.getrlimit(which)
    cap = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    resource.setrlimit(which, (cap, cap))


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**30:.1f} GiB"


def header_line(limits: Inherited, golden: int, candidate: int, threads: int) -> str:
    """The effective budgets and what bounded them, for the session header."""
    bounds = [f"RAM {_gib(limits.physical)}"]
    if limits.cgroup_memory is not None:
        bounds.append(f"cgroup {_gib(limits.cgroup_memory)}")
    if limits.address_space is not None:
        bounds.append(f"ulimit -v {_gib(limits.address_space)}")
    if limits.open_files is not None:
        bounds.append(f"ulimit -n {limits.open_files}")
    if limits.cpus is not None:
        bounds.append(f"cgroup cpus {limits.cpus}")
    return (f"cannbench: budgets: golden worker address space {_gib(golden)}, candidate worker memory "
            f"{_gib(candidate)}, {threads} thread(s) per process (inherited: {', '.join(bounds)})")


def usable_cores() -> int:
    """The CPUs this process may run on, at most a cgroup CPU quota (a container's ``--cpus``)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_cpus()
    return min(cores, quota) if quota else cores


def processes() -> int:
    """pytest processes of this run (xdist workers, or 1)."""
    return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))


def cpu_threads() -> int:
    """Intra-op threads per process: the cores shared by the run's processes, at least one.

    Oversubscribed OpenMP pools are not just slower but pathological: on the 2-core CI
    machine two busy processes with 2 threads each ran element-wise ops 8-15x slower
    than with 1 thread each.
    """
    return max(1, usable_cores() // processes())


def timing_threads(asked: int, fenced: bool, workers: int | None = None) -> int:
    """Intra-op threads of the candidate and baseline workers (``--cann-timing-threads``, default 1), for all their
    calls: the same count under ``-n 2`` as serially, so the two modes time the same thing (a serial run
    used to time with both cores and ``-n 2`` with one, and their scores differed). One count for every call: a
    worker switching counts between its correctness calls and its timed batch failed honest batches as
    ``timing_implausible`` (CPU outside the phases it reported). ``all`` is every usable core, which a timed window
    has to itself while the quiet-window fence holds the other xdist workers back; with the fence off, a window
    shares the machine and gets at most the process's share. ``asked``: the option (0: all); ``fenced``: the fence
    is on; ``workers``: the run's pytest processes (default: this one's)."""
    workers = processes() if workers is None else max(1, workers)
    cores = usable_cores()
    wanted = asked or cores
    shared = workers > 1 and not fenced
    return max(1, min(wanted, cores // workers if shared else cores))

"""Kernel coverage: the share of a KernelBench forward's work that ran in the submission's own code.

KernelBench's own rule (a custom kernel must run in ``forward``) passes a *decoy*: a ModelNew that compiles a
kernel, runs it on one element and returns ``torch.softmax(x)``. Coverage tells the two apart, from three
sources (best first where a source has enough evidence):

* ``device_time`` (CUDA, the timing trace): device time of the kernels the submission's own code launched (the
  CPU op a kernel's launch is linked to is one of its own: a labelled function of a prebuilt extension, or an
  op its extensions registered) against all device time in the timed calls' windows (:func:`device_time`);
* ``cpu_samples`` (CPU, the judge's sampler, :mod:`perf_profile`): the samples in the submission's own
  objects (its private install, JIT extensions included) against those and the foreign ones (builtin libraries,
  JIT and unmapped code), once a per-call allowance of glue is taken off the foreign (:func:`from_samples`); the
  language runtime (the interpreter, libc, libm) and waiting count for neither; judged from
  :data:`MIN_WORK_SAMPLES` own and foreign samples up;
* ``op_time`` (CPU, the in-worker profiler the kernel rule already records): time inside the submission's own
  kernels not spent in builtin ops they called, against that plus the time of builtin compute ops (allocation,
  views and copies count for neither) inside the calls (:func:`op_time`). Reported by the worker, hence only as
  good as the profiler the submission runs beside; the fallback when too few samples were taken.

:func:`judge` turns a coverage into a finding: ``low_kernel_coverage`` under the floor (the default KernelBench
rule, ``--cann-kb-guard coverage``, floor ``guard.policy.COVERAGE_FLOOR``), and always a ``kernel_coverage`` flag
that says how much and from what.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_cannbench.guard import builtin_ops
from pytest_cannbench.guard.policy import KERNEL_COVERAGE
from pytest_cannbench.guard.recorder import CANARY_OP, MARK, REDISPATCH, Event
from pytest_cannbench.outcome import LOW_KERNEL_COVERAGE

MIN_WORK_SAMPLES = 40  # as the CANN verdict's (guard.perf_verdict): fewer is inconclusive, the op time decides
GLUE_US_PER_CALL = 30.0  # per call, of foreign samples: allocation and dispatch glue (guard.perf_verdict's)
SOURCES = ("device_time", "cpu_samples", "op_time")
TIME_RECORD = "kernel_time"  # the kind of the worker's op-time record among its guard report
ANNOTATIONS = ("cannbench_call_", builtin_ops.CUSTOM_PREFIX, MARK)  # ranges of ours, never kernels


@dataclass(frozen=True)
class Coverage:
    """``own`` of ``work`` (samples, or nanoseconds of op or device time) over ``calls`` calls."""

    share: float
    source: str  # one of SOURCES
    own: float
    work: float
    calls: int

    def describe(self) -> str:
        unit = {"cpu_samples": "own and foreign samples", "op_time": "us of op time",
                "device_time": "us of device time"}
        scale = 1.0 if self.source == "cpu_samples" else 1e-3
        return (f"{self.share:.0%} of the forward's work ran in the submission's own kernels ({self.source}: "
                f"{self.own * scale:.0f} of {self.work * scale:.0f} {unit[self.source]} over {self.calls} call(s))")

    def to_dict(self) -> dict[str, Any]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


def judge(found: Coverage | None, floor: float | None) -> list[tuple[str, str]]:
    """Guard problems ``[(kind, detail)]``: the coverage flag, and ``low_kernel_coverage`` under ``floor``."""
    if found is None:
        return []
    rule = f"; floor {floor:.0%}" if floor is not None else "; no floor (--cann-guard kernelbench)"
    problems = [(KERNEL_COVERAGE, found.describe() + rule)]
    if floor is not None and found.share < floor:
        problems.insert(0, (LOW_KERNEL_COVERAGE, f"{found.describe()}, under the {floor:.0%} a KernelBench "
                            "forward must do in its own kernels (a decoy: a custom kernel runs, builtin ops do "
                            "the work)"))
    return problems


# ---------------------------------------------------------------- the judge's CPU samples

def from_samples(own: int, foreign: int, calls: int, period_ns: int, *, glue_us: float = GLUE_US_PER_CALL,
                 min_samples: int = MIN_WORK_SAMPLES) -> Coverage | None:
    """Coverage from a sampled profile's own and foreign sample counts (``CallProfile.count("own")`` and
    ``foreign_samples``: builtin libraries, JIT and unmapped code); None when inconclusive. The language runtime
    counts for neither side: a C++ kernel's ``std::exp`` runs in libm (an honest softmax kernel put 73% of its work
    samples there, measured). ``glue_us`` per call of foreign samples is forgiven first (the allocation and
    argument parsing around a call), so a small forward is not a decoy for its glue."""
    if own + foreign < min_samples:
        return None
    rest = max(0.0, foreign - calls * glue_us * 1000 / (period_ns or 1))
    judged = own + rest
    return Coverage(own / judged if judged else 1.0, "cpu_samples", float(own), float(judged), calls)


# ---------------------------------------------------------------- the worker's profiler trace (op time)

def _union(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(s for s in spans if s[1] > s[0]):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _length(spans: list[tuple[int, int]]) -> int:
    return sum(hi - lo for lo, hi in spans)


def _canaries(events: list[Event]) -> set[int]:
    """The judge's canary ops: each the last op its marker's thread recorded inside the marker, when it is one."""
    by_thread: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for i, (_name, start, end, annotation, thread) in enumerate(events):
        if not annotation:
            by_thread[thread].append((start, end, i))
    for ops in by_thread.values():
        ops.sort()
    found = set()
    for name, lo, hi, annotation, thread in events:
        if name != MARK or not annotation:
            continue
        ops = by_thread.get(thread, [])
        k = bisect.bisect_right(ops, (hi, 1 << 62, 1 << 62)) - 1
        while k >= 0 and ops[k][0] >= lo:
            if ops[k][1] <= hi:  # the last op inside the marker
                if events[ops[k][2]][0] == CANARY_OP:
                    found.add(ops[k][2])
                break
            k -= 1
    return found


def op_time(events: list[Event], allowed: Callable[[str], bool]) -> tuple[int, int]:
    """``(own_ns, builtin_ns)`` inside our call markers, per thread: the union of the submission's own kernels
    (labels of prebuilt extensions' functions, its own ops) less the builtin compute ops inside them, and the
    union of builtin compute ops (the ops ``allowed`` refuses, and redispatched ops). The judge's canary op (the
    marker thread's last op in the marker) is the harness's."""
    windows = _union((s, e) for n, s, e, a, _t in events if n == MARK and a)
    canaries = _canaries(events)
    own: dict[int, list[tuple[int, int]]] = defaultdict(list)
    builtin: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, (name, start, end, annotation, thread) in enumerate(events):
        if annotation:
            if name.startswith(builtin_ops.CUSTOM_PREFIX):
                own[thread].append((start, end))
            elif name.startswith(REDISPATCH) and not allowed(name[len(REDISPATCH):]):
                builtin[thread].append((start, end))
        elif builtin_ops.own_op(name):
            own[thread].append((start, end))
        elif i not in canaries and not allowed(name):
            builtin[thread].append((start, end))
    own_ns = builtin_ns = 0
    for thread in set(own) | set(builtin):
        theirs = _intersect(_union(builtin[thread]), windows)
        mine = _intersect(_union(own[thread]), windows)
        builtin_ns += _length(theirs)
        own_ns += _length(mine) - _length(_intersect(mine, theirs))
    return own_ns, builtin_ns


def from_op_time(own_ns: float, builtin_ns: float, calls: int) -> Coverage | None:
    """Coverage from the worker's op-time record; None when the calls ran neither own kernels nor builtin ops."""
    work = own_ns + builtin_ns
    return Coverage(own_ns / work, "op_time", float(own_ns), float(work), calls) if work > 0 else None


def time_record(reply: Mapping[str, Any]) -> tuple[float, float, int] | None:
    """``(own_ns, builtin_ns, calls)`` from a worker reply's guard report (untrusted JSON: validated)."""
    for item in reply.get("guard") or [] if isinstance(reply.get("guard"), list) else []:
        if isinstance(item, dict) and item.get("kind") == TIME_RECORD:
            values = [item.get(k) for k in ("own_ns", "builtin_ns", "calls")]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e18 for v in values):
                return float(values[0]), float(values[1]), int(values[2])  # type: ignore[arg-type]
    return None


# ---------------------------------------------------------------- a CUDA timing trace (device time)

@dataclass(frozen=True)
class TraceRecord:
    """One event of a CUDA profiler trace as ``torch.autograd.profiler``'s ``function_events`` gives it: a CPU
    op or annotation (``device`` False: its correlation ``id``), or a device kernel (``device`` True, ``link``:
    the correlation id of the CPU op its launch is linked to). Times in microseconds."""

    name: str
    start: float
    end: float
    device: bool
    id: int = 0
    link: int = 0
    annotation: bool = False


def records_of(function_events: Iterable[Any], device_type: Any) -> list[TraceRecord]:
    """:class:`TraceRecord`\\ s of a profiler's ``function_events`` (``device_type``: the CUDA DeviceType)."""
    out = []
    for e in function_events:
        out.append(TraceRecord(name=str(e.name), start=float(e.time_range.start), end=float(e.time_range.end),
                               device=e.device_type == device_type, id=int(getattr(e, "id", 0) or 0),
                               link=int(getattr(e, "linked_correlation_id", 0) or 0),
                               annotation=bool(getattr(e, "is_user_annotation", False))))
    return out


def own_launcher(record: TraceRecord) -> bool:
    """A CPU event whose launches are the submission's own kernels: a prebuilt extension's function label or an op
    its extensions registered. A builtin op that such a function called is linked to itself, not to the label."""
    if record.name.startswith(builtin_ops.CUSTOM_PREFIX):
        return True
    return not record.annotation and builtin_ops.own_op(record.name)


def device_time(records: list[TraceRecord], windows: list[tuple[float, float]]) -> tuple[float, float]:
    """``(own_us, all_us)``: the device time of the kernels that started inside a timed call's window (the flush
    kernels run outside), and the part of it launched by the submission's own code (:func:`own_launcher` on the
    CPU event the kernel's launch is linked to; a kernel linked to nothing, or to a builtin op, is not its own).
    Kernels on concurrent streams each count their own time."""
    launchers = {r.id: r for r in records if not r.device and r.id}
    own = total = 0.0
    for r in records:
        # the calls' own ranges are drawn on the card's timeline too (gpu_user_annotation): not kernels
        if not r.device or r.annotation or r.name.startswith(ANNOTATIONS) \
                or not any(lo <= r.start <= hi for lo, hi in windows):
            continue
        spent = max(0.0, r.end - r.start)
        total += spent
        launcher = launchers.get(r.link)
        if launcher is not None and own_launcher(launcher):
            own += spent
    return own, total


def from_device_time(own_us: float, all_us: float, calls: int) -> Coverage | None:
    return Coverage(own_us / all_us, "device_time", own_us * 1e3, all_us * 1e3, calls) if all_us > 0 else None


def device_record(reply: Mapping[str, Any]) -> tuple[float, float, int] | None:
    """``(own_us, all_us, calls)`` from a CUDA timing batch's reply (``device_kernel_time``), validated."""
    item = reply.get("device_kernel_time")
    if isinstance(item, dict):
        values = [item.get(k) for k in ("own_us", "all_us", "calls")]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e15 for v in values):
            return float(values[0]), float(values[1]), int(values[2])  # type: ignore[arg-type]
    return None


@dataclass
class Ledger:
    """The judge's coverage evidence of one KernelBench worker process, per profile key (``case:<log>`` and
    ``op:<problem>``, as ``workers.evidence`` merges samples): op and device time added up call by call, each
    case's coverage and guard flags so far (``records``, read by the case's item for its outcome)."""

    floor: float | None = None
    host: bool = True  # the worker computes on the CPU: host samples and op time measure its work (not on a card)
    op_times: dict[str, list[float]] = field(default_factory=dict)  # key -> [own_ns, builtin_ns, calls]
    device: dict[str, list[float]] = field(default_factory=dict)  # key -> [own_us, all_us, calls]
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # case key -> {"coverage", "flags"}

    def judge(self, keys: tuple[str, ...], reply: Mapping[str, Any], profiles: Mapping[str, Any],
              findings: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Add a finished call's (or batch's) records, judge the case's coverage with the best evidence so far,
        and note its flags (``findings``: the guard's, from the same reply) for the case; returns the problems."""
        for book, record in ((self.op_times, time_record(reply)), (self.device, device_record(reply))):
            if record is not None:
                for key in keys:
                    book[key] = [a + b for a, b in zip(book.get(key, [0.0, 0.0, 0.0]), record)]
        found = self.best(keys, profiles)
        problems = judge(found, self.floor)
        entry = self.records.setdefault(keys[0], {"coverage": {}, "flags": []})
        entry["coverage"] = found.to_dict() if found is not None else entry["coverage"]
        entry["flags"] = list(dict.fromkeys([*entry["flags"], *(f"{k}: {d}" for k, d in findings + problems)]))
        return problems

    def best(self, keys: tuple[str, ...], profiles: Mapping[str, Any]) -> Coverage | None:
        """Device time where the card's trace gave any, else conclusive samples (the case's, else the problem's),
        else op time (the case's, else the problem's). On a card the host's samples and op times are launches, not
        the work: only the device time counts there."""
        for key in keys:
            if key in self.device:
                own_us, all_us, calls = self.device[key]
                found = from_device_time(own_us, all_us, int(calls))
                if found is not None:
                    return found
        if not self.host:
            return None
        for key in keys:
            profile = profiles.get(key)
            if profile is not None and not profile.error:
                found = from_samples(profile.count("own"), profile.foreign_samples, profile.calls, profile.period_ns)
                if found is not None:
                    return found
        for key in keys:
            if key in self.op_times:
                own_ns, builtin_ns, calls = self.op_times[key]
                found = from_op_time(own_ns, builtin_ns, int(calls))
                if found is not None:
                    return found
        return None

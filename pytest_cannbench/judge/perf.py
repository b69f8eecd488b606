"""Time one case that passed its accuracy check: candidate and live baselines, paired, verified, anchored.

Runs in the judge, for every task format (a :class:`~pytest_cannbench.judge.source.CaseSource`). The
candidate's timed batch runs in its candidate worker; each baseline (for a CANN operator the golden in native
precision on the same device, for a KernelBench problem the eager ``Model`` and optionally its
``torch.compile``) runs with the same protocol and the same input sets in a separate baseline worker that
never imported the submission. In one lock window the candidate and the main baseline alternate call by call
(ABBA) on the same sets, each set written into a worker's region only just before its call; every timed
candidate output is then judged against the reference of its input set. ``--cann-repeat auto`` adds windows
until the paired speed-up's interval is tight enough (docs/timing.md). On CUDA the judge reads the GPU's clocks,
temperature and power around each window (``timing.gpu_telemetry``) and times a window again, once, on fresh input
sets when it ran throttled or its CUDA-graph timing fell back (``timing.cuda_graph``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cannbench import outcome as oc
from pytest_cannbench.figures import hap_interval
from pytest_cannbench.judge.goldens import GoldenFailure
from pytest_cannbench.judge.source import Anchors, CaseSource, Reference, case_log_path, fate
from pytest_cannbench.options import Settings
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.phases import TIMING_PARTS, PhaseClock, measured
from pytest_cannbench.timing.anchors import check_t_hw
from pytest_cannbench.timing.cuda_graph import FALLBACK_TIMER, GRAPH_TIMER
from pytest_cannbench.timing.devices import DevicePlan, timing_lock
from pytest_cannbench.timing.gpu_telemetry import Telemetry, window_throttled
from pytest_cannbench.timing.in_worker import Flusher
from pytest_cannbench.timing.isolation import Fence, load_sample, windows_under_load
from pytest_cannbench.timing.stats import (
    CaseTiming,
    Interval,
    bootstrap_seed,
    cpu_floor,
    handshake_allowance,
    implausible,
    median_interval,
    not_measured,
    paired_speedup,
    sets_needed,
    summarize,
    unaccounted_per_handshake,
)
from pytest_cannbench.vocab.records import TimingRecord
from pytest_cannbench.workers.limits import usable_cores

if TYPE_CHECKING:
    from pytest_cannbench.workers.batch import BatchResult, StreamedBatch
    from pytest_cannbench.workers.candidate_client import CandidateWorker

BATCH_MEMORY_BYTES = 1 << 30  # input sets and output areas of one timed batch; larger cases are split
RETRY_SEED_BASE = 1 << 20  # a retried window's fresh input sets: timed_seed(RETRY_SEED_BASE + index), never reused


@dataclass
class PerfContext:
    settings: Settings
    device: DevicePlan
    baseline_worker: CandidateWorker  # golden mode: never saw the submission
    anchors: Anchors  # (task, case, data) -> t_hw_us, sources, bytes, flops
    log_dir: Path
    npu: dict[str, Any] | None = None  # NPU timer settings: the session's secret cache-clean shape, boost, level
    fence: Fence = field(default_factory=lambda: Fence(None))  # the session's quiet-window fence
    telemetry: Telemetry | None = None  # CUDA: the judge's GPU clock/temperature/power reader
    _flusher: Flusher | None = None

    def judge_flush(self) -> Callable[[], None] | None:
        """On the CPU the judge evicts the shared cache after writing a call's set, while the workers are frozen
        (they flush their own caches): a set enters the cache only when its call reads it."""
        if self.device.kind != "cpu":
            return None
        if self._flusher is None:
            self._flusher = Flusher("cpu")
        return self._flusher.flush


def _tensor_bytes(kwargs: dict[str, Any]) -> int:
    total = 0
    for value in kwargs.values():
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if hasattr(v, "element_size"):
                total += v.numel() * v.element_size()
    return total


def _chunks(indices: list[int], per_call_bytes: int) -> list[list[int]]:
    size = max(1, BATCH_MEMORY_BYTES // max(1, per_call_bytes))
    return [indices[i:i + size] for i in range(0, len(indices), size)]


@dataclass
class _Samples:
    """What the timed windows of one case gathered so far."""

    cand: list[float] = field(default_factory=list)
    base: dict[str, list[float]] = field(default_factory=dict)
    pairs: list[tuple[float, float]] = field(default_factory=list)  # (baseline, candidate) on one set, one window
    problems: dict[str, str] = field(default_factory=dict)  # baseline name -> why it stopped
    graph: str = "off"  # the CUDA-graph mode the next window asks for; pinned to on/off after the first
    mixed: bool = False  # candidate and baseline were timed in different modes even when timed again
    cand_timer: str = ""  # of the last window
    base_timer: str = ""  # of the last window's main baseline
    may_retry_floor: bool = False  # a window short only of the CPU-time floor may be timed again, once
    floor_failure: CaseOutcome | None = None  # set instead of failing when it may

    def add(self, other: _Samples) -> None:
        self.cand += other.cand
        for name, times in other.base.items():
            self.base.setdefault(name, []).extend(times)
        self.pairs += other.pairs


def _window(source: CaseSource[Any], ref: Reference, refs: dict[int, Reference], chunk: list[int], warmup: int,
            worker: CandidateWorker, ctx: PerfContext, record: CaseTiming, got: _Samples,
            clock: PhaseClock) -> CaseOutcome | None:
    """One lock window: the candidate and the main baseline alternate call by call (ABBA) on the same sets, each
    set written only just before its calls; other baselines follow in the same window. Then every timed
    candidate output is judged. Returns the failure the window exposed, if any."""
    s = ctx.settings
    target, baselines = source.candidate_target(ref), source.baselines(ref)
    sets = [ref.kwargs()] + [refs[i].kwargs() for i in chunk]
    calls = list(range(1, len(chunk) + 1))
    expected, flush = ref.out_bytes(), ctx.judge_flush()
    log = case_log_path(ctx.log_dir, source.key)
    live = [b for b in baselines if b.name not in got.problems]
    main = live[0] if live and live[0].name == baselines[0].name else None
    opts: dict[str, Any] = dict(warmup=warmup, expected_out_bytes=expected, timeout=s.case_timeout_s, npu=ctx.npu,
                                graph=got.graph)
    bw = ctx.baseline_worker
    with ctx.fence.shared(record.accuracy_spans), clock.part("timing_sets"):  # a grown region faults in here
        worker.make_room(sets, calls, expected, s.case_timeout_s)
        if main is not None:
            bw.make_room(sets, calls, expected, s.case_timeout_s)
    # the fence before the device lock, always (timing/isolation.py): no accuracy work of this session runs while
    # the window is timed, and none is held while waiting for the device
    asked, cpu = time.monotonic(), time.process_time()
    with ctx.fence.exclusive(), timing_lock(ctx.device):
        window = [time.monotonic()]
        clock.add("timing_wait", window[0] - asked, time.process_time() - cpu)
        cpu = time.process_time()
        load = {"start": load_sample()}
        gpu = _gpu_reading(ctx)
        gpu = {"start": gpu} if gpu is not None else None
        streamed = dict(opts, judge_flushes=flush is not None, defer=True)  # judged after the window
        cb = worker.open_batch(target, sets, calls, case_log=log, **streamed)
        bb = bw.open_batch(main.target, sets, calls, **streamed) if main is not None and cb.waiting else None
        interleave([(worker, cb), (bw, bb)], flush)
        extra = [b for b in live if b is not main] if cb.claims_ok else []
        if extra and bb is not None:  # judged now: their batches write into the same worker's region
            bw.conclude(bb)
        results: dict[str, BatchResult | None] = {
            b.name: bw.time_batch(b.target, sets, calls, judge_flush=flush, **opts) for b in extra}
        load["end"] = load_sample()
        if gpu is not None:
            gpu["end"] = _gpu_reading(ctx) or {"unavailable": "no reading at the end"}
        window.append(time.monotonic())
        clock.add("timing_window", window[1] - window[0], time.process_time() - cpu)
    with ctx.fence.shared(record.accuracy_spans), clock.part("timing_verify"):  # the batches' checks, fenced
        worker.conclude(cb)
        if bb is not None:
            bw.conclude(bb)
    record.windows.append(window)
    record.load.append(load)
    if gpu is not None:
        record.gpu.append(gpu)
    if main is not None and bb is not None:
        results[main.name] = bb.result
    batch = cb.result
    assert batch is not None
    if batch.status != "ok":
        status, failure = fate(batch.status)
        message = f"during timing: {batch.message}" + (f"\n--- end of its output:\n{batch.log_tail}"
                                                       if batch.log_tail else "")
        record.reason = f"the candidate failed while timed ({batch.status})"
        return source.outcome(status, failure, message)
    # The plausibility bound guards against a submission's clock; a golden (self-check) is trusted task code.
    # (Its streamed batches show more CPU than their phases too: each handshake's own, docs/timing.md.) The
    # handshakes' allowance is calibrated on the main baseline's, streamed in this window alongside.
    base = bb.result if bb is not None and bb.result is not None and bb.result.status == "ok" else None
    calibration = None if base is None else unaccounted_per_handshake(
        base.phases, base.cpu_s, bw.threads, base.busiest_cpu_s, len(calls))
    allowance = handshake_allowance(calibration)
    why = None if worker.mode == "golden" else implausible(batch.seconds, batch.phases, batch.wall_s, batch.timer,
                                                            batch.cpu_s, worker.threads, batch.busiest_cpu_s,
                                                            handshakes=len(calls), held_s=batch.held_s,
                                                            handshake_s=allowance)
    floor = cpu_floor(batch.phases, batch.cpu_s, worker.threads, batch.busiest_cpu_s, len(calls), allowance)
    if floor is not None:  # the evidence behind the check, kept for every window (docs/timing.md)
        record.cpu_floor.append({**{k: round(v, 3) for k, v in floor.items()}, "handshakes": len(calls),
                                 "allowance_ms": round(allowance * 1e3, 4),
                                 "baseline_ms": None if calibration is None else round(calibration * 1e3, 4)})
    _weaker_modes(record, worker.watch.marks())  # the meter and the budget of the worker that ran the batch
    if why:
        refused = source.outcome(oc.FAILED, oc.TIMING_IMPLAUSIBLE, f"timing implausible: {why}")
        if got.may_retry_floor and implausible(batch.seconds, batch.phases, batch.wall_s, batch.timer,
                                               handshakes=len(calls), held_s=batch.held_s) is None:
            got.floor_failure = refused  # short only of the CPU floor, which has a statistical slack: once more
            return None
        record.reason = "implausible timing"
        return refused
    with ctx.fence.shared(record.accuracy_spans) as hold:  # judging them is accuracy work
        for j, index in enumerate(chunk):
            hold.let_windows_pass()  # another worker's window, waiting, goes between two verdicts
            with clock.part("timing_verify"):
                verdict = source.judge(batch.outputs[j], refs[index], stats=False)  # the verdict is all it keeps
            if verdict.status != oc.PASSED:
                record.reason = "a timed output was wrong"
                return source.outcome(oc.FAILED, oc.TIMED_OUTPUT_WRONG,
                                      f"timed call {index + 1} (its own input set) is wrong: {verdict.message}")
    got.cand += batch.seconds
    got.cand_timer = batch.timer
    record.flags += [f"guard: {flag}" for flag in batch.flags if f"guard: {flag}" not in record.flags]
    record.timer = batch.timer
    record.notes += batch.notes
    for name, base in results.items():
        if base is None or base.status != "ok":
            text = (base.message or base.status) if base is not None else "did not run"
            label = next(b.label for b in baselines if b.name == name)
            got.problems[name] = f"the {label} failed: {text.splitlines()[0] if text else ''}"
            continue
        if base.timer == FALLBACK_TIMER and (main is None or name != main.name):  # its times include the clear
            record.notes.append(f"a window of the {name} baseline was dropped: its CUDA-graph timing fell back")
            continue
        got.base.setdefault(name, []).extend(base.seconds)
        if main is not None and name == main.name:
            got.pairs += list(zip(base.seconds, batch.seconds))
            got.base_timer = base.timer
    return None


METER_WEAK_FLAG, BUDGET_UNENFORCED_FLAG, PAGES_UNREAD_FLAG = "cpu_meter_weak", "thread_budget_unenforced", \
    "code_pages_unread"


def _weaker_modes(record: CaseTiming, watch: dict[str, str]) -> None:
    """What measured and bounded the candidate's CPU (``CpuWatch.marks``), each weaker mode said on the case (a
    flag and a note)."""
    record.cpu_meter, budget = watch.get("meter", ""), watch.get("budget_note", "")
    for flag, note in ((METER_WEAK_FLAG, watch.get("meter_note", "")),
                       (BUDGET_UNENFORCED_FLAG, budget and f"timing thread budget not enforced by the kernel "
                        f"({budget}): a call may run on more CPUs than the budget"),
                       (PAGES_UNREAD_FLAG, watch.get("pages_note", ""))):
        if note and flag not in record.flags:
            record.flags.append(flag)
            record.notes.append(note)


def interleave(participants: list[tuple[CandidateWorker, StreamedBatch | None]], flush: Callable[[], None] | None,
               *, flush_each_call: bool = False) -> None:
    """The timed calls of streamed batches open in one window, ABBA: for set k the participants run in order when
    k is even, in reverse when it is odd. Every participant's copy of set k is written first, then the judge's
    flush evicts the shared cache once, then each runs its call: a later call's set is as cold as the first's,
    since no call touches another participant's region (``flush_each_call``: the protocol before, one eviction
    per call, kept for ``benchmarks/timer_fidelity.py``). When the first participant (the candidate) ends early,
    the others' batches are stopped: their calls are moot."""
    lead, others = participants[0][1], participants[1:]
    assert lead is not None
    for k in range(len(lead.call_sets)):
        order = [(w, b) for w, b in (participants if k % 2 == 0 else participants[::-1])
                 if b is not None and b.waiting]
        if flush_each_call:
            for w, b in order:
                if b.waiting:
                    w.run_call(b, flush)
        else:
            for w, b in order:
                w.stage_call(b)
            if flush is not None and order:
                flush()
            for w, b in order:
                if b.waiting:
                    w.run_call(b)
        if not lead.waiting:
            for other, batch in others:
                if batch is not None:
                    other.stop_batch(batch)
            return


def _gpu_reading(ctx: PerfContext) -> dict[str, Any] | None:
    """The card's reading, or None where telemetry is off or unavailable (said once per case, in measure)."""
    if ctx.telemetry is None:
        return None
    reading = ctx.telemetry.read(ctx.device.physical_id or 0)
    return None if "unavailable" in reading and ctx.telemetry.backend is None else reading


def _distrust(ctx: PerfContext, record: CaseTiming, trial: _Samples, retried: bool) -> str | None:
    """Why a window just timed should be timed again (once) on fresh sets, or None. Pins the CUDA-graph mode."""
    why = None
    if trial.cand_timer == FALLBACK_TIMER or trial.base_timer == FALLBACK_TIMER:
        why, trial.graph = "its CUDA-graph timing fell back (see notes)", "off"
    elif trial.graph != "off" and trial.base_timer and (trial.cand_timer == GRAPH_TIMER) != (
            trial.base_timer == GRAPH_TIMER):
        trial.graph = "on" if trial.cand_timer == GRAPH_TIMER else "off"  # the candidate's call decides
        if not trial.mixed:  # once kept, later windows are not retimed for it again
            why = f"candidate ({trial.cand_timer}) and baseline ({trial.base_timer}) were timed differently"
            trial.mixed = retried
    elif trial.graph == "auto":
        trial.graph = "on" if trial.cand_timer == GRAPH_TIMER else "off"
    if why is None and ctx.telemetry is not None and record.gpu:
        throttle = window_throttled(record.gpu[-1])
        if throttle:
            why = f"gpu_throttled: {throttle}"
            if retried and "gpu_throttled" not in record.flags:
                record.flags.append("gpu_throttled")  # recorded, never failed, like timed_under_load
    if why and retried:
        record.notes.append(f"kept a window timed again: {why}")
    return why


def _fresh_sets(source: CaseSource[Any], like: Reference | None, chunk: list[int], ctx: PerfContext, record: CaseTiming,
                clock: PhaseClock) -> dict[int, Reference]:
    """References for a window timed again: input sets the candidate has never seen (raises GoldenFailure)."""
    refs: dict[int, Reference] = {}
    _prepare_sets(source, [(i, source.timed_seed(RETRY_SEED_BASE + i)) for i in chunk], like, ctx, record, clock,
                  refs)
    return refs


def _prepare_sets(source: CaseSource[Any], seeds: list[tuple[int, int]], like: Reference | None, ctx: PerfContext,
                  record: CaseTiming, clock: PhaseClock, refs: dict[int, Reference]) -> None:
    """The references of timed input sets, ``(index, seed)`` each, into ``refs`` in order: accuracy work, fenced,
    in steps another worker's waiting window may go between (raises GoldenFailure)."""
    with ctx.fence.shared(record.accuracy_spans) as hold:
        for index, seed in seeds:
            hold.let_windows_pass()
            with clock.part("timing_sets"):
                refs[index] = source.prepare(seed, like=like)
                refs[index].kwargs()  # inputs the judge makes itself (small ones) are made here, fenced


def _timed_window(source: CaseSource[Any], ref: Reference, refs: dict[int, Reference], chunk: list[int], warmup: int,
                  worker: CandidateWorker, ctx: PerfContext, record: CaseTiming, got: _Samples,
                  clock: PhaseClock, like: Reference | None = None) -> CaseOutcome | None:
    """:func:`_window`, timed again once on fresh input sets (never the ones the candidate has seen) when the
    window cannot be trusted: the GPU throttled, its CUDA-graph timing fell back, or the candidate and its
    baseline were timed in different modes. The second attempt's samples are kept either way. A candidate
    window whose only fault is the CPU-time floor (its exact checks all hold) is timed again too, and fails only
    if the second attempt is implausible as well: the floor's slack for the handshakes is a measured
    distribution with a tail, a clock that runs slow does so every time (docs/timing.md)."""
    for attempt in (0, 1):
        trial = _Samples(problems=got.problems, graph=got.graph, mixed=got.mixed, may_retry_floor=attempt == 0)
        failure = _window(source, ref, refs, chunk, warmup, worker, ctx, record, trial, clock)
        if failure is not None:
            return failure
        if trial.floor_failure is not None:
            try:
                refs = _fresh_sets(source, like, chunk, ctx, record, clock)
            except GoldenFailure:
                record.reason = "implausible timing"
                return trial.floor_failure
            record.notes.append(f"window timed again on fresh input sets: {trial.floor_failure.message}")
            warmup = max(1, warmup)
            continue
        why = _distrust(ctx, record, trial, retried=attempt == 1)
        got.graph, got.mixed = trial.graph, trial.mixed
        if why is not None and attempt == 0:
            try:
                refs = _fresh_sets(source, like, chunk, ctx, record, clock)
            except GoldenFailure as exc:
                record.notes.append(f"window not timed again ({why}): the {source.golden_noun} failed: {exc}")
            else:
                record.notes.append(f"window timed again on fresh input sets: {why}")
                warmup = max(1, warmup)
                continue
        if FALLBACK_TIMER in (trial.cand_timer, trial.base_timer):  # its times include the clear: never kept
            record.notes.append("a window whose CUDA-graph timing fell back was dropped")
            return None
        got.add(trial)
        got.cand_timer, got.base_timer = trial.cand_timer, trial.base_timer
        return None
    return None


WORK_PARTS = tuple(part for part in TIMING_PARTS if part != "timing_wait")  # what the budget counts


def _work(clock: PhaseClock) -> float:
    """Seconds of timing work the case's clock holds: what ``--cann-timing-budget`` counts. Under ``-n N`` a case
    also waits for the other workers' windows; counting that would give it fewer sets than a serial run gets."""
    return sum(clock.seconds.get(part, 0.0) for part in WORK_PARTS)


def _hap_half_width(source: CaseSource[Any], ref: Reference, ctx: PerfContext, got: _Samples,
                    speedup: Interval | None) -> float | None:
    """Half the width of the HAP interval the case would report if timing stopped now; None without one (no live
    pairing, anchors that give no HAP, a KernelBench problem). Its anchors are worked out on a throwaway record."""
    if speedup is None:
        return None
    probe = CaseTiming(measured=True)
    _summarise(source, ref, ctx, probe, got)
    ends = hap_interval(probe.t_baseline_us, probe.t_hw_us, speedup.to_dict())
    return None if ends is None else (ends[1] - ends[0]) / 2


def _precision(got: _Samples, seed: int) -> tuple[Interval | None, Interval]:
    """The paired speed-up's interval (None without a live baseline) and T_cand's own."""
    speedup = paired_speedup([b for b, _ in got.pairs], [c for _, c in got.pairs], seed) if got.pairs else None
    return speedup, median_interval(got.cand, seed)


def measure(source: CaseSource[Any], ref: Reference, worker: CandidateWorker, ctx: PerfContext,
            clock: PhaseClock | None = None, lean: bool = False) -> tuple[TimingRecord, CaseOutcome | None]:
    """The case's timing record, and a failure outcome when timing exposed the candidate.

    ``lean``: the case's first verdict read no native reference, so the timed sets' references are asked ``like``
    ``ref`` (:meth:`CaseSource.prepare`): their native reference runs only for a verdict that needs it.

    Fixed ``--cann-repeat N``: N input sets. ``auto``: the minimum count, then more rounds, each sized from
    the interval so far, until the paired speed-up's relative half-width is within its target, the HAP
    interval's half-width within ``--cann-hap-target``, the budget of the case's own timing work is spent or the
    maximum count is reached."""
    s, clock = ctx.settings, measured(clock)
    like = ref if lean else None
    started, worked = time.monotonic(), _work(clock)
    seed = bootstrap_seed(s.secret, s.seed, source.key)
    record = CaseTiming(measured=True, device=ctx.device.label)
    cuda = ctx.device.kind == "cuda"
    got = _Samples(graph=s.cuda_graph if cuda else "off")
    per_call = _tensor_bytes(ref.kwargs()) + ref.out_bytes()
    done, want, stop = 0, s.repeat, "fixed"
    speedup: Interval | None = None
    hap_achieved: float | None = None
    while True:
        refs: dict[int, Reference] = {}
        try:
            _prepare_sets(source, [(i, source.timed_seed(i)) for i in range(done, want)], like, ctx, record, clock,
                          refs)
        except GoldenFailure as exc:
            return (not_measured(f"the {source.golden_noun} failed on timed input set {done + len(refs) + 1}: "
                                 f"{exc}"), None)
        for n, chunk in enumerate(_chunks(list(range(done, want)), per_call)):
            try:
                failure = _timed_window(source, ref, refs, chunk, s.warmup if done == 0 and n == 0 else 1, worker,
                                        ctx, record, got, clock, like)
            except GoldenFailure as exc:  # a deferred native reference a verdict needed: the golden's failure
                return not_measured(f"the {source.golden_noun} failed on a timed input set: {exc}"), None
            if failure is not None:
                return not_measured(record.reason), failure
        done = want
        del refs
        if not got.cand:
            return not_measured("no window of the case could be timed in a way that can be trusted (notes)"), None
        speedup, cand_iv = _precision(got, seed)
        if not s.repeat_auto:
            break
        achieved = (speedup or cand_iv).rel_half_width
        hap_achieved = _hap_half_width(source, ref, ctx, got, speedup) if s.hap_target > 0 else None
        spent = _work(clock) - worked  # this case's own work: waiting on the other workers' windows is not spent
        if achieved <= s.timing_target:
            stop = "precision"
        elif hap_achieved is not None and hap_achieved <= s.hap_target:
            stop = "hap_precision"
        elif done >= s.repeat_max:
            stop = "max"
        elif spent >= s.timing_budget_s:
            stop = "budget"
        else:
            per_set = spent / done
            affordable = done + max(1, int((s.timing_budget_s - spent) / per_set)) if per_set > 0 else s.repeat_max
            needed = sets_needed(done, achieved, s.timing_target)
            if hap_achieved is not None:
                needed = min(needed, sets_needed(done, hap_achieved, s.hap_target))
            want = min(s.repeat_max, affordable, max(done + max(2, done // 4), needed))
            want += (want - done) % 2  # whole ABBA quartets where the maximum allows
            want = min(want, s.repeat_max)
            continue
        break
    record.input_sets = done
    why = windows_under_load(record.load, usable_cores())
    if why:  # recorded, never failed: the case's numbers are as trustworthy as the machine was quiet
        record.flags.append("timed_under_load")
        record.notes.append(f"timed under load: {why}")
    if ctx.telemetry is not None and ctx.telemetry.backend is None:
        record.notes.append(f"GPU telemetry unavailable: {ctx.telemetry.reason}")
    if cuda:
        record.cuda_graph = {"mode": s.cuda_graph, "used": got.cand_timer == GRAPH_TIMER}
    extra = _summarise(source, ref, ctx, record, got)
    cand_iv = median_interval(got.cand, seed)
    record.cand_interval = cand_iv.to_dict()
    record.speedup = speedup.to_dict() if speedup is not None else None
    record.repeat = {"mode": "auto" if s.repeat_auto else "fixed", "count": done, "stopped": stop,
                     "target": s.timing_target if s.repeat_auto else None,
                     "achieved": (speedup or cand_iv).rel_half_width,
                     "precision_of": "speedup" if speedup is not None else "t_cand",
                     "hap_target": s.hap_target if s.repeat_auto and s.hap_target > 0 else None,
                     "hap_achieved": hap_achieved if s.repeat_auto else None,
                     "budget_s": s.timing_budget_s if s.repeat_auto else None,
                     "spent_s": _work(clock) - worked, "elapsed_s": time.monotonic() - started}
    if record.t_hw_us is not None and record.t_cand_us is not None and record.t_cand_us < record.t_hw_us:
        record.flags.append("implausible_time")  # faster than the hardware limit: the anchors or the timer lie
        return _with_extra(record, extra), source.outcome(
            oc.FAILED, oc.IMPLAUSIBLE_TIME,
            f"timed at {record.t_cand_us:.1f} us, below the hardware limit T_HW = {record.t_hw_us:.1f} us "
            f"({record.t_hw_source}): no honest kernel beats it, so the time cannot be scored")
    return _with_extra(record, extra), None


def _with_extra(record: CaseTiming, extra: dict[str, Any]) -> TimingRecord:
    """The record with the extra baselines' fields (``t_<name>_us``, ``<name>_baseline``: KernelBench's compile
    baseline, vocab.records.TimingRecord)."""
    out = record.to_dict()
    out.update(extra)  # type: ignore[typeddict-item]  # keys named after the source's baselines
    return out


def _summarise(source: CaseSource[Any], ref: Reference, ctx: PerfContext, record: CaseTiming,
               got: _Samples) -> dict[str, Any]:
    """Medians and spreads of every participant, then the anchors (metadata may replace the live baseline);
    returns the fields of the extra baselines."""
    cand = summarize(got.cand)
    record.t_cand_us, record.cand = cand.median_us, cand.to_dict()
    baselines = source.baselines(ref)
    extra: dict[str, Any] = {}
    for b in baselines:
        if b.name in got.problems:
            record.notes.append(got.problems[b.name])
        elif got.base.get(b.name):
            summary = summarize(got.base[b.name])
            if b.name == baselines[0].name:
                record.t_baseline_us, record.baseline, record.baseline_source = (summary.median_us,
                                                                                 summary.to_dict(), "live")
            else:
                extra[f"t_{b.name}_us"], extra[f"{b.name}_baseline"] = summary.median_us, summary.to_dict()
    anchors = source.anchors(ref, ctx.anchors)
    for key, value in anchors.items():
        if key == "t_baseline_us":
            if value is not None:  # metadata replaces the live baseline
                record.t_baseline_us, record.baseline_source = value, anchors.get("baseline_source", "metadata")
        elif key == "flags":
            record.flags += list(value)
        elif key != "baseline_source" and hasattr(record, key):
            setattr(record, key, value)
    main = got.base.get(baselines[0].name) if baselines else None
    if record.t_hw_us is not None and main and str(record.t_hw_source).startswith("roofline"):
        checked = check_t_hw(record.t_hw_us, anchors.get("t_hw_written_us"), min(main) * 1e6)
        if checked.flag:
            record.t_hw_us, record.t_hw_source = checked.t_hw_us, f"{record.t_hw_source}{checked.source_suffix}"
            record.flags.append(checked.flag)
            record.notes.append(str(checked.note))
    return extra

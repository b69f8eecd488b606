"""Time one case that passed its accuracy check: candidate and live baselines, verified, anchored.

Runs in the judge, for every task format (a :class:`~pytest_cannbench.judge.source.CaseSource`). The
candidate's timed batch runs in its candidate worker; each baseline (for a CANN operator the golden in native
precision on the same device, for a KernelBench problem the eager ``Model`` and optionally its
``torch.compile``) runs with the same protocol and the same input sets in a separate baseline worker that
never imported the submission. All batches of a chunk happen under the device's timing lock; every timed
candidate output is then judged against the reference of its input set before the next batch reuses the region.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cannbench import outcome as oc
from pytest_cannbench.judge.goldens import GoldenFailure
from pytest_cannbench.judge.source import Anchors, CaseSource, Reference, case_log_path, fate
from pytest_cannbench.options import Settings
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.timing.devices import DevicePlan, timing_lock
from pytest_cannbench.timing.stats import CaseTiming, implausible, not_measured, summarize

if TYPE_CHECKING:
    from pytest_cannbench.workers.candidate_client import CandidateWorker

BATCH_MEMORY_BYTES = 1 << 30  # input sets and output areas of one timed batch; larger cases are split


@dataclass
class PerfContext:
    settings: Settings
    device: DevicePlan
    baseline_worker: CandidateWorker  # golden mode: never saw the submission
    anchors: Anchors  # (task, case, data) -> t_hw_us, sources, bytes, flops
    log_dir: Path
    npu: dict | None = None  # NPU timer settings: the session's secret cache-clean shape, boost, level


def _tensor_bytes(kwargs: dict[str, Any]) -> int:
    total = 0
    for value in kwargs.values():
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if hasattr(v, "element_size"):
                total += v.numel() * v.element_size()
    return total


def _chunks(count: int, per_call_bytes: int) -> list[list[int]]:
    size = max(1, BATCH_MEMORY_BYTES // max(1, per_call_bytes))
    return [list(range(i, min(i + size, count))) for i in range(0, count, size)]


def measure(source: CaseSource, ref: Reference, worker: CandidateWorker,
            ctx: PerfContext) -> tuple[dict[str, Any], CaseOutcome | None]:
    """The case's timing record, and a failure outcome when timing exposed the candidate."""
    s = ctx.settings
    refs: list[Reference] = []
    for index in range(s.repeat):
        try:
            refs.append(source.prepare(source.timed_seed(index)))
        except GoldenFailure as exc:
            return not_measured(f"the {source.golden_noun} failed on timed input set {index + 1}: {exc}"), None
    sets = [ref.kwargs()] + [r.kwargs() for r in refs]
    expected = ref.out_bytes()
    per_call = _tensor_bytes(sets[0]) + expected
    target, baselines = source.candidate_target(ref), source.baselines(ref)
    log = case_log_path(ctx.log_dir, source.key)
    record = CaseTiming(measured=True, device=ctx.device.label, input_sets=len(refs))
    cand_s: list[float] = []
    base_s: dict[str, list[float]] = {b.name: [] for b in baselines}
    problems: dict[str, str] = {}  # baseline name -> why it stopped
    for n, chunk in enumerate(_chunks(len(refs), per_call)):
        batch_sets = [sets[0]] + [sets[1 + i] for i in chunk]
        calls = list(range(1, len(chunk) + 1))
        warmup = s.warmup if n == 0 else 1
        with timing_lock(ctx.device):
            window = [time.monotonic()]
            batch = worker.time_batch(target, batch_sets, calls, warmup=warmup, expected_out_bytes=expected,
                                      timeout=s.case_timeout_s, npu=ctx.npu, case_log=log)
            bases = {b.name: None if b.name in problems else ctx.baseline_worker.time_batch(
                b.target, batch_sets, calls, warmup=warmup, expected_out_bytes=expected, timeout=s.case_timeout_s,
                npu=ctx.npu) for b in baselines}
            window.append(time.monotonic())
        record.windows.append(window)
        if batch.status != "ok":
            status, failure = fate(batch.status)
            message = f"during timing: {batch.message}" + (f"\n--- end of its output:\n{batch.log_tail}"
                                                           if batch.log_tail else "")
            return not_measured(f"the candidate failed while timed ({batch.status})"), source.outcome(
                status, failure, message)
        why = implausible(batch.seconds, batch.phases, batch.wall_s, batch.timer, batch.cpu_s, worker.threads,
                          batch.busiest_cpu_s)
        if why:
            return not_measured("implausible timing"), source.outcome(oc.FAILED, oc.TIMING_IMPLAUSIBLE,
                                                                      f"timing implausible: {why}")
        for j, index in enumerate(chunk):
            verdict = source.judge(batch.outputs[j], refs[index])
            if verdict.status != oc.PASSED:
                return not_measured("a timed output was wrong"), source.outcome(
                    oc.FAILED, oc.TIMED_OUTPUT_WRONG,
                    f"timed call {index + 1} (its own input set) is wrong: {verdict.message}")
        cand_s += batch.seconds
        record.flags += [f"guard: {flag}" for flag in batch.flags if f"guard: {flag}" not in record.flags]
        record.timer = batch.timer
        record.notes += batch.notes
        for b in baselines:
            base = bases[b.name]
            if base is None:
                continue
            if base.status != "ok":
                problems[b.name] = f"the {b.label} failed: {(base.message or base.status).splitlines()[0]}"
            else:
                base_s[b.name] += base.seconds
    cand = summarize(cand_s)
    record.t_cand_us, record.cand = cand.median_us, cand.to_dict()
    main = baselines[0].name
    extra: dict[str, Any] = {}
    for b in baselines:
        if b.name in problems:
            record.notes.append(problems[b.name])
        elif base_s[b.name]:
            summary = summarize(base_s[b.name])
            if b.name == main:
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
    if record.t_hw_us is not None and record.t_cand_us < record.t_hw_us:
        record.flags.append("implausible_time")  # faster than the hardware limit: the anchors or the timer lie
    return {**record.to_dict(), **extra}, None

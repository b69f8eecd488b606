"""Time one case that passed its accuracy check: candidate and live baseline, verified, anchored.

Runs in the judge. The candidate's timed batch runs in its candidate worker; the
baseline (the golden in native precision on the same device, eager PyTorch) runs
with the same protocol and the same input sets in a separate baseline worker that
never imported the submission. Both batches happen under the device's timing
lock; every timed candidate output is then judged against the golden of its input
set before the next batch reuses the region.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from pytest_cannbench import outcome as oc
from pytest_cannbench.judge.case import (candidate_target, case_log_path, expected_bytes, fate, judge, new_outcome, prepare,
                      timed_seed)
from pytest_cannbench.timing.devices import DevicePlan, timing_lock
from pytest_cannbench.judge.goldens import GoldenData, GoldenFailure, GoldenService
from pytest_cannbench.options import Settings
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.taskformat.spec import CaseSpec, OperatorTask
from pytest_cannbench.timing.stats import CaseTiming, implausible, not_measured, summarize

BATCH_MEMORY_BYTES = 1 << 30  # input sets and output areas of one timed batch; larger cases are split


@dataclass
class PerfContext:
    settings: Settings
    device: DevicePlan
    service: GoldenService
    worker: Any  # CandidateWorker running the candidate
    baseline_worker: Any  # CandidateWorker in golden mode, never saw the submission
    anchors: Callable[[OperatorTask, CaseSpec, GoldenData], dict[str, Any]]  # t_hw_us, sources, bytes, flops
    log_dir: Path
    npu: Optional[dict] = None  # NPU timer settings: the session's secret cache-clean shape, boost, level


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


def measure(task: OperatorTask, case: CaseSpec, data: GoldenData,
            ctx: PerfContext) -> tuple[dict[str, Any], Optional[CaseOutcome]]:
    """The case's timing record, and a failure outcome when timing exposed the candidate."""
    s = ctx.settings
    datas: list[GoldenData] = []
    for index in range(s.repeat):
        try:
            datas.append(prepare(task, case, ctx.service, s, seed=timed_seed(task, case, s, index)))
        except GoldenFailure as exc:
            return not_measured(f"the golden failed on timed input set {index + 1}: {exc}"), None
    sets = [data.kwargs()] + [d.kwargs() for d in datas]
    expected = expected_bytes(data)
    per_call = _tensor_bytes(sets[0]) + expected
    target, golden = candidate_target(task, s), _golden_target(task)
    log = case_log_path(ctx.log_dir, task.result_key(case))
    record = CaseTiming(measured=True, device=ctx.device.label, input_sets=len(datas))
    cand_s: list[float] = []
    base_s: list[float] = []
    base_problem = ""
    for n, chunk in enumerate(_chunks(len(datas), per_call)):
        batch_sets = [sets[0]] + [sets[1 + i] for i in chunk]
        calls = list(range(1, len(chunk) + 1))
        warmup = s.warmup if n == 0 else 1
        with timing_lock(ctx.device):
            window = [time.monotonic()]
            batch = ctx.worker.time_batch(target, batch_sets, calls, warmup=warmup, expected_out_bytes=expected,
                                          timeout=s.case_timeout_s, npu=ctx.npu, case_log=log)
            base = None if base_problem else ctx.baseline_worker.time_batch(
                golden, batch_sets, calls, warmup=warmup, expected_out_bytes=expected, timeout=s.case_timeout_s,
                npu=ctx.npu)
            window.append(time.monotonic())
        record.windows.append(window)
        if batch.status != "ok":
            status, failure = fate(batch.status)
            message = f"during timing: {batch.message}" + (f"\n--- end of its output:\n{batch.log_tail}"
                                                           if batch.log_tail else "")
            return not_measured(f"the candidate failed while timed ({batch.status})"), new_outcome(
                task, case, status, failure, message)
        why = implausible(batch.seconds, batch.phases, batch.wall_s, batch.timer, batch.cpu_s, ctx.worker.threads,
                         batch.busiest_cpu_s)
        if why:
            return not_measured("implausible timing"), new_outcome(task, case, oc.FAILED, oc.TIMING_IMPLAUSIBLE,
                                                                   f"timing implausible: {why}")
        for j, index in enumerate(chunk):
            verdict = judge(task, case, datas[index], batch.outputs[j], ctx.service, s)
            if verdict.status != oc.PASSED:
                return not_measured("a timed output was wrong"), new_outcome(
                    task, case, oc.FAILED, oc.TIMED_OUTPUT_WRONG,
                    f"timed call {index + 1} (its own input set) is wrong: {verdict.message}")
        cand_s += batch.seconds
        record.flags += [f"guard: {flag}" for flag in batch.flags if f"guard: {flag}" not in record.flags]
        record.timer = batch.timer
        record.notes += batch.notes
        if base is not None:
            if base.status != "ok":
                base_problem = f"the baseline (golden in native precision) failed: {base.message.splitlines()[0]}"
            else:
                base_s += base.seconds
    cand = summarize(cand_s)
    record.t_cand_us, record.cand = cand.median_us, cand.to_dict()
    if base_s and not base_problem:
        baseline = summarize(base_s)
        record.t_baseline_us, record.baseline, record.baseline_source = baseline.median_us, baseline.to_dict(), "live"
    elif base_problem:
        record.notes.append(base_problem)
    anchors = ctx.anchors(task, case, data)
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
    return record.to_dict(), None


def _golden_target(task: OperatorTask) -> dict[str, Any]:
    return {"kind": "golden", "op_dir": str(task.op_dir), "rel_path": task.rel_path,
            "function_name": task.spec.function_name, "name_lower": task.spec.name.lower()}

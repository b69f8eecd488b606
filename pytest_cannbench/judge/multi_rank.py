"""A multi-rank (MC2) case in the judge: each rank's reference, each rank's call, a verdict per rank folded into
the case's, and the case's timing (each timed call as slow as its slowest rank).

The contract is the official runner's (``workers/ranks_main.py`` says what each rank does); what differs, on
purpose: the truth is the distributed golden run on float64 copies of the inputs where it runs there (the native
run is the same-precision reference the precision standard allows for), every rank is judged by the standard
(not only the first output), a graded run's inputs are drawn from a seed the submission cannot know
(:func:`payload`), and a rank that hangs or dies fails the case with its own status instead of the whole run.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_cannbench import outcome as oc
from pytest_cannbench.judge.case import compare_flags, new_outcome, output_names, seed_of
from pytest_cannbench.judge.goldens import GoldenFailure, golden_ref
from pytest_cannbench.judge.source import SkipCase, case_log_path, fate, is_structural
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.submission.interfaces import call_candidates
from pytest_cannbench.timing.stats import CaseTiming, implausible, summarize
from pytest_cannbench.vocab.records import TimingRecord
from pytest_cannbench.workers.batch import WorkerStatus
from pytest_cannbench.workers.candidate_client import CandidateResult
from pytest_cannbench.workers.ranks import GoldenRankFailure, RankAnswer

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_cannbench.options import Settings
    from pytest_cannbench.taskformat.spec import CaseSpec, OperatorTask
    from pytest_cannbench.workers.ranks import GoldenRanks, RankAnswer, RankGroup

NEEDS_NPU_MESSAGE = "the golden needs torch_npu (an Ascend NPU operator), which this host does not have"
# the order in which one rank's end decides the case's status (the first present wins); a rank the judge stopped
# because another failed first never decides
SEVERITY = (oc.CANDIDATE_CRASH, oc.OUT_OF_MEMORY, oc.CANDIDATE_TIMEOUT, oc.IMPORT_FAILED, *oc.GUARD_FAILURES,
            oc.INPUT_MUTATED, oc.ASYNC_ESCAPE, oc.TIMING_IMPLAUSIBLE, oc.STRUCTURAL, oc.TIMED_OUTPUT_WRONG,
            oc.PRECISION)  # failure types


def payload(task: OperatorTask, case: CaseSpec, settings: Settings, seed: int | None = None) -> dict[str, Any]:
    """The case as the official runner hands it to each rank (``case_payload``). Its inputs are seeded by the
    case's own ``seed`` attr; a graded run that mixes in a session secret or ``--cann-seed`` (and every timed input
    set, ``seed``) replaces that attr with a seed derived from the case key, so they cannot be known in advance."""
    raw = case.raw
    shapes = raw.get("input_shape") or []
    if shapes and not isinstance(shapes[0], (list, type(None))):
        shapes = [shapes]
    dtypes = raw.get("dtype") or []
    dtypes = [dtypes] if isinstance(dtypes, str) else list(dtypes)
    if len(dtypes) == 1 and len(shapes) > 1:
        dtypes = dtypes * len(shapes)
    attrs = dict(case.attrs)
    if seed is None and (settings.secret or settings.seed):
        seed = seed_of(task, case, settings)
    if seed is not None:
        attrs["seed"] = int(seed) % (2 ** 31 - 1) + 1
    assert case.case_id is not None
    return {"case_id": task.case_key(case.case_id), "rel_path": task.rel_path, "operator": task.spec.name,
            "case_num": case.case_id, "input_shapes": shapes, "dtypes": dtypes,
            "value_ranges": raw.get("value_range") or [], "attrs": attrs, "tasks_root": str(task.bench_root),
            "reports_dir": "", "profiler_level": "Level1"}


@dataclass
class RankReference:
    inputs: dict[str, Any]  # name -> tensor, list, value or None, as the rank made them
    golden: list[Any]
    native: list[Any]

    def kwargs(self) -> dict[str, Any]:
        return {k: v for k, v in self.inputs.items() if v is not None}

    def out_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.native if hasattr(t, "element_size"))


@dataclass
class MultiRankReference:
    """Every rank's reference for one input set (``Reference`` for the item life cycle)."""

    ranks: list[RankReference]
    notes: list[str] = field(default_factory=list)
    cached: bool = False
    seconds: dict[str, float] = field(default_factory=dict)

    def kwargs(self) -> dict[str, Any]:
        return self.ranks[0].kwargs()

    def out_bytes(self) -> int:
        return sum(r.out_bytes() for r in self.ranks)


def prepare(task: OperatorTask, case: CaseSpec, settings: Settings, goldens: GoldenRanks,
            seed: int | None = None) -> MultiRankReference:
    """Each rank's inputs and reference from the golden ranks; GoldenFailure, or SkipCase (needs an NPU)."""
    import time

    request = {**golden_ref(task), "payload": payload(task, case, settings, seed),
               "precision": settings.golden_precision}
    t0 = time.perf_counter()
    try:
        replies = goldens.prepare(request, settings.golden_timeout_s)
    except GoldenRankFailure as exc:
        if exc.needs:
            raise SkipCase(oc.FailureType.NEEDS_NPU, f"{NEEDS_NPU_MESSAGE}: {exc}") from None
        raise GoldenFailure(f"{task.op_dir / 'golden.py'}: case_id {case.case_id}: distributed golden, {exc}",
                            oom=exc.oom) from None
    notes = sorted({str(n) for r in replies for n in r.get("notes") or []})
    ranks = [RankReference(inputs=dict(r["inputs"]), golden=list(r["golden"]), native=list(r["native"]))
             for r in replies]
    return MultiRankReference(ranks=ranks, notes=notes, seconds={"golden": time.perf_counter() - t0})


def target(task: OperatorTask, case: CaseSpec, settings: Settings, ref_payload: dict[str, Any], rank: int,
           world_size: int, golden: bool = False) -> dict[str, Any]:
    """What rank ``rank``'s worker calls (``workers/ranks_main.mc2_callable``): the submission through the task's
    call, or (``golden``, and in a self-check) the distributed golden."""
    source = (task.op_dir / "golden.py").read_text(encoding="utf-8")
    return {"kind": "mc2", "self_check": settings.self_check or golden, "rank": rank, "world_size": world_size,
            "operator": {"name": task.spec.name, "function_name": task.spec.function_name, "rel_path": task.rel_path,
                         "names": call_candidates(task.spec.name, task.spec.function_name)},
            "rel_path": task.rel_path, "golden_source": source, "golden_sha256": task.golden_sha256,
            "payload": ref_payload}


def judge_rank(task: OperatorTask, rank: int, outputs: list[Any], ref: RankReference, checker: str,
               stats: bool = True) -> tuple[list[dict[str, Any]], list[str], bool]:
    """One rank's outputs under the precision standard: (verdicts, failure messages, structural)."""
    from pytest_cannbench.judge.precision import compare_outputs  # brings torch

    count = len(ref.golden)
    names = [f"rank{rank}:{n}" for n in output_names(task, count)]
    expected = [n.dtype if n is not None else None for n in ref.native]
    verdicts = compare_outputs(outputs, ref.golden, ref.native, names=names, expected_dtypes=expected,
                               overrides=task.spec.precision_thresholds, compare_flags=compare_flags(task, count),
                               checker=checker, stats=stats)
    failed = [v for v in verdicts if not v.passed]
    return ([v.to_dict() for v in verdicts], [v.message for v in failed],
            any(is_structural(v.failure_type) for v in failed))


def fold(task: OperatorTask, case: CaseSpec, ends: Sequence[tuple[int, oc.Status, str, str]], world_size: int,
         accuracy: list[dict[str, Any]] | None = None) -> CaseOutcome:
    """The case's outcome from each rank's ``(rank, status, failure_type, message)``: passed when every rank
    passed; else the most serious rank's status (:data:`SEVERITY`), every failing rank named in the message."""
    accuracy = accuracy or []
    failing = [e for e in ends if e[1] != oc.PASSED and e[2] != STOPPED_TYPE]
    if not failing:
        if any(e[2] == STOPPED_TYPE for e in ends):  # only stopped ranks: cannot happen unless the judge broke
            failing = [e for e in ends if e[1] != oc.PASSED]
        else:
            result = new_outcome(task, case, oc.PASSED)
            result.accuracy = accuracy
            return result
    order: dict[str, int] = {kind: i for i, kind in enumerate(SEVERITY)}
    worst = min(failing, key=lambda e: (order.get(e[2], len(order)), e[0]))
    stopped = [e[0] for e in ends if e[2] == STOPPED_TYPE]
    message = "; ".join(f"rank {r} of {world_size}: {text}" for r, _, _, text in
                        sorted(failing, key=lambda e: (order.get(e[2], len(order)), e[0])))
    if stopped:
        message += (f"; rank(s) {', '.join(map(str, stopped))} stopped by the judge "
                    f"(they waited in a collective for rank {worst[0]})")
    # only stopped ranks (the judge broke) is the harness's error
    failure = oc.HARNESS_ERROR if worst[2] == STOPPED_TYPE else oc.FailureType(worst[2])
    result = new_outcome(task, case, worst[1], failure, message)
    result.accuracy = accuracy
    return result


STOPPED_TYPE = "stopped_by_judge"


def rank_end(answer: RankAnswer, task: OperatorTask, ref: RankReference, checker: str,
             accuracy: list[dict[str, Any]]) -> tuple[int, oc.Status, str, str]:
    """One rank's ``(rank, status, failure_type, message)`` for :func:`fold`."""
    result = answer.result
    if answer.stopped:
        return answer.rank, oc.FAILED, STOPPED_TYPE, "stopped"
    if result.status != "ok":
        status, failure_type = fate(result.status)
        text = result.message + (f"\n--- end of its output:\n{result.log_tail}" if result.log_tail else "")
        return answer.rank, status, failure_type, text
    verdicts, failures, structural = judge_rank(task, answer.rank, result.outputs or [], ref, checker)
    accuracy.extend(verdicts)
    if failures:
        return answer.rank, oc.FAILED, oc.STRUCTURAL if structural else oc.PRECISION, "; ".join(failures)
    return answer.rank, oc.PASSED, "", ""


def correctness(task: OperatorTask, case: CaseSpec, settings: Settings, ref: MultiRankReference,
                group: RankGroup, ref_payload: dict[str, Any], log_dir: Path) -> CaseOutcome:
    """Every rank called once on its inputs, each judged, the verdicts folded."""
    world_size = len(ref.ranks)
    key = task.result_key(case)

    def call(rank: int) -> Any:
        worker = group.workers[rank]
        r = ref.ranks[rank]
        return worker.call(target(task, case, settings, ref_payload, rank, world_size), r.kwargs(),
                           expected_out_bytes=r.out_bytes(), timeout=settings.case_timeout_s,
                           case_log=case_log_path(log_dir, f"{key}.rank{rank}"))

    answers = group.each(lambda w: call(group.workers.index(w)))
    accuracy: list[dict[str, Any]] = []
    ends = [rank_end(a, task, ref.ranks[a.rank], settings.checker, accuracy) for a in answers]
    result = fold(task, case, ends, world_size, accuracy)
    result.warnings += ref.notes + ([group.note] if group.note else [])
    return result


# ---------------------------------------------------------------- timing


MAX_TIMED_SETS = 10  # each set is a distributed golden run of every rank: the auto mode's minimum, at most this


def timed_sets(settings: Settings) -> int:
    return max(3, min(settings.repeat, MAX_TIMED_SETS))


def measure(task: OperatorTask, case: CaseSpec, settings: Settings, ref: MultiRankReference,
            group: RankGroup, baseline: RankGroup | None, goldens: GoldenRanks, log_dir: Path,
            judge_flush: Callable[[], None] | None = None) -> tuple[TimingRecord, CaseOutcome | None]:
    """Timed calls in lockstep: for each input set every rank's worker is let go at once (each waits, frozen, for
    the judge's go: the streamed batch of a single-rank case), each rank times its own call, and the call's time is
    its slowest rank's. Every timed output of every rank is judged against its set's reference. The baseline is the
    distributed golden in golden-mode rank workers, timed the same way. On the CPU the judge evicts the shared cache
    once every rank's set is written (``judge_flush``), each worker its own caches, as for a single-rank case.
    Returns the timing record and a failure."""
    world_size = len(ref.ranks)
    count = timed_sets(settings)
    sets = [ref]
    for i in range(count):
        seed = seed_of(task, case, settings) + 7919 * (i + 1)
        sets.append(prepare(task, case, settings, goldens, seed))
    record = CaseTiming(measured=True, device="cpu", timer="host_clock", input_sets=count,
                        baseline_source="golden (the distributed golden in native precision, in rank workers)",
                        notes=[f"multi-rank: world_size {world_size}; each timed call is as slow as its slowest "
                               "rank; no T_HW for a multi-rank case (HAP not computed)"])
    cand, failure = _batch(task, case, settings, sets, group, log_dir, "cand", True, judge_flush)
    if failure is not None:
        return record.to_dict(), failure
    record.t_cand_us = statistics.median(cand) * 1e6
    record.cand = summarize(cand).to_dict()
    if baseline is not None:
        base, problem = _batch(task, case, settings, sets, baseline, log_dir, "baseline", False, judge_flush)
        if problem is None:
            record.t_baseline_us = statistics.median(base) * 1e6
            record.baseline = summarize(base).to_dict()
        else:
            record.notes.append(f"the baseline failed: {problem.message[:300]}")
    return record.to_dict(), None


def _batch(task: OperatorTask, case: CaseSpec, settings: Settings, sets: list[MultiRankReference],
           group: RankGroup, log_dir: Path, label: str, check: bool,
           judge_flush: Callable[[], None] | None) -> tuple[list[float], CaseOutcome | None]:
    """One streamed batch per rank, let go call by call together; per call the slowest rank's seconds."""
    world_size = len(sets[0].ranks)
    key = task.result_key(case)
    payloads = [payload(task, case, settings)] * world_size
    calls = list(range(1, len(sets)))
    def open_one(rank: int) -> Any:
        worker = group.workers[rank]
        kwargs_sets = [s.ranks[rank].kwargs() for s in sets]
        return worker.open_batch(target(task, case, settings, payloads[rank], rank, world_size, golden=not check),
                                 kwargs_sets, calls, warmup=max(1, settings.warmup),
                                 expected_out_bytes=max(s.ranks[rank].out_bytes() for s in sets),
                                 timeout=settings.case_timeout_s * 4, judge_flushes=judge_flush is not None,
                                 case_log=case_log_path(log_dir, f"{key}.{label}.rank{rank}"))

    batches = group.map(open_one)  # every rank warms up at once (its warm-up calls meet in collectives)
    for _ in calls:  # each call: every rank let go at once, all waited for
        if not all(b.waiting for b in batches):
            break
        group.map(lambda r: group.workers[r].stage_call(batches[r]))
        if judge_flush is not None:
            judge_flush()
        group.map(lambda r: group.workers[r].run_call(batches[r]))
    for r in range(world_size):
        if batches[r].waiting:
            group.workers[r].stop_batch(batches[r])
    results = [b.result for b in batches]
    failing = [(r, res) for r, res in enumerate(results) if res is None or res.status != "ok"]
    if failing:
        ends = []
        for r, res in failing:
            answer = RankAnswer(r, CandidateResult(res.status if res else WorkerStatus.CRASHED,
                                                   message=res.message if res else "no result"),
                                stopped=res is not None and res.message == "stopped by the judge")
            ends.append(rank_end(answer, task, sets[0].ranks[r], settings.checker, []))
        result = fold(task, case, ends, world_size)
        result.message = f"timed calls ({label}): {result.message}"
        return [], result
    for r, res in enumerate(results):
        assert res is not None
        why = implausible(res.seconds, res.phases, res.wall_s, res.timer, res.cpu_s, 1, res.busiest_cpu_s,
                          handshakes=len(calls), held_s=res.held_s)
        if why is not None and check:
            return [], new_outcome(task, case, oc.FAILED, oc.TIMING_IMPLAUSIBLE, f"rank {r} of {world_size}: {why}")
        if check:
            for i, outputs in enumerate(res.outputs):
                _, failures, _ = judge_rank(task, r, outputs, sets[i + 1].ranks[r], settings.checker, stats=False)
                if failures:
                    return [], new_outcome(task, case, oc.FAILED, oc.TIMED_OUTPUT_WRONG,
                                           f"timed call {i + 1}, rank {r} of {world_size}: {'; '.join(failures)}")
    per_call = [max(res.seconds[i] for res in results if res is not None) for i in range(len(calls))]
    return per_call, None

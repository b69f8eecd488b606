"""One KernelBench item in the judge: reference data, one candidate call, the verdict, and (timed item) timing.

The reference ``Model`` runs in the golden worker (:func:`kernelbench_problem.prepare`), which also writes
its state dict to a judge-owned file; the candidate (``ModelNew``, or the reference itself under
``--cann-self-check``) runs in a candidate worker that imports nothing else. Inputs cross through the
worker's shared-memory region as positional arguments ``x0, x1, ...``. Every output-contract and anti-cheat
check of the candidate worker applies (input mutation, escaped work, plain tensors, no aliasing).

Accuracy: KernelBench's tolerance by default (``torch.allclose`` with atol = rtol = 1e-4 for float32, 1e-2
for float16/bfloat16; integer outputs exact) against the reference run in the same precision, or the CANN
precision standard against a float64 run of the reference (``--cann-kb-accuracy cann``).

Timing (the timed item, when it passed): the protocol of :mod:`perfrun` (fresh verified input sets, cache
flush, median) for the candidate and, in the baseline worker, the eager reference ``Model`` (and
``torch.compile`` of it with ``--cann-kb-compile``).
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

from pytest_cannbench import outcome as oc
from pytest_cannbench.taskformat.inputs import case_seed
from pytest_cannbench.outcome import CaseOutcome

# KernelBench's per-dtype tolerance (its eval.py, after torchbench): atol = rtol = T.
KB_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2, "float64": 1e-7}
TOO_LARGE = "too_large"
STATE_DIR_KEY = pytest.StashKey[Path]()
KB_WORKER_KEY = pytest.StashKey[object]()


@dataclass
class Reference:
    inputs: list
    init_inputs: list
    native: list  # the reference in the problem's own precision
    golden: Optional[list]  # float64 truth rounded to the native dtypes (--cann-kb-accuracy cann)
    state_file: str
    seconds: dict[str, float]

    def kwargs(self) -> dict[str, Any]:
        return {f"x{i}": v for i, v in enumerate(self.inputs)}

    def out_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.native if hasattr(t, "element_size"))


class TooLarge(Exception):
    pass


def init_seed(problem: Any, settings: Any) -> int:
    return case_seed(f"{problem.rel_path}/init", settings.seed)


def trial_seed(problem: Any, case_id: int, settings: Any) -> int:
    return case_seed(problem.key(case_id), settings.seed)


def timed_seed(problem: Any, index: int, settings: Any) -> int:
    return case_seed(f"{problem.rel_path}/timed/{index}", settings.seed)


def state_dir(config: pytest.Config) -> Path:
    """Judge-owned directory of reference state dicts (one file per problem and init seed)."""
    path = config.stash.get(STATE_DIR_KEY, None)
    if path is None:
        import shutil

        path = config.stash[STATE_DIR_KEY] = Path(tempfile.mkdtemp(prefix="cannbench-kb-state-"))
        config.add_cleanup(lambda: shutil.rmtree(path, ignore_errors=True))
    return path


def reference(config: pytest.Config, problem: Any, seed: int) -> Reference:
    """Inputs and reference outputs from the golden worker; raises GoldenFailure or TooLarge."""
    from pytest_cannbench import state as session
    from pytest_cannbench.workers.golden_client import GoldenWorkerFailure
    from pytest_cannbench.judge.goldens import GoldenFailure

    s = session.settings(config)
    service = session.golden_service(config)
    iseed = init_seed(problem, s)
    digest = hashlib.sha256(f"{problem.path}|{iseed}".encode()).hexdigest()[:20]
    folder = state_dir(config)
    message = {"op": "kb_prepare", "path": str(problem.path), "seed": seed, "init_seed": iseed,
               "state_file": str(folder / f"{digest}.pt"), "accuracy": s.kb_accuracy,
               "max_input_bytes": int(s.kb_max_input_gib * (1 << 30)) if s.kb_max_input_gib else 0,
               "reply_file": str(folder / f"reply-{seed}.pt"), "reply_keep": False}
    try:
        reply = service.worker.request(message, s.golden_timeout_s)
    except GoldenWorkerFailure as exc:
        raise GoldenFailure(f"{problem.path}: {exc}") from None
    if not reply.get("ok"):
        hint = " (raise --cann-golden-memory or --cann-kb-max-input-gib)" if reply.get("oom") else ""
        raise GoldenFailure(f"{problem.path}: {reply.get('error')}{hint}")
    if reply.get("too_large"):
        raise TooLarge(reply["too_large"])
    return Reference(inputs=list(reply["inputs"]), init_inputs=list(reply["init_inputs"]), native=reply["native"],
                     golden=reply.get("golden"), state_file=message["state_file"],
                     seconds=dict(reply.get("seconds") or {}))


def candidate_worker(config: pytest.Config) -> Any:
    """The worker that imports ModelNew modules (scrubbed environment), or the reference under self-check."""
    from pytest_cannbench import state as session

    worker = config.stash.get(KB_WORKER_KEY, None)
    if worker is None:
        mode = "golden" if session.settings(config).self_check else "kernelbench"
        worker = session._new_worker(config, "kernelbench", mode, None)
        config.stash[KB_WORKER_KEY] = worker

        def close() -> None:
            import shutil

            worker.close()
            shutil.rmtree(worker.workdir.parent, ignore_errors=True)

        config.add_cleanup(close)
    return worker


def target(ref: Reference, module: str, class_name: str, seed: int) -> dict[str, Any]:
    """What the candidate (or baseline) worker builds: see :func:`kernelbench_problem.build_callable`."""
    return {"kind": "kernelbench", "module": module, "class_name": class_name, "init_inputs": ref.init_inputs,
            "init_seed": seed, "state_file": ref.state_file, "arity": len(ref.inputs), "compile": False}


def verdict(problem: Any, case_id: int, candidate: list, ref: Reference, settings: Any) -> CaseOutcome:
    """The accuracy verdict on one set of candidate outputs."""
    from pytest_cannbench.judge.precision import compare_outputs

    names = ["output"] if len(ref.native) == 1 else [f"output{i}" for i in range(len(ref.native))]
    expected = [getattr(n, "dtype", None) for n in ref.native]
    if settings.kb_accuracy == "cann" and ref.golden is not None:
        verdicts = compare_outputs(candidate, ref.golden, ref.native, names=names, expected_dtypes=expected,
                                   checker="relative_error")
    else:
        verdicts = compare_outputs(candidate, ref.native, ref.native, names=names, expected_dtypes=expected,
                                   overrides=KB_TOLERANCE, checker="allclose")
    result = new_outcome(problem, case_id, oc.PASSED)
    result.accuracy = [v.to_dict() for v in verdicts]
    failed = [v for v in verdicts if not v.passed]
    if failed:
        result.status = oc.FAILED
        result.failure_type = oc.STRUCTURAL if any(v.failure_type == "structural" for v in failed) else oc.PRECISION
        result.message = "; ".join(v.message for v in failed)
    return result


def new_outcome(problem: Any, case_id: int, status: str, failure_type: Optional[str] = None,
                message: str = "") -> CaseOutcome:
    return CaseOutcome(key=problem.key(case_id), rel_path=problem.rel_path, operator=problem.name, case_id=case_id,
                       status=status, failure_type=failure_type, message=message)


def _record(item: Any, result: CaseOutcome) -> CaseOutcome:
    from pytest_cannbench.nodes.items import OUTCOME_KEY

    item.stash[OUTCOME_KEY] = result
    return result


def run_item(item: Any) -> None:
    """The item's whole life (pytest's runtest): skips, golden errors and failures raise as CANN items do."""
    from pytest_cannbench import state as session
    from pytest_cannbench.judge.case import case_log_path, fate
    from pytest_cannbench.judge.goldens import GoldenFailure
    from pytest_cannbench.nodes.items import CaseFailed, GoldenSideError
    from pytest_cannbench.submission.kernelbench import module_for

    config, problem, case_id = item.config, item.problem, item.case_id
    s, state = session.settings(config), session.submission(config)
    if problem.key(case_id) in session.resume_keys(config):
        pytest.skip("already recorded in results.jsonl by an identical run (--cann-resume)")
    if not s.self_check and state is None:
        _record(item, new_outcome(problem, case_id, oc.SKIPPED, oc.NO_CANDIDATE, "no candidate to grade"))
        pytest.skip("no candidate to grade: pass --cann-source or --cann-self-check")
    if state is not None and not state.ok:
        _record(item, new_outcome(problem, case_id, state.status, state.status, state.message))
        raise CaseFailed(f"{state.status}: {state.message}")
    if s.self_check:
        module, class_name = str(problem.path), "Model"
    else:
        module, class_name = module_for(state, problem.rel_path), "ModelNew"
        if module is None:
            message = f"{problem.rel_path}: no ModelNew module in the submission"
            _record(item, new_outcome(problem, case_id, oc.MISSING, oc.NOT_PROVIDED, message))
            pytest.skip(message)
    try:
        ref = reference(config, problem, trial_seed(problem, case_id, s))
    except TooLarge as exc:
        _record(item, new_outcome(problem, case_id, oc.SKIPPED, TOO_LARGE, str(exc)))
        pytest.skip(str(exc))
    except GoldenFailure as exc:
        _record(item, new_outcome(problem, case_id, oc.ERROR, oc.GOLDEN_ERROR, str(exc)))
        raise GoldenSideError(f"golden_error: {exc}") from None
    cand_target = target(ref, module, class_name, init_seed(problem, s))
    worker = candidate_worker(config)
    log = case_log_path(session.log_dir(config), problem.key(case_id))
    answer = worker.call(cand_target, ref.kwargs(), expected_out_bytes=ref.out_bytes(), timeout=s.case_timeout_s,
                         case_log=log)
    if answer.status != "ok":
        status, failure_type = fate(answer.status)
        message = answer.message + (f"\n--- end of its output:\n{answer.log_tail}" if answer.log_tail else "")
        result = new_outcome(problem, case_id, status, failure_type, message)
    else:
        result = verdict(problem, case_id, answer.outputs, ref, s)
    if result.status == oc.PASSED and item.timed and s.perf:
        from pytest_cannbench.timing.stats import not_measured

        try:
            timing, failure = measure(config, problem, ref, cand_target)
        except GoldenFailure as exc:
            timing, failure = not_measured(f"the reference failed on a timed input set: {exc}"), None
        if failure is not None:
            failure.accuracy = result.accuracy
            result = failure
        result.timing = timing
    else:
        from pytest_cannbench.timing.stats import not_measured

        why = ("--cann-no-perf" if not s.perf else "not the timed item" if not item.timed
               else f"the case {result.status}")
        result.timing = not_measured(why)
    result.seconds = dict(ref.seconds, candidate=answer.seconds or 0.0)
    _record(item, result)
    t = result.timing
    if t.get("t_cand_us") and t.get("t_baseline_us"):
        item.user_properties.append(("cann_kb_speedup", round(t["t_baseline_us"] / t["t_cand_us"], 4)))
    if result.status == oc.ERROR:
        raise GoldenSideError(f"{result.failure_type}: {result.message}")
    if result.status != oc.PASSED:
        raise CaseFailed(f"{result.failure_type}: {result.message}")


def measure(config: pytest.Config, problem: Any, ref: Reference,
            cand_target: dict[str, Any]) -> tuple[dict[str, Any], Optional[CaseOutcome]]:
    """Candidate and eager baseline (and optionally compiled baseline) on the same fresh, verified input sets."""
    from pytest_cannbench import state as session
    from pytest_cannbench.judge.case import case_log_path, fate
    from pytest_cannbench.timing.devices import timing_lock
    from pytest_cannbench.timing.perf import _chunks, _tensor_bytes
    from pytest_cannbench.timing.stats import CaseTiming, implausible, not_measured, summarize

    s, plan = session.settings(config), session.device(config)
    refs = [reference(config, problem, timed_seed(problem, i, s)) for i in range(s.repeat)]
    sets = [ref.kwargs()] + [r.kwargs() for r in refs]
    expected = ref.out_bytes()
    worker, base_worker = candidate_worker(config), session.baseline_worker(config)
    base_target = dict(cand_target, module=str(problem.path), class_name="Model")
    baselines = {"eager": base_target}
    if s.kb_compile:
        baselines["compile"] = dict(base_target, compile=True)
    problem_case = s.kb_trials + 1
    log = case_log_path(session.log_dir(config), problem.key(problem_case))
    record = CaseTiming(measured=True, device=plan.label, input_sets=len(refs))
    cand_s: list[float] = []
    base_s: dict[str, list[float]] = {name: [] for name in baselines}
    problems: dict[str, str] = {}
    for n, chunk in enumerate(_chunks(len(refs), _tensor_bytes(sets[0]) + expected)):
        batch_sets = [sets[0]] + [sets[1 + i] for i in chunk]
        calls = list(range(1, len(chunk) + 1))
        warmup = s.warmup if n == 0 else 1
        with timing_lock(plan):
            window = [time.monotonic()]
            batch = worker.time_batch(cand_target, batch_sets, calls, warmup=warmup, expected_out_bytes=expected,
                                      timeout=s.case_timeout_s, case_log=log)
            bases = {name: None if name in problems else base_worker.time_batch(
                t, batch_sets, calls, warmup=warmup, expected_out_bytes=expected, timeout=s.case_timeout_s)
                for name, t in baselines.items()}
            window.append(time.monotonic())
        record.windows.append(window)
        if batch.status != "ok":
            status, failure = fate(batch.status)
            return not_measured(f"the candidate failed while timed ({batch.status})"), new_outcome(
                problem, problem_case, status, failure, f"during timing: {batch.message}")
        why = implausible(batch.seconds, batch.phases, batch.wall_s, batch.timer, batch.cpu_s, worker.threads,
                         batch.busiest_cpu_s)
        if why:
            return not_measured("implausible timing"), new_outcome(problem, problem_case, oc.FAILED,
                                                                   oc.TIMING_IMPLAUSIBLE, f"timing implausible: {why}")
        for j, index in enumerate(chunk):
            checked = verdict(problem, problem_case, batch.outputs[j], refs[index], s)
            if checked.status != oc.PASSED:
                return not_measured("a timed output was wrong"), new_outcome(
                    problem, problem_case, oc.FAILED, oc.TIMED_OUTPUT_WRONG,
                    f"timed call {index + 1} (its own input set) is wrong: {checked.message}")
        cand_s += batch.seconds
        record.timer = batch.timer
        record.notes += batch.notes
        for name, base in bases.items():
            if base is None:
                continue
            if base.status != "ok":
                problems[name] = f"the {name} baseline failed: {(base.message or base.status).splitlines()[0]}"
            else:
                base_s[name] += base.seconds
    cand = summarize(cand_s)
    record.t_cand_us, record.cand = cand.median_us, cand.to_dict()
    if base_s["eager"] and "eager" not in problems:
        eager = summarize(base_s["eager"])
        record.t_baseline_us, record.baseline, record.baseline_source = eager.median_us, eager.to_dict(), "live"
    record.notes += list(problems.values())
    out = record.to_dict()
    if base_s.get("compile") and "compile" not in problems:
        compiled = summarize(base_s["compile"])
        out["t_compile_us"], out["compile_baseline"] = compiled.median_us, compiled.to_dict()
    return out, None

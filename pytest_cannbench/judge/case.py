"""Grade one case in the judge: golden data in, candidate outputs in, verdict out.

Split in two like a pytest item: :func:`prepare` (setup; a failure here is the
harness's, reported as ``golden_error``) and :func:`judge` (call; the
candidate's verdict from the precision standard and the index checks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pytest_cannbench import outcome as oc
from pytest_cannbench.judge.goldens import GoldenData, GoldenFailure, GoldenService
from pytest_cannbench.taskformat.inputs import case_seed
from pytest_cannbench.options import Settings
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.taskformat.spec import CaseSpec, OperatorTask


def new_outcome(task: OperatorTask, case: CaseSpec, status: str, failure_type: Optional[str] = None,
                message: str = "") -> CaseOutcome:
    return CaseOutcome(key=task.result_key(case), rel_path=task.rel_path, operator=task.spec.name, case_id=case.case_id,
                       status=status, failure_type=failure_type, message=message, warnings=list(case.warnings))


def seed_of(task: OperatorTask, case: CaseSpec, settings: Settings) -> int:
    """The case's input seed: SHA-256 of the official case key mixed with ``--cann-seed``."""
    assert case.case_id is not None
    return case_seed(_secret(settings) + task.case_key(case.case_id), settings.seed)


def timed_seed(task: OperatorTask, case: CaseSpec, settings: Settings, index: int) -> int:
    """The seed of timed input set ``index``: derived from the case key, never equal to the case's own."""
    assert case.case_id is not None
    return case_seed(f"{_secret(settings)}{task.case_key(case.case_id)}/timed/{index}", settings.seed)


def check_seed(task: OperatorTask, case: CaseSpec, settings: Settings) -> int:
    """The seed of the second correctness pass: new inputs no earlier call has seen."""
    return case_seed(f"{_secret(settings)}{task.case_key(case.case_id)}/check", settings.seed)


def _secret(settings: Settings) -> str:
    return f"{settings.secret}/" if settings.secret else ''


def prepare(task: OperatorTask, case: CaseSpec, service: GoldenService, settings: Settings,
            seed: Optional[int] = None) -> GoldenData:
    """Golden data for the case (or one of its timed input sets, ``seed``); raises :class:`GoldenFailure`
    naming the case on any golden-side problem."""
    seed = seed_of(task, case, settings) if seed is None else seed
    try:
        return service.fetch(task, case, seed)
    except GoldenFailure as exc:
        golden = str(task.op_dir / "golden.py")
        text = str(exc)
        text = text[len(golden) + 2:] if text.startswith(golden + ": ") else text  # say the path once
        raise GoldenFailure(f"{golden}: case_id {case.case_id}: {text}") from None


def provider(task: OperatorTask, state: Any) -> Optional[str]:
    """The submission interface implementing the task's operator (None: missing)."""
    from pytest_cannbench.submission.interfaces import Interface, provider as find

    return find([Interface(name, source) for name, source in state.interfaces], task.spec.name,
                task.spec.function_name)


def candidate_target(task: OperatorTask, settings: Settings) -> dict[str, Any]:
    """What the candidate worker calls: the submission's operator, or the golden itself under self-check."""
    if settings.self_check:
        return {"kind": "golden", "op_dir": str(task.op_dir), "rel_path": task.rel_path,
                "function_name": task.spec.function_name, "name_lower": task.spec.name.lower()}
    return {"kind": "submission", "name": task.spec.name, "function_name": task.spec.function_name,
            "rel_path": task.rel_path}


@dataclass
class CandidateAnswer:
    outputs: Optional[list]  # views of the worker's shared memory, valid until its next call
    failure: Optional[CaseOutcome]  # set when there is nothing to judge (raised, crashed, timed out...)
    seconds: Optional[float]
    flags: list[str] = field(default_factory=list)  # guard findings in warn mode


CANDIDATE_FATES = {  # candidate_client status -> (case status, failure type)
    "raised": (oc.FAILED, oc.STRUCTURAL),
    "crashed": (oc.CRASHED, oc.CANDIDATE_CRASH),
    "timeout": (oc.TIMEOUT, oc.CANDIDATE_TIMEOUT),
    "oom_killed": (oc.OOM_KILLED, oc.OUT_OF_MEMORY),
    "import_failed": (oc.IMPORT_FAILED, oc.IMPORT_FAILED),
    "input_mutated": (oc.FAILED, oc.INPUT_MUTATED),
    "async_escape": (oc.FAILED, oc.ASYNC_ESCAPE),
    **{kind: (oc.FAILED, kind) for kind in oc.GUARD_FAILURES},
}


def fate(worker_status: str) -> tuple[str, str]:
    """The case status and failure type of a candidate-worker result that is not an answer."""
    return CANDIDATE_FATES.get(worker_status, (oc.CRASHED, oc.CANDIDATE_CRASH))


def expected_bytes(data: GoldenData) -> int:
    ref = data.native if data.native is not None else data.golden
    return sum(t.numel() * t.element_size() for t in ref if hasattr(t, "element_size"))


def case_log_path(log_dir: Path, key: str) -> Path:
    return log_dir / "cases" / f"{key.replace('..', '_')}.log"


def run_candidate(task: OperatorTask, case: CaseSpec, data: GoldenData, worker: Any, settings: Settings,
                  state: Any, log_dir: Path) -> CandidateAnswer:
    """One call of the candidate in its worker; any misbehaviour becomes a failure outcome."""
    key = task.result_key(case)
    result = worker.call(candidate_target(task, settings), data.kwargs(), expected_out_bytes=expected_bytes(data),
                         timeout=settings.case_timeout_s, case_log=case_log_path(log_dir, key))
    if result.status == "ok":
        return CandidateAnswer(outputs=result.outputs, failure=None, seconds=result.seconds, flags=result.flags)
    status, failure_type = fate(result.status)
    message = result.message
    if result.log_tail:
        message += f"\n--- end of its output ({result.case_log or worker.log_path}):\n{result.log_tail}"
    return CandidateAnswer(outputs=None, failure=new_outcome(task, case, status, failure_type, message),
                           seconds=result.seconds)


def second_pass(task: OperatorTask, case: CaseSpec, service: GoldenService, worker: Any, settings: Settings,
                state: Any, log_dir: Path) -> Optional[CaseOutcome]:
    """The candidate once more on inputs no call has seen (their own seed): a verdict that held on one input
    set must hold on another. Returns the failure, or None when it passed too."""
    from pytest_cannbench.judge.goldens import GoldenFailure

    try:
        data = prepare(task, case, service, settings, seed=check_seed(task, case, settings))
    except GoldenFailure as exc:
        return new_outcome(task, case, oc.ERROR, oc.GOLDEN_ERROR, f"second correctness pass: {exc}")
    answer = run_candidate(task, case, data, worker, settings, state, log_dir)
    verdict = answer.failure or judge(task, case, data, answer.outputs, service, settings)
    if verdict.status == oc.PASSED:
        return None
    verdict.message = f"second correctness pass (new inputs): {verdict.message}"
    return verdict


def output_names(task: OperatorTask, count: int) -> list[str]:
    """Names for flattened outputs: a single TensorList output ``y`` becomes ``y[0]``, ``y[1]``..."""
    names = task.spec.output_names
    if count == len(names):
        return list(names)
    if len(names) == 1:
        return [f"{names[0]}[{i}]" for i in range(count)]
    return [names[i] if i < len(names) else f"output{i}" for i in range(count)]


def compare_flags(task: OperatorTask, count: int) -> list[bool]:
    flags = [d.compare for d in task.spec.outputs]
    if count == len(flags):
        return flags
    if len(flags) == 1:
        return flags * count
    return [flags[i] if i < len(flags) else True for i in range(count)]


def judge(task: OperatorTask, case: CaseSpec, data: GoldenData, candidate: list, service: GoldenService,
          settings: Settings) -> CaseOutcome:
    """The precision standard on every output, then the index self-consistency checks."""
    from pytest_cannbench.judge.precision import compare_outputs

    golden, native, cand = data.golden, data.native, candidate
    if data.has_get_output:
        from pytest_cannbench.workers.tensor_wire import OutputProblem

        broken = any(isinstance(c, OutputProblem) for c in cand)  # judged structurally as it is
        processed = service.postprocess(task, case, {"golden": golden, "native": native,
                                                     "candidate": None if broken else list(cand)})
        golden, native = processed["golden"], processed["native"]
        cand = cand if broken else processed["candidate"]
    count = len(golden)
    names = output_names(task, count)
    expected = [n.dtype if n is not None else None for n in native] if native is not None else None
    try:
        verdicts = compare_outputs(cand, golden, native, names=names, expected_dtypes=expected,
                                   overrides=task.spec.precision_thresholds,
                                   compare_flags=compare_flags(task, count), checker=settings.checker)
    except (TypeError, ValueError) as exc:  # the golden side returned something unusable
        return new_outcome(task, case, oc.ERROR, oc.GOLDEN_ERROR,
                           f"{task.op_dir / 'golden.py'}: case_id {case.case_id}: unusable reference: {exc}")
    result = new_outcome(task, case, oc.PASSED)
    result.accuracy = [v.to_dict() for v in verdicts]
    failed = [v for v in verdicts if not v.passed]
    if failed:
        structural = any(v.failure_type == "structural" for v in failed)
        result.status = oc.FAILED
        result.failure_type = oc.STRUCTURAL if structural else oc.PRECISION
        result.message = "; ".join(v.message for v in failed)
        return result
    index_problem = _index_checks(task, case, data, candidate)
    if index_problem:
        result.status, result.failure_type, result.message = oc.FAILED, oc.PRECISION, index_problem
    if data.native_error:
        result.warnings.append(f"no same-precision reference ({data.native_error}); region checks were strict")
    return result


def _index_checks(task: OperatorTask, case: CaseSpec, data: GoldenData, candidate: list) -> str:
    """``index_gather`` outputs checked on the raw candidate outputs (before get_output), as the official harness."""
    from pytest_cannbench.judge.precision import check_index_gather

    specs = [(d.name, d.index_gather) for d in task.spec.outputs if d.index_gather]
    if not specs:
        return ""
    inputs: dict[str, Any] = {}
    for position, name in enumerate(task.spec.input_names):
        if position < len(data.inputs) and data.inputs[position] is not None:
            inputs.setdefault(name, data.inputs[position])
    kwargs = data.kwargs()
    inputs.update({k: v for k, v in kwargs.items() if hasattr(v, "shape")})
    outputs = {name: candidate[i] for i, name in enumerate(task.spec.output_names) if i < len(candidate)}
    attrs = {**{k: v for k, v in kwargs.items() if not hasattr(v, "shape")}, **case.attrs}
    problems = []
    for name, spec in specs:
        ok, message = check_index_gather(spec, inputs=inputs, attrs=attrs, outputs=outputs, index_output=name)
        if not ok:
            problems.append(message)
    return "; ".join(problems)

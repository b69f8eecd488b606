"""Grade one case in the judge: golden data in, candidate outputs in, verdict out.

Split in two like a pytest item: :func:`prepare` (setup; a failure here is the
harness's, reported as ``golden_error``) and :func:`judge` (call; the
candidate's verdict from the precision standard and the index checks).
"""

from __future__ import annotations

from typing import Any, Optional

from . import outcome as oc
from .goldens import GoldenData, GoldenFailure, GoldenService
from .inputs import case_seed
from .options import Settings
from .outcome import CaseOutcome
from .taskspec import CaseSpec, OperatorTask


def new_outcome(task: OperatorTask, case: CaseSpec, status: str, failure_type: Optional[str] = None,
                message: str = "") -> CaseOutcome:
    return CaseOutcome(key=task.result_key(case), rel_path=task.rel_path, operator=task.spec.name, case_id=case.case_id,
                       status=status, failure_type=failure_type, message=message, warnings=list(case.warnings))


def seed_of(task: OperatorTask, case: CaseSpec, settings: Settings) -> int:
    """The case's input seed: SHA-256 of the official case key mixed with ``--cann-seed``."""
    assert case.case_id is not None
    return case_seed(task.case_key(case.case_id), settings.seed)


def prepare(task: OperatorTask, case: CaseSpec, service: GoldenService, settings: Settings) -> GoldenData:
    """Golden data for the case; raises :class:`GoldenFailure` naming the case on any golden-side problem."""
    seed = seed_of(task, case, settings)
    try:
        return service.fetch(task, case, seed)
    except GoldenFailure as exc:
        golden = str(task.op_dir / "golden.py")
        text = str(exc)
        text = text[len(golden) + 2:] if text.startswith(golden + ": ") else text  # say the path once
        raise GoldenFailure(f"{golden}: case_id {case.case_id}: {text}") from None


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
    from .precision import compare_outputs

    golden, native, cand = data.golden, data.native, candidate
    if data.has_get_output:
        processed = service.postprocess(task, case, {"golden": golden, "native": native, "candidate": cand})
        golden, native, cand = processed["golden"], processed["native"], processed["candidate"]
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
    from .precision import check_index_gather

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

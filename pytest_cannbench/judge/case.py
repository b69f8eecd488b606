"""Grade one case of a CANN operator in the judge: its :class:`OperatorCase` source and its verdict.

:meth:`OperatorCase.prepare` (setup; a failure here is the harness's, reported as ``golden_error``) fetches
the golden data; :func:`apply_get_output` runs the task's ``get_output`` hook (a golden-worker round trip)
on the outputs; :func:`judge` is the pure verdict: the precision standard and the index checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pytest_cannbench import outcome as oc
from pytest_cannbench.judge.goldens import GoldenData, GoldenFailure, GoldenService, golden_ref
from pytest_cannbench.judge.source import Anchors, Baseline, SkipCase, is_structural
from pytest_cannbench.options import Settings
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.submission.interfaces import Interface, call_candidates
from pytest_cannbench.submission.interfaces import provider as find
from pytest_cannbench.taskformat.inputs import case_seed
from pytest_cannbench.taskformat.spec import CaseSpec, OperatorTask
from pytest_cannbench.workers.tensor_wire import OutputProblem

if TYPE_CHECKING:
    from pytest_cannbench.submission.build import SubmissionState


def new_outcome(task: OperatorTask, case: CaseSpec, status: oc.Status, failure_type: oc.FailureType | None = None,
                message: str = "") -> CaseOutcome:
    return CaseOutcome(key=task.result_key(case), rel_path=task.rel_path, operator=task.spec.name, case_id=case.case_id,
                       status=status, failure_type=failure_type, message=message, warnings=list(case.warnings))


class CaseSettings(Protocol):
    """What seeding and the verdict read of the :class:`Settings` (the task-quality gate passes just these)."""

    @property
    def checker(self) -> str: ...

    @property
    def seed(self) -> int: ...

    @property
    def secret(self) -> str: ...


def seed_of(task: OperatorTask, case: CaseSpec, settings: CaseSettings) -> int:
    """The case's input seed: SHA-256 of the official case key mixed with ``--cann-seed``."""
    assert case.case_id is not None
    return case_seed(_secret(settings) + task.case_key(case.case_id), settings.seed)


def timed_seed(task: OperatorTask, case: CaseSpec, settings: Settings, index: int) -> int:
    """The seed of timed input set ``index``: derived from the case key, never equal to the case's own."""
    assert case.case_id is not None
    return case_seed(f"{_secret(settings)}{task.case_key(case.case_id)}/timed/{index}", settings.seed)


def check_seed(task: OperatorTask, case: CaseSpec, settings: Settings) -> int:
    """The seed of the second correctness pass: new inputs no earlier call has seen."""
    assert case.case_id is not None  # second_pass runs after the first, which seeded with seed_of
    return case_seed(f"{_secret(settings)}{task.case_key(case.case_id)}/check", settings.seed)


def _secret(settings: CaseSettings) -> str:
    return f"{settings.secret}/" if settings.secret else ''


def prepare(task: OperatorTask, case: CaseSpec, service: GoldenService, settings: Settings,
            seed: int | None = None, like: GoldenData | None = None) -> GoldenData:
    """Golden data for the case (or one of its timed input sets, ``seed``); raises :class:`GoldenFailure`
    naming the case on any golden-side problem. ``like``: see :meth:`GoldenService.fetch`."""
    seed = seed_of(task, case, settings) if seed is None else seed
    try:
        return service.fetch(task, case, seed, like)
    except GoldenFailure as exc:
        golden = str(task.op_dir / "golden.py")
        text = str(exc)
        text = text[len(golden) + 2:] if text.startswith(golden + ": ") else text  # say the path once
        if exc.needs:  # an NPU-only golden on a host without torch_npu: not gradable here, not a golden error
            raise SkipCase(oc.FailureType.NEEDS_NPU, f"{golden}: case_id {case.case_id}: the golden needs "
                                                     f"{exc.needs}, which this host does not have: {text}") from None
        raise GoldenFailure(f"{golden}: case_id {case.case_id}: {text}", oom=exc.oom) from None


def provider(task: OperatorTask, submission: SubmissionState) -> str | None:
    """The submission interface implementing the task's operator (None: missing)."""
    return find([Interface(name, source) for name, source in submission.interfaces], task.spec.name,
                task.spec.function_name)


def candidate_target(task: OperatorTask, settings: Settings) -> dict[str, Any]:
    """What the candidate worker calls: the submission's operator, or the golden itself under self-check."""
    if settings.self_check:
        return {"kind": "golden", **golden_ref(task)}
    return {"kind": "submission", "name": task.spec.name, "function_name": task.spec.function_name,
            "names": call_candidates(task.spec.name, task.spec.function_name), "rel_path": task.rel_path}


@dataclass
class OperatorCase:
    """One case of a CANN operator as a :class:`~pytest_cannbench.judge.source.CaseSource`."""

    task: OperatorTask
    case: CaseSpec
    settings: Settings
    service: Callable[[], GoldenService]  # made on first use: a skipped case never starts a golden worker
    candidate: str = ""  # a multi-candidate run's candidate ("" otherwise)
    # (key, make) -> (golden, shared): one golden per case and seed for every candidate (state.shared_reference)
    memo: Callable[[Any, Callable[[], GoldenData]], tuple[GoldenData, bool]] | None = None
    golden_noun = "golden"
    worker_role = "candidate"

    @property
    def key(self) -> str:
        return str(self.task.result_key_of(self.case).of_candidate(self.candidate))

    @property
    def rel_path(self) -> str:
        return self.task.rel_path

    @property
    def name(self) -> str:
        return self.task.spec.name

    @property
    def task_error(self) -> str | None:
        return self.case.error

    def outcome(self, status: oc.Status, failure_type: oc.FailureType | None = None, message: str = "") -> CaseOutcome:
        result = new_outcome(self.task, self.case, status, failure_type, message)
        if self.candidate:
            result.key, result.candidate = self.key, self.candidate
        return result

    def missing(self, submission: SubmissionState) -> str | None:
        if provider(self.task, submission) is None:
            return f"{self.task.spec.name} is not provided by the submission"
        return None

    def prepare(self, seed: int | None = None, like: GoldenData | None = None) -> GoldenData:
        if self.memo is None:
            return prepare(self.task, self.case, self.service(), self.settings, seed, like)
        data, shared = self.memo((self.task.rel_path, self.case.index, seed, like is not None),
                                 lambda: prepare(self.task, self.case, self.service(), self.settings, seed, like))
        return dataclasses.replace(data, cached=True, seconds={}) if shared else data

    def check_seed(self) -> int | None:
        return None if self.settings.self_check else check_seed(self.task, self.case, self.settings)

    def timed_seed(self, index: int) -> int:
        return timed_seed(self.task, self.case, self.settings, index)

    def candidate_target(self, ref: GoldenData) -> dict[str, Any]:
        return candidate_target(self.task, self.settings)

    def baselines(self, ref: GoldenData) -> list[Baseline]:
        golden = {"kind": "golden", **golden_ref(self.task)}
        return [Baseline("golden", "baseline (golden in native precision)", golden)]

    def judge(self, outputs: list[Any], ref: GoldenData, *, stats: bool = True) -> CaseOutcome:
        if ref.native_deferred:
            # Without a native reference the standard is only stricter (no native errors to allow for), so a pass
            # that read none stands; any other verdict is taken again with the reference run now.
            from pytest_cannbench.judge.precision import decided_without_native  # brings torch

            if not stats:
                result = judge(self.task, self.case, ref, outputs, self.settings, stats=False)
                if result.status == oc.PASSED and decided_without_native(result.accuracy):
                    return self._own(result)
            assert ref.complete is not None
            ref = ref.complete()
        processed = apply_get_output(ref, outputs, lambda outs: self.service().postprocess(self.task, self.case, outs))
        return self._own(judge(self.task, self.case, ref, processed, self.settings, stats=stats))

    def _own(self, result: CaseOutcome) -> CaseOutcome:
        if self.candidate:
            result.key, result.candidate = self.key, self.candidate
        return result

    def anchors(self, ref: GoldenData, live: Anchors) -> dict[str, Any]:
        return live(self.task, self.case, ref)


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


@dataclass
class JudgedOutputs:
    """What the verdict compares: after a task's ``get_output`` hook, the candidate's, the golden's and the
    native reference's outputs; ``raw`` is the candidate's before the hook (the index checks read those)."""

    raw: list[Any]
    candidate: list[Any]
    golden: list[Any]
    native: list[Any] | None


def apply_get_output(data: GoldenData, raw: list[Any],
                     postprocess: Callable[[dict[str, Any]], dict[str, Any]]) -> JudgedOutputs:
    """The ``get_output`` step before the verdict; ``postprocess`` applies the trusted golden's hook to the
    ``{"golden", "native", "candidate"}`` output lists (in the golden worker, or in-process for the gate)."""
    if not data.has_get_output:
        return JudgedOutputs(raw=raw, candidate=raw, golden=data.golden, native=data.native)

    broken = any(isinstance(c, OutputProblem) for c in raw)  # judged structurally as it is
    processed = postprocess({"golden": data.golden, "native": data.native, "candidate": None if broken else list(raw)})
    return JudgedOutputs(raw=raw, candidate=raw if broken else processed["candidate"], golden=processed["golden"],
                         native=processed["native"])


def judge(task: OperatorTask, case: CaseSpec, data: GoldenData, outputs: JudgedOutputs | list[Any],
          settings: CaseSettings, *, stats: bool = True) -> CaseOutcome:
    """The precision standard on every output, then the index self-consistency checks. Pure: a task with a
    ``get_output`` hook passes :func:`apply_get_output`'s result; any other task may pass the raw outputs.
    ``stats=False``: the verdict alone (``compare_output``), for outputs whose figures nobody reads."""
    from pytest_cannbench.judge.precision import compare_outputs  # brings torch

    if not isinstance(outputs, JudgedOutputs):
        if data.has_get_output:
            raise ValueError(f"{task.rel_path} has a get_output hook: judge apply_get_output's outputs")
        outputs = JudgedOutputs(raw=outputs, candidate=outputs, golden=data.golden, native=data.native)
    golden, native, cand = outputs.golden, outputs.native, outputs.candidate
    count = len(golden)
    names = output_names(task, count)
    expected = [n.dtype if n is not None else None for n in native] if native is not None else data.expected
    try:
        verdicts = compare_outputs(cand, golden, native, names=names, expected_dtypes=expected,
                                   overrides=task.spec.precision_thresholds,
                                   compare_flags=compare_flags(task, count), checker=settings.checker,
                                   stats=stats)
    except (TypeError, ValueError) as exc:  # the golden side returned something unusable
        return new_outcome(task, case, oc.ERROR, oc.GOLDEN_ERROR,
                           f"{task.op_dir / 'golden.py'}: case_id {case.case_id}: unusable reference: {exc}")
    result = new_outcome(task, case, oc.PASSED)
    result.accuracy = [v.to_dict() for v in verdicts]
    failed = [v for v in verdicts if not v.passed]
    if failed:
        structural = any(is_structural(v.failure_type) for v in failed)
        result.status = oc.FAILED
        result.failure_type = oc.STRUCTURAL if structural else oc.PRECISION
        result.message = "; ".join(v.message for v in failed)
        return result
    index_problem = _index_checks(task, case, data, outputs.raw)
    if index_problem:
        result.status, result.failure_type, result.message = oc.FAILED, oc.PRECISION, index_problem
    if data.native_error:
        result.warnings.append(f"no same-precision reference ({data.native_error}); region checks were strict")
    return result


def _index_checks(task: OperatorTask, case: CaseSpec, data: GoldenData, candidate: list[Any]) -> str:
    """``index_gather`` outputs checked on the raw candidate outputs (before get_output), as the official harness."""
    from pytest_cannbench.judge.index_checks import check_index_gather  # brings torch

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

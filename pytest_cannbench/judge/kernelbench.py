"""One KernelBench problem case in the judge: its :class:`ProblemCase` source (reference data, targets, verdict).

The reference ``Model`` runs in the golden worker (:func:`kernelbench.problem.prepare`), which also writes
its state dict to a judge-owned file; the candidate (``ModelNew``, or the reference itself under
``--cann-self-check``) runs in a candidate worker that imports nothing else. Inputs cross through the
worker's shared-memory region as positional arguments ``x0, x1, ...``. Every output-contract and anti-cheat
check of the candidate worker applies (input mutation, escaped work, plain tensors, no aliasing).

Accuracy: KernelBench's tolerance by default (``torch.allclose`` with atol = rtol = 1e-4 for float32, 1e-2
for float16/bfloat16; integer outputs exact) against the reference run in the same precision, or the CANN
precision standard against a float64 run of the reference (``--cann-kb-accuracy cann``).

Timing (the timed case, when it passed) is :mod:`judge.perf`'s loop, with the eager reference ``Model``
(and ``torch.compile`` of it with ``--cann-kb-compile``) as live baselines.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cannbench import outcome as oc
from pytest_cannbench.judge.goldens import GoldenFailure, GoldenService
from pytest_cannbench.judge.source import Anchors, Baseline, SkipCase, is_structural
from pytest_cannbench.options import Settings
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.submission.kernelbench import build_failure, module_for
from pytest_cannbench.taskformat.inputs import case_seed
from pytest_cannbench.vocab.casekey import CaseKey
from pytest_cannbench.workers.golden_client import GoldenWorkerFailure

if TYPE_CHECKING:
    from pytest_cannbench.kernelbench.spec import Problem
    from pytest_cannbench.submission.build import SubmissionState

# KernelBench's per-dtype tolerance (its eval.py, after torchbench): atol = rtol = T.
KB_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2, "float64": 1e-7}


@dataclass
class ProblemReference:
    inputs: list[Any]
    init_inputs: list[Any]
    native: list[Any]  # the reference in the problem's own precision
    golden: list[Any] | None  # float64 truth rounded to the native dtypes (--cann-kb-accuracy cann)
    state_file: str
    seconds: dict[str, float] = field(default_factory=dict)
    cached: bool = False  # KernelBench references are never cached

    def kwargs(self) -> dict[str, Any]:
        return {f"x{i}": v for i, v in enumerate(self.inputs)}

    def out_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.native if hasattr(t, "element_size"))


def init_seed(problem: Problem, settings: Settings) -> int:
    return case_seed(f"{problem.rel_path}/init", settings.seed)


def trial_seed(problem: Problem, case_id: int, settings: Settings) -> int:
    return case_seed(problem.key(case_id), settings.seed)


def timed_seed(problem: Problem, index: int, settings: Settings) -> int:
    return case_seed(f"{problem.rel_path}/timed/{index}", settings.seed)


def reference(service: GoldenService, folder: Path, problem: Problem, seed: int,
              settings: Settings) -> ProblemReference:
    """Inputs and reference outputs from the golden worker; raises GoldenFailure, or SkipCase when too large."""
    s = settings
    iseed = init_seed(problem, s)
    digest = hashlib.sha256(f"{problem.path}|{iseed}".encode()).hexdigest()[:20]
    message: dict[str, Any] = {"op": "kb_prepare", "path": str(problem.path), "seed": seed, "init_seed": iseed,
               "state_file": str(folder / f"{digest}.pt"), "accuracy": s.kb_accuracy,
               "max_input_bytes": int(s.kb_max_input_gib * (1 << 30)) if s.kb_max_input_gib else 0,
               "reply_file": str(folder / f"reply-{seed}.pt"), "reply_keep": False}
    try:
        reply = service.worker.request(message, s.golden_timeout_s)
    except GoldenWorkerFailure as exc:
        raise GoldenFailure(f"{problem.path}: {exc}") from None
    if not reply.get("ok"):
        hint = (" (raise cann_golden_memory or cann_kb_max_input_gib: -o cann_golden_memory=GIB)" if reply.get("oom")
                else "")
        raise GoldenFailure(f"{problem.path}: {reply.get('error')}{hint}", oom=bool(reply.get("oom")))
    if reply.get("too_large"):
        raise SkipCase(oc.FailureType.TOO_LARGE, reply["too_large"])
    return ProblemReference(inputs=list(reply["inputs"]), init_inputs=list(reply["init_inputs"]),
                            native=reply["native"], golden=reply.get("golden"), state_file=message["state_file"],
                            seconds=dict(reply.get("seconds") or {}))


def target(ref: ProblemReference, module: str, class_name: str, seed: int) -> dict[str, Any]:
    """What the candidate (or baseline) worker builds: see :func:`kernelbench.problem.build_callable`."""
    return {"kind": "kernelbench", "module": module, "class_name": class_name, "init_inputs": ref.init_inputs,
            "init_seed": seed, "state_file": ref.state_file, "arity": len(ref.inputs), "compile": False}


def verdict(result: CaseOutcome, candidate: list[Any], ref: ProblemReference, settings: Settings) -> CaseOutcome:
    """The accuracy verdict on one set of candidate outputs, written on ``result`` (a fresh passed outcome)."""
    from pytest_cannbench.judge.precision import compare_outputs  # brings torch

    names = ["output"] if len(ref.native) == 1 else [f"output{i}" for i in range(len(ref.native))]
    expected = [getattr(n, "dtype", None) for n in ref.native]
    if settings.kb_accuracy == "cann" and ref.golden is not None:
        verdicts = compare_outputs(candidate, ref.golden, ref.native, names=names, expected_dtypes=expected,
                                   checker="relative_error")
    else:
        verdicts = compare_outputs(candidate, ref.native, ref.native, names=names, expected_dtypes=expected,
                                   overrides=KB_TOLERANCE, checker="allclose")
    result.accuracy = [v.to_dict() for v in verdicts]
    failed = [v for v in verdicts if not v.passed]
    if failed:
        result.status = oc.FAILED
        result.failure_type = oc.STRUCTURAL if any(is_structural(v.failure_type) for v in failed) else oc.PRECISION
        result.message = "; ".join(v.message for v in failed)
    return result


@dataclass
class ProblemCase:
    """One trial (``case_id`` 1..T) or the timed case (T+1) of a KernelBench problem, as a CaseSource."""

    problem: Problem
    case_id: int
    settings: Settings
    submission: SubmissionState | None
    service: Callable[[], GoldenService]  # made on first use
    state_dir: Callable[[], Path]  # judge-owned folder of reference state dicts
    candidate: str = ""  # a multi-candidate run's candidate ("" otherwise)
    # (key, make) -> (reference, shared): one golden per case and seed for every candidate (state.shared_reference)
    memo: Callable[[Any, Callable[[], ProblemReference]], tuple[ProblemReference, bool]] | None = None
    golden_noun = "reference"
    worker_role = "kernelbench"
    task_error = None

    @property
    def key(self) -> str:
        return str(CaseKey.case(self.problem.rel_path, self.case_id, self.candidate))

    @property
    def rel_path(self) -> str:
        return self.problem.rel_path

    @property
    def name(self) -> str:
        return self.problem.name

    def outcome(self, status: oc.Status, failure_type: oc.FailureType | None = None, message: str = "") -> CaseOutcome:
        return CaseOutcome(key=self.key, rel_path=self.problem.rel_path, operator=self.problem.name,
                           case_id=self.case_id, status=status, failure_type=failure_type, message=message,
                           candidate=self.candidate)

    def _module(self) -> tuple[str | None, str]:
        """The module and class the candidate worker loads: ModelNew, or the reference under self-check."""
        if self.settings.self_check:
            return str(self.problem.path), "Model"

        # a KernelBench run grades a submission; without one this fails as it always has
        return module_for(self.submission, self.problem.rel_path), "ModelNew"  # type: ignore[arg-type]

    def missing(self, submission: SubmissionState) -> str | None:
        if self._module()[0] is None:
            return f"{self.problem.rel_path}: no ModelNew module in the submission"
        return None

    def build_failure(self, submission: SubmissionState) -> str | None:
        """Why this problem's own ModelNew module did not compile in the build stage (None: it did, or had
        nothing to compile); the other problems of the submission are graded as usual."""
        if self.settings.self_check:
            return None

        return build_failure(submission, self._module()[0])

    def prepare(self, seed: int | None = None, like: ProblemReference | None = None) -> ProblemReference:
        """``like`` is not used: the reference model's output is the whole reference, nothing is deferred."""
        seed = trial_seed(self.problem, self.case_id, self.settings) if seed is None else seed
        if self.memo is None:
            return reference(self.service(), self.state_dir(), self.problem, seed, self.settings)
        ref, shared = self.memo((self.problem.rel_path, seed),
                                lambda: reference(self.service(), self.state_dir(), self.problem, seed, self.settings))
        return dataclasses.replace(ref, cached=True, seconds={}) if shared else ref

    def check_seed(self) -> int | None:
        return None  # the trials are the repeated correctness check

    def timed_seed(self, index: int) -> int:
        return timed_seed(self.problem, index, self.settings)

    def candidate_target(self, ref: ProblemReference) -> dict[str, Any]:
        module, class_name = self._module()
        return target(ref, str(module), class_name, init_seed(self.problem, self.settings))

    def baselines(self, ref: ProblemReference) -> list[Baseline]:
        eager = target(ref, str(self.problem.path), "Model", init_seed(self.problem, self.settings))
        found = [Baseline("eager", "eager baseline", eager)]
        if self.settings.kb_compile:
            found.append(Baseline("compile", "compile baseline", dict(eager, compile=True)))
        return found

    def judge(self, outputs: list[Any], ref: ProblemReference, *, stats: bool = True) -> CaseOutcome:
        """KernelBench's allclose rule: its figures cost one pass, so they are always computed."""
        return verdict(self.outcome(oc.PASSED), outputs, ref, self.settings)

    def anchors(self, ref: ProblemReference, live: Anchors) -> dict[str, Any]:
        return {}  # KernelBench compares with its live baselines only

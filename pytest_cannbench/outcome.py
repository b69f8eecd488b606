"""The verdict of one case: status, failure type, message and accuracy details, as plain data.

It travels from the item that produced it to the controller as a report
attribute (xdist serialises reports as JSON-like builtins), so it holds only
builtins.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# status: the case's fate in one word.
PASSED, FAILED, ERROR, SKIPPED, CRASHED = "passed", "failed", "error", "skipped", "crashed"
TIMEOUT, OOM_KILLED, MISSING = "timeout", "oom_killed", "missing"
INTERRUPTED = "interrupted"  # the session ended before the case had a verdict (Ctrl-C, SIGTERM, -x, a lost worker)
# Issue 22: the case's estimated memory need does not fit this session's memory plan, so it was never run. Also its
# failure type. Not the candidate's fault and not graded: scoring leaves it out of its operator's cases.
TOO_LARGE = "too_large"
# The golden needs torch_npu (an Ascend NPU operator) and this host has none: the case cannot be graded here. Also
# its failure type; like TOO_LARGE not the candidate's and left out of its operator's cases.
NEEDS_NPU = "needs_npu"
# The submission's build status (submission.build): BUILD_OK, or one of BUILD_FAILURES. A build failure is also
# the status and the failure type of every case it leaves ungraded, and scores the whole operator 0.
BUILD_OK = "ok"
COMPILE_FAILED, INSTALL_FAILED, IMPORT_FAILED = "compile_failed", "install_failed", "import_failed"
BUILD_FAILURES = (COMPILE_FAILED, INSTALL_FAILED, IMPORT_FAILED)

# failure_type: why. Candidate failures vs harness failures (reported apart: docs/submissions.md, "Statuses").
PRECISION = "precision_mismatch"
STRUCTURAL = "compile_runtime_error"  # output count/type/shape/dtype/layout: the official name
TASK_ERROR = "task_error"  # malformed proto/cases/golden: the task author's problem
GOLDEN_ERROR = "golden_error"  # the golden raised, timed out or ran out of memory
NO_CANDIDATE = "no_candidate"
WORKER_CRASH = "worker_crashed"  # the pytest-xdist worker itself died: the harness's problem
CANDIDATE_CRASH = "candidate_crashed"  # the submission killed its candidate worker (signal or exit)
CANDIDATE_TIMEOUT = "candidate_timeout"  # --cann-case-timeout
PYTEST_TIMEOUT = "pytest_timeout"  # pytest-timeout interrupted the setup (golden) or the call
SESSION_INTERRUPTED = "session_interrupted"  # status INTERRUPTED: the harness's, never the candidate's
HARNESS_ERROR = "harness_error"  # the plugin itself raised: a bug of ours, reported, not the candidate's
OUT_OF_MEMORY = "out_of_memory"  # the candidate worker went over --cann-worker-memory or was OOM-killed
NOT_PROVIDED = "not_provided"  # the submission has no interface for the operator
TIMED_OUTPUT_WRONG = "timed_output_wrong"  # right when checked, wrong when timed
TIMING_IMPLAUSIBLE = "timing_implausible"  # the worker's times do not fit what the judge observed
IMPLAUSIBLE_TIME = "implausible_time"  # faster than T_HW, the hardware limit: no honest kernel is (issue 16)
INPUT_MUTATED = "input_mutated"  # the call wrote into its inputs
ASYNC_ESCAPE = "async_escape"  # the call returned with threads or processes of its own still running
# The anti-cheat guard's findings (guard/): each kind is also the candidate worker's status and the failure
# type that carry it. The one definition: the worker's guard, the judge's policy and the verdict import these.
FORBIDDEN_ACCESS = "forbidden_access"  # task or report files, processes, network, signals
API_TAMPERED = "api_tampered"  # timing, profiler or worker functions were replaced
GUARD_BLINDED = "guard_blinded"  # the profiler was switched off or its trace lost our markers
BUILTIN_COMPUTE = "builtin_compute"  # builtin ops (aten compute) ran under the candidate's call
HOST_LIBRARY = "host_library"  # numpy/scipy/Inductor/ctypes or a foreign shared object did the work
NO_CUSTOM_KERNEL = "no_custom_kernel"  # --cann-guard kernel (KernelBench): forward ran none of its own kernels
# KernelBench's default rule: the forward's work ran mostly outside the submission's own kernels (a decoy kernel
# beside builtin ops doing the work; guard.coverage)
LOW_KERNEL_COVERAGE = "low_kernel_coverage"
# Most serious first: when a call has several findings, the first of these decides (guard.policy).
GUARD_FAILURES = (FORBIDDEN_ACCESS, API_TAMPERED, GUARD_BLINDED, BUILTIN_COMPUTE, NO_CUSTOM_KERNEL, LOW_KERNEL_COVERAGE,
                  HOST_LIBRARY)
# A worker caught cheating on one case (the guard, or a clock that the judge's own observations contradict) is not
# trusted on its operator's other cases: the operator scores 0 (report.scoring).
TAINTING_FAILURES = (*GUARD_FAILURES, TIMING_IMPLAUSIBLE)

HARNESS_FAILURES = frozenset({TASK_ERROR, GOLDEN_ERROR, WORKER_CRASH, SESSION_INTERRUPTED, HARNESS_ERROR, TOO_LARGE,
                              NEEDS_NPU})
NOT_GRADED = frozenset({TOO_LARGE, NEEDS_NPU})  # statuses scoring leaves out of an operator's cases (report.scoring)

# The hidden split (docs/hidden-cases.md): which split a case belongs to; a generated hidden case that cannot be
# graded (no new shape, invalid, the golden rejects it, the quality gate finds it weak) is dropped: never scored.
SPLIT_PUBLIC, SPLIT_HIDDEN = "public", "hidden"
HIDDEN_DROPPED = "hidden_dropped"
NOT_RANKED = "not_ranked"  # an operator's status when --cann-hidden-gate withholds its combined score
GATE_REASON = "fails held-out cases"


@dataclass
class CaseOutcome:
    key: str  # official case key, e.g. level1/exp_1
    rel_path: str
    operator: str
    case_id: int | None
    status: str
    failure_type: str | None = None
    message: str = ""
    accuracy: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    golden_cached: bool = False
    warnings: list[str] = field(default_factory=list)
    timing: dict[str, Any] = field(default_factory=dict)  # timing.CaseTiming as a dict; empty: not considered
    flags: list[str] = field(default_factory=list)  # the run's weaker modes (e.g. sandbox_off), on every case
    candidate: str = ""  # issue 17: the candidate of a multi-candidate run ("" in a single-candidate run)
    split: str = SPLIT_PUBLIC  # SPLIT_PUBLIC or SPLIT_HIDDEN
    kernel_coverage: dict[str, Any] = field(default_factory=dict)  # KernelBench: guard.coverage.Coverage.to_dict()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseOutcome:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

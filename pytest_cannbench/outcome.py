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
PYTEST_TIMEOUT = "pytest_timeout"  # pytest-timeout interrupted the call
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
# Most serious first: when a call has several findings, the first of these decides (guard.policy).
GUARD_FAILURES = (FORBIDDEN_ACCESS, API_TAMPERED, GUARD_BLINDED, BUILTIN_COMPUTE, HOST_LIBRARY)

HARNESS_FAILURES = frozenset({TASK_ERROR, GOLDEN_ERROR, WORKER_CRASH})


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseOutcome:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

"""The verdict of one case: its status, failure type, message, accuracy and timing, and the vocabulary they use.

:class:`Status` and :class:`FailureType` are the words a case's fate is told in (string enums: they compare equal
to, hash like and serialise as their values); :data:`FAILURES` gives every failure type a one-line description and
a fix hint (:func:`failure_hint`), the stable codes a grading service hands out. The module-level constants
(``PASSED``, ``PRECISION``, ...) are the same members under their old names.

An outcome travels from the item that produced it to the controller as a report attribute (xdist serialises
reports as JSON-like builtins) and into ``results.jsonl``: :meth:`CaseOutcome.to_dict` makes the plain
:class:`CaseRecord` for those wires, and :meth:`CaseOutcome.from_dict` reads one back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from types import MappingProxyType
from typing import Any, NamedTuple

from pytest_cannbench.vocab.records import CaseRecord, TimingRecord
from pytest_cannbench.vocab.registry import Word, plain


class Status(Word):
    """A case's fate in one word (``docs/submissions.md``, "Statuses")."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    OOM_KILLED = "oom_killed"
    MISSING = "missing"
    INTERRUPTED = "interrupted"
    TOO_LARGE = "too_large"
    NEEDS_NPU = "needs_npu"
    COMPILE_FAILED = "compile_failed"
    INSTALL_FAILED = "install_failed"
    IMPORT_FAILED = "import_failed"


class FailureType(Word):
    """Why a case did not pass; each member's description and fix hint are in :data:`FAILURES`."""

    PRECISION_MISMATCH = "precision_mismatch"
    COMPILE_RUNTIME_ERROR = "compile_runtime_error"
    TIMED_OUTPUT_WRONG = "timed_output_wrong"
    INPUT_MUTATED = "input_mutated"
    ASYNC_ESCAPE = "async_escape"
    TIMING_IMPLAUSIBLE = "timing_implausible"
    IMPLAUSIBLE_TIME = "implausible_time"
    FORBIDDEN_ACCESS = "forbidden_access"
    API_TAMPERED = "api_tampered"
    GUARD_BLINDED = "guard_blinded"
    BUILTIN_COMPUTE = "builtin_compute"
    HOST_LIBRARY = "host_library"
    NO_CUSTOM_KERNEL = "no_custom_kernel"
    LOW_KERNEL_COVERAGE = "low_kernel_coverage"
    CANDIDATE_CRASHED = "candidate_crashed"
    CANDIDATE_TIMEOUT = "candidate_timeout"
    PYTEST_TIMEOUT = "pytest_timeout"
    OUT_OF_MEMORY = "out_of_memory"
    NOT_PROVIDED = "not_provided"
    COMPILE_FAILED = "compile_failed"
    INSTALL_FAILED = "install_failed"
    IMPORT_FAILED = "import_failed"
    NO_CANDIDATE = "no_candidate"
    TASK_ERROR = "task_error"
    GOLDEN_ERROR = "golden_error"
    WORKER_CRASHED = "worker_crashed"
    SESSION_INTERRUPTED = "session_interrupted"
    HARNESS_ERROR = "harness_error"
    TOO_LARGE = "too_large"
    NEEDS_NPU = "needs_npu"
    HIDDEN_DROPPED = "hidden_dropped"


class Blame(Word):
    """Whose a failure is: scores charge the candidate's; the harness's are reported apart, to be rerun."""

    CANDIDATE = "candidate"
    HARNESS = "harness"  # ours, the task's or the machine's (a grader reruns these)
    NOT_GRADED = "not_graded"  # never run, neither for nor against the score


class FailureDoc(NamedTuple):
    status: Status  # the status a case with this failure type has (the most usual one)
    blame: Blame
    summary: str  # what happened, in one line
    hint: str  # what to do about it, in one line


_S, _B = Status, Blame
FAILURES: Mapping[FailureType, FailureDoc] = MappingProxyType({
    FailureType.PRECISION_MISMATCH: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "values (or index self-consistency) out of the checker's tolerance",
        "fix the numerics; the message names the output, the metric and the threshold"),
    FailureType.COMPILE_RUNTIME_ERROR: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "the call raised, or returned the wrong count, type, shape, dtype, layout or device",
        "make the call return what the golden returns; the message quotes the exception or the first defect"),
    FailureType.TIMED_OUTPUT_WRONG: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "a timed call's output, on its own fresh inputs, failed the standard",
        "compute every call's answer from its own inputs: no caching across calls (docs/timing.md)"),
    FailureType.INPUT_MUTATED: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "the call wrote into its inputs",
        "return new tensors; never modify an input in place"),
    FailureType.ASYNC_ESCAPE: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "the call returned with threads or child processes of its own still running",
        "finish all work (join threads, synchronise) before returning"),
    FailureType.TIMING_IMPLAUSIBLE: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "the worker's times contradict what the judge observed itself (e.g. a patched "
                                 "clock); the operator scores 0", "do not touch clocks, timers or the worker"),
    FailureType.IMPLAUSIBLE_TIME: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "timed below T_HW, the hardware limit: a lookup, skipped work or a broken timer",
        "compute every call's full answer inside the call (docs/timing.md)"),
    FailureType.FORBIDDEN_ACCESS: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "the call read task or report files, started a process, used the network or "
                                 "signalled a process; the operator scores 0", "a kernel needs none of these: "
                                                                               "remove them"),
    FailureType.API_TAMPERED: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "timing, profiler or worker functions were replaced; the operator scores 0",
        "do not patch the harness, torch's profiler or time functions"),
    FailureType.GUARD_BLINDED: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "the profiler was switched off or its trace lost the guard's markers; the "
                                 "operator scores 0", "leave the profiler alone"),
    FailureType.BUILTIN_COMPUTE: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "a builtin op that computes (aten::exp, aten::mm, ...) ran under the call, or a "
                                 "shared object imports ATen kernels, BLAS or dlsym; the operator scores 0",
        "compute with your own kernels; allocation, views and copies are allowed (docs/security.md)"),
    FailureType.HOST_LIBRARY: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "numpy, scipy, torch.compile, ctypes or a foreign shared object did the work; "
                                 "the operator scores 0", "do not delegate the computation to host libraries"),
    FailureType.NO_CUSTOM_KERNEL: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "KernelBench: forward ran none of the submission's own compiled kernels; the "
                                 "operator scores 0", "do the work in a custom kernel called from forward "
                                                      "(docs/kernelbench.md)"),
    FailureType.LOW_KERNEL_COVERAGE: FailureDoc(
        _S.FAILED, _B.CANDIDATE, "KernelBench: most of forward's work ran outside the submission's own kernels; "
                                 "the operator scores 0", "move the work into your kernels, not beside builtin "
                                                          "ops (docs/kernelbench.md, \"Kernel coverage\")"),
    FailureType.CANDIDATE_CRASHED: FailureDoc(
        _S.CRASHED, _B.CANDIDATE, "the candidate worker died (a signal or an exit) during the call",
        "see the case log (reports/logs/cases/) for the stack; check indexing and memory accesses"),
    FailureType.CANDIDATE_TIMEOUT: FailureDoc(
        _S.TIMEOUT, _B.CANDIDATE, "the call took longer than --cann-case-timeout and its worker was killed",
        "look for a hang or a deadlock; raise --cann-case-timeout only for a genuinely slow case"),
    FailureType.PYTEST_TIMEOUT: FailureDoc(
        _S.TIMEOUT, _B.CANDIDATE, "pytest-timeout interrupted the case's setup (golden) or call",
        "raise pytest-timeout's --timeout, or find what hangs in the case log"),
    FailureType.OUT_OF_MEMORY: FailureDoc(
        _S.OOM_KILLED, _B.CANDIDATE,
        "the candidate worker went over its memory budget (cann_worker_memory) or the kernel killed it",
        "use less memory (no large temporaries, free what you allocate)"),
    FailureType.NOT_PROVIDED: FailureDoc(
        _S.MISSING, _B.CANDIDATE, "the submission has no interface for the operator; the operator scores 0",
        "export the operator under its name (docs/submissions.md, \"Interfaces\")"),
    FailureType.COMPILE_FAILED: FailureDoc(
        _S.COMPILE_FAILED, _B.CANDIDATE, "no wheel and no build.sh, build.sh failed or timed out, or it left no "
                                         "or several wheels; every case fails", "fix the build: the message has "
                                                                                "the build log's path and tail"),
    FailureType.INSTALL_FAILED: FailureDoc(
        _S.INSTALL_FAILED, _B.CANDIDATE, "pip or the .run installer failed; every case fails",
        "read reports/logs/install.log and fix the wheel or installer"),
    FailureType.IMPORT_FAILED: FailureDoc(
        _S.IMPORT_FAILED, _B.CANDIDATE, "the submission failed to import in the worker (e.g. an unresolved "
                                        "symbol); every case fails", "fix the import error the message quotes"),
    FailureType.NO_CANDIDATE: FailureDoc(
        _S.SKIPPED, _B.NOT_GRADED, "nothing to grade: no --cann-source",
        "pass --cann-source DIR (or --cann-source @golden to grade the goldens)"),
    FailureType.TASK_ERROR: FailureDoc(
        _S.ERROR, _B.HARNESS, "the task's proto, cases or golden is malformed: the task author's problem",
        "fix the task files the message names, then rerun"),
    FailureType.GOLDEN_ERROR: FailureDoc(
        _S.ERROR, _B.HARNESS, "the golden raised, timed out or ran out of memory: not the candidate's fault",
        "fix the golden, or raise cann_golden_memory / cann_golden_timeout (ini keys, or -o), then rerun"),
    FailureType.WORKER_CRASHED: FailureDoc(
        _S.CRASHED, _B.HARNESS, "the pytest-xdist worker itself died: the harness's problem",
        "rerun the case; report it if it happens again"),
    FailureType.SESSION_INTERRUPTED: FailureDoc(
        _S.INTERRUPTED, _B.HARNESS, "the session ended before the case had a verdict (Ctrl-C, SIGTERM, -x, a lost "
                                    "worker)", "rerun, or resume with --cann-resume"),
    FailureType.HARNESS_ERROR: FailureDoc(
        _S.ERROR, _B.HARNESS, "the grader itself raised: a bug of ours, not the candidate's",
        "rerun; report it with the message if it happens again"),
    FailureType.TOO_LARGE: FailureDoc(
        _S.TOO_LARGE, _B.NOT_GRADED, "the case's estimated memory need does not fit this session's memory plan, so "
                                     "it never ran", "grade it with fewer xdist workers, --cann-session-memory, or "
                                                     "on a larger machine"),
    FailureType.NEEDS_NPU: FailureDoc(
        _S.NEEDS_NPU, _B.NOT_GRADED, "the golden needs torch_npu and this host has no Ascend NPU",
        "grade the case on an NPU host"),
    FailureType.HIDDEN_DROPPED: FailureDoc(
        _S.SKIPPED, _B.NOT_GRADED, "a generated hidden case that could not be graded (no new shape, invalid, the "
                                   "golden or the quality gate rejects it): never scored", "nothing to do"),
})


def failure_doc(failure_type: FailureType | str) -> FailureDoc:
    """The description of a failure type; ValueError naming the known ones for a string that is none."""
    try:
        return FAILURES[FailureType(failure_type)]
    except ValueError:
        raise ValueError(f"unknown failure type {failure_type!r}; known: "
                         f"{', '.join(ft.value for ft in FailureType)}") from None


def failure_hint(failure_type: FailureType | str) -> str:
    """The one-line fix hint of a failure type (every member has one; tested)."""
    return failure_doc(failure_type).hint


# The old names of the members, kept for the rest of the package.
PASSED, FAILED, ERROR, SKIPPED, CRASHED = Status.PASSED, Status.FAILED, Status.ERROR, Status.SKIPPED, Status.CRASHED
TIMEOUT, OOM_KILLED, MISSING = Status.TIMEOUT, Status.OOM_KILLED, Status.MISSING
INTERRUPTED = Status.INTERRUPTED
TOO_LARGE = Status.TOO_LARGE  # not the candidate's and not graded: scoring leaves it out of its operator's cases
NEEDS_NPU = Status.NEEDS_NPU  # likewise: the golden needs an Ascend NPU this host lacks
# The submission's build status (submission.build): BUILD_OK, or one of BUILD_FAILURES. A build failure is also
# the status and the failure type of every case it leaves ungraded, and scores the whole operator 0.
BUILD_OK = "ok"
COMPILE_FAILED, INSTALL_FAILED, IMPORT_FAILED = Status.COMPILE_FAILED, Status.INSTALL_FAILED, Status.IMPORT_FAILED
BUILD_FAILURES = (COMPILE_FAILED, INSTALL_FAILED, IMPORT_FAILED)

_F = FailureType
PRECISION, STRUCTURAL = _F.PRECISION_MISMATCH, _F.COMPILE_RUNTIME_ERROR  # the second is the official name
TASK_ERROR, GOLDEN_ERROR, NO_CANDIDATE = _F.TASK_ERROR, _F.GOLDEN_ERROR, _F.NO_CANDIDATE
WORKER_CRASH, CANDIDATE_CRASH = _F.WORKER_CRASHED, _F.CANDIDATE_CRASHED
CANDIDATE_TIMEOUT, PYTEST_TIMEOUT = _F.CANDIDATE_TIMEOUT, _F.PYTEST_TIMEOUT
SESSION_INTERRUPTED, HARNESS_ERROR, OUT_OF_MEMORY = _F.SESSION_INTERRUPTED, _F.HARNESS_ERROR, _F.OUT_OF_MEMORY
NOT_PROVIDED, TIMED_OUTPUT_WRONG = _F.NOT_PROVIDED, _F.TIMED_OUTPUT_WRONG
TIMING_IMPLAUSIBLE, IMPLAUSIBLE_TIME = _F.TIMING_IMPLAUSIBLE, _F.IMPLAUSIBLE_TIME
INPUT_MUTATED, ASYNC_ESCAPE = _F.INPUT_MUTATED, _F.ASYNC_ESCAPE
# The anti-cheat guard's findings (guard/): each kind is also the candidate worker's status and the failure
# type that carry it. The one definition: the worker's guard, the judge's policy and the verdict import these.
FORBIDDEN_ACCESS, API_TAMPERED, GUARD_BLINDED = _F.FORBIDDEN_ACCESS, _F.API_TAMPERED, _F.GUARD_BLINDED
BUILTIN_COMPUTE, HOST_LIBRARY = _F.BUILTIN_COMPUTE, _F.HOST_LIBRARY
NO_CUSTOM_KERNEL, LOW_KERNEL_COVERAGE = _F.NO_CUSTOM_KERNEL, _F.LOW_KERNEL_COVERAGE
HIDDEN_DROPPED = _F.HIDDEN_DROPPED
# Most serious first: when a call has several findings, the first of these decides (guard.policy).
GUARD_FAILURES = (FORBIDDEN_ACCESS, API_TAMPERED, GUARD_BLINDED, BUILTIN_COMPUTE, NO_CUSTOM_KERNEL, LOW_KERNEL_COVERAGE,
                  HOST_LIBRARY)
# A worker caught cheating on one case (the guard, or a clock that the judge's own observations contradict) is not
# trusted on its operator's other cases: the operator scores 0 (report.scoring).
TAINTING_FAILURES = (*GUARD_FAILURES, TIMING_IMPLAUSIBLE)

# failure types and statuses that are not the candidate's (reported apart: docs/submissions.md, "Statuses")
HARNESS_FAILURES: frozenset[str] = frozenset(
    {ft for ft, doc in FAILURES.items() if doc.blame is Blame.HARNESS}
    | {TOO_LARGE, NEEDS_NPU})
NOT_GRADED: frozenset[str] = frozenset({TOO_LARGE, NEEDS_NPU})  # statuses scoring leaves out of an operator's cases


class Split(Word):
    """The hidden split (docs/hidden-cases.md): which split a case belongs to."""

    PUBLIC = "public"
    HIDDEN = "hidden"


SPLIT_PUBLIC, SPLIT_HIDDEN = Split.PUBLIC, Split.HIDDEN
NOT_RANKED = "not_ranked"  # an operator's status when --cann-hidden-gate withholds its combined score
GATE_REASON = "fails held-out cases"


def _word(kind: type[Word], value: Any, key: str, name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"case {key}: {name} {value!r} is not one of "
                         f"{', '.join(m.value for m in kind)}") from None


@dataclass
class CaseOutcome:
    key: str  # official case key, e.g. level1/exp_1 (vocab.casekey)
    rel_path: str
    operator: str
    case_id: int | None
    status: Status
    failure_type: FailureType | None = None
    message: str = ""
    accuracy: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    golden_cached: bool = False
    warnings: list[str] = field(default_factory=list)
    timing: TimingRecord = field(default_factory=lambda: TimingRecord())  # empty: timing was not considered
    flags: list[str] = field(default_factory=list)  # the run's weaker modes (e.g. sandbox_off), on every case
    candidate: str = ""  # the candidate of a multi-candidate run ("" in a single-candidate run)
    split: Split = Split.PUBLIC
    kernel_coverage: dict[str, Any] = field(default_factory=dict)  # KernelBench: guard.coverage.Coverage.to_dict()

    def __post_init__(self) -> None:
        """The words are read into members even when given as strings (a record read back from a wire)."""
        self.status = _word(Status, self.status, self.key, "status")
        if self.failure_type is not None:
            self.failure_type = _word(FailureType, self.failure_type, self.key, "failure_type")
        self.split = _word(Split, self.split, self.key, "split")

    def to_dict(self) -> CaseRecord:
        """Plain JSON data: every word, here or deep in the accuracy verdicts, becomes its string value (xdist's
        wire takes builtins only)."""
        record: CaseRecord = plain(asdict(self))  # asdict's keys are CaseRecord's, by construction
        return record

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CaseOutcome:
        """A record read back; ValueError naming the case and the field for a status or failure type this
        version does not know."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

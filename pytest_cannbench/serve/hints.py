"""A stable failure code and a one-line fix hint for every way a case can fail, so an agent reading an answer
knows what to change instead of guessing by submitting again.

The code is the outcome's failure type (``pytest_cannbench.outcome``: the same strings the leaderboard and
``results.jsonl`` carry), else its status; the service adds its own few (:data:`SERVICE_CODES`). When
``outcome`` provides ``failure_hint()`` it is asked first; this table answers for everything else, and a test
checks that every failure type and status ``outcome`` defines has a hint here.
"""

from __future__ import annotations

from pytest_cannbench import outcome as oc

DEADLINE = "deadline_exceeded"  # the request's deadline passed before the case had a verdict
JUDGE_LOST = "judge_lost"  # the judge grading it died twice (retried once on another): the service's fault
NOT_GRADED_YET = "not_graded"  # the request never reached a judge (its deadline passed in the queue, a shutdown)
SERVICE_CODES = (DEADLINE, JUDGE_LOST, NOT_GRADED_YET)

HINTS: dict[str, str] = {
    # candidate failures
    oc.PRECISION: "outputs differ from the golden beyond the CANN precision standard: check the math, the "
    "accumulation dtype (accumulate float16/bfloat16 in float32) and edge values",
    oc.STRUCTURAL: "the call raised or returned the wrong count, shape, dtype or layout of outputs: match "
    "proto.yaml's outputs and return contiguous tensors",
    oc.CANDIDATE_CRASH: "the call killed its process (a signal or an exit): look for out-of-bounds accesses and "
    "never call exit/abort",
    oc.CANDIDATE_TIMEOUT: "the call did not return within the case timeout: look for an endless loop, a deadlock "
    "or a far too slow algorithm",
    oc.OUT_OF_MEMORY: "the call went over the worker's memory limit: allocate only the outputs and bounded workspaces",
    oc.NOT_PROVIDED: "the submission has no interface for this operator: register torch.ops.cann_bench.<name> "
    "or export cann_bench.<name> under the operator's snake_case name",
    oc.TIMED_OUTPUT_WRONG: "right when checked but wrong when timed: the kernel must compute every call, on every "
    "input, with no state kept between calls",
    oc.TIMING_IMPLAUSIBLE: "the worker's times contradict what the judge observed: do not touch timers, "
    "profilers or the clock",
    oc.IMPLAUSIBLE_TIME: "faster than the hardware limit allows: the output must be computed within the call, "
    "not cached or precomputed",
    oc.INPUT_MUTATED: "the call wrote into its inputs: treat inputs as read-only and write only the outputs",
    oc.ASYNC_ESCAPE: "the call returned with its own threads or processes still running: join them before returning",
    oc.FORBIDDEN_ACCESS: "the call touched files, processes, the network or signals it may not: compute from "
    "the inputs only",
    oc.API_TAMPERED: "timing, profiler or worker functions were replaced: leave the harness's functions alone",
    oc.GUARD_BLINDED: "the profiler was switched off or its trace lost: do not touch the profiler",
    oc.BUILTIN_COMPUTE: "builtin torch ops did the work: compute in your own kernel (allocation, views and copies "
    "are allowed)",
    oc.HOST_LIBRARY: "numpy, scipy, Inductor, ctypes or a foreign shared object did the work: compute in your "
    "own kernel",
    oc.NO_CUSTOM_KERNEL: "forward ran none of the submission's own kernels: launch your kernel in forward",
    oc.LOW_KERNEL_COVERAGE: "most of forward's work ran outside the submission's own kernels: move the work into "
    "your kernels",
    oc.COMPILE_FAILED: "build.sh failed: read the build log in the message, fix the compiler error and build "
    "locally with `bash build.sh` before submitting",
    oc.INSTALL_FAILED: "the built wheel did not install: build.sh must leave exactly one dist/cann_bench-*.whl",
    oc.IMPORT_FAILED: "`import cann_bench` failed: ship every module and shared object it loads inside the wheel",
    oc.NO_CANDIDATE: "nothing was there to grade: submit a build.sh or a prebuilt dist/cann_bench-*.whl",
    # harness-side outcomes: not the candidate's doing, and said so
    oc.TASK_ERROR: "the task itself is malformed (the service's problem, not yours): report it",
    oc.GOLDEN_ERROR: "the golden failed on this case (the service's problem, not yours): report it",
    oc.WORKER_CRASH: "a grading process died (the service's problem, not yours): submit again",
    oc.PYTEST_TIMEOUT: "an outer timeout interrupted the case: submit again with a longer deadline",
    oc.SESSION_INTERRUPTED: "grading was interrupted before a verdict (the service's doing): submit again",
    oc.HARNESS_ERROR: "the grader itself failed (the service's problem, not yours): submit again or report it",
    oc.TOO_LARGE: "the case does not fit this server's memory: not graded, not held against you",
    oc.NEEDS_NPU: "the case needs an Ascend NPU this server lacks: not graded, not held against you",
    oc.HIDDEN_DROPPED: "a generated held-out case could not be graded and was dropped: not held against you",
    # statuses (a case without a failure type is read by its status)
    oc.FAILED: "the case failed: see the message",
    oc.ERROR: "the case could not be graded: see the message",
    oc.SKIPPED: "the case was skipped: see the message",
    oc.CRASHED: "the candidate's process died on this case: look for out-of-bounds accesses or an exit",
    oc.TIMEOUT: "no answer in time: look for an endless loop or a far too slow algorithm",
    oc.OOM_KILLED: "the call used more memory than its worker may: allocate only what the outputs need",
    oc.MISSING: "the submission has no interface for this operator",
    oc.INTERRUPTED: "grading was interrupted before a verdict (not your doing): submit again",
    # the service's own
    DEADLINE: "the request's deadline passed before this case had a verdict: raise deadline_s, select fewer "
    "cases, or make the kernel faster",
    JUDGE_LOST: "the judge grading this died twice (the service's problem, not yours): submit again",
    NOT_GRADED_YET: "the request never reached a judge (the queue was long, or the service stopped): submit "
    "again, with a longer deadline_s",
}


def failure_hint(code: str | None) -> str | None:
    """The hint for a failure code (None for no code); an unknown code still gets a line, never a KeyError."""
    if not code:
        return None
    upstream = getattr(oc, "failure_hint", None)
    if callable(upstream):
        try:
            found = upstream(code)
        except (KeyError, ValueError):
            found = None
        if isinstance(found, str) and found:
            return found
    return HINTS.get(code, f"{code}: see the message")

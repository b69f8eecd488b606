"""The words a verdict is told in and the registries the parts agree on: every failure type documented with a fix
hint, the enums spelling what the files always held, and each registry equal to the code that implements it."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest

from pytest_cannbench import outcome as oc
from pytest_cannbench.outcome import FAILURES, Blame, CaseOutcome, FailureType, Status, failure_hint
from pytest_cannbench.vocab import registry
from pytest_cannbench.vocab.records import (
    IntervalRecord,
    TimingRecord,
    TimingSummaryRecord,
    sealed_timing,
    times_of,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_failure_type_has_a_one_line_description_and_fix_hint() -> None:
    assert set(FAILURES) == set(FailureType)
    for ft in FailureType:
        doc = FAILURES[ft]
        assert doc.summary.strip() and doc.hint.strip(), ft
        assert "\n" not in doc.summary + doc.hint, ft
        assert isinstance(doc.status, Status) and isinstance(doc.blame, Blame)
        assert failure_hint(ft) == failure_hint(ft.value) == doc.hint
    with pytest.raises(ValueError, match="unknown failure type 'precision'; known: precision_mismatch"):
        failure_hint("precision")


# what the files and the wire always spelled: the enums must keep every value under its old name
OLD_VALUES = {
    "PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped", "CRASHED": "crashed",
    "TIMEOUT": "timeout", "OOM_KILLED": "oom_killed", "MISSING": "missing", "INTERRUPTED": "interrupted",
    "TOO_LARGE": "too_large", "NEEDS_NPU": "needs_npu", "BUILD_OK": "ok", "COMPILE_FAILED": "compile_failed",
    "INSTALL_FAILED": "install_failed", "IMPORT_FAILED": "import_failed", "PRECISION": "precision_mismatch",
    "STRUCTURAL": "compile_runtime_error", "TASK_ERROR": "task_error", "GOLDEN_ERROR": "golden_error",
    "NO_CANDIDATE": "no_candidate", "WORKER_CRASH": "worker_crashed", "CANDIDATE_CRASH": "candidate_crashed",
    "CANDIDATE_TIMEOUT": "candidate_timeout", "PYTEST_TIMEOUT": "pytest_timeout",
    "SESSION_INTERRUPTED": "session_interrupted", "HARNESS_ERROR": "harness_error", "OUT_OF_MEMORY": "out_of_memory",
    "NOT_PROVIDED": "not_provided", "TIMED_OUTPUT_WRONG": "timed_output_wrong",
    "TIMING_IMPLAUSIBLE": "timing_implausible", "IMPLAUSIBLE_TIME": "implausible_time",
    "INPUT_MUTATED": "input_mutated", "ASYNC_ESCAPE": "async_escape", "FORBIDDEN_ACCESS": "forbidden_access",
    "API_TAMPERED": "api_tampered", "GUARD_BLINDED": "guard_blinded", "BUILTIN_COMPUTE": "builtin_compute",
    "HOST_LIBRARY": "host_library", "NO_CUSTOM_KERNEL": "no_custom_kernel",
    "LOW_KERNEL_COVERAGE": "low_kernel_coverage", "SPLIT_PUBLIC": "public", "SPLIT_HIDDEN": "hidden",
    "HIDDEN_DROPPED": "hidden_dropped", "NOT_RANKED": "not_ranked",
}


@pytest.mark.parametrize("name, value", sorted(OLD_VALUES.items()))
def test_the_old_names_keep_their_values(name: str, value: str) -> None:
    word = getattr(oc, name)
    assert word == value and hash(word) == hash(value)
    assert str(word) == f"{word}" == f"{word:<1}" == value
    assert json.dumps(word) == json.dumps(value)


def test_the_derived_sets_are_as_before() -> None:
    assert oc.HARNESS_FAILURES == {"task_error", "golden_error", "worker_crashed", "session_interrupted",
                                   "harness_error", "too_large", "needs_npu"}
    assert oc.NOT_GRADED == {"too_large", "needs_npu"}
    assert oc.TAINTING_FAILURES == (*oc.GUARD_FAILURES, "timing_implausible")


def test_an_outcome_is_plain_data_on_the_wire_and_typed_in_memory() -> None:
    import execnet.gateway_base

    result = CaseOutcome(key="level1/exp_1", rel_path="level1/exp", operator="exp", case_id=1, status=oc.FAILED,
                         failure_type=oc.PRECISION, message="y: MERE",
                         accuracy=[{"name": "y", "failure_type": oc.PRECISION}])  # a verdict carries a word too
    record = result.to_dict()
    for name in ("status", "failure_type", "split"):
        assert type(record[name]) is str, name  # type: ignore[literal-required]
    assert type(record["accuracy"][0]["failure_type"]) is str
    assert execnet.gateway_base.loads(execnet.gateway_base.dumps(record)) == record  # xdist's wire: builtins only
    with pytest.raises(execnet.gateway_base.DumpError):  # what the wire makes of a word left in
        execnet.gateway_base.dumps({"status": oc.FAILED})
    assert json.loads(json.dumps(record)) == record
    back = CaseOutcome.from_dict(record)
    assert back == result and back.status is Status.FAILED and back.failure_type is FailureType.PRECISION_MISMATCH
    assert back.split is oc.Split.PUBLIC


@pytest.mark.parametrize("field, value", [("status", "exploded"), ("failure_type", "precision"),
                                          ("split", "secret")])
def test_a_record_with_a_word_this_version_does_not_know_is_refused_by_name(field: str, value: str) -> None:
    record = dict(key="level1/exp_1", rel_path="level1/exp", operator="", case_id=1, status="failed",
                  failure_type="precision_mismatch")
    record[field] = value
    with pytest.raises(ValueError, match=rf"case level1/exp_1: {field} '{value}' is not one of"):
        CaseOutcome.from_dict(record)


def test_every_worker_status_but_ok_has_a_case_fate() -> None:
    from pytest_cannbench.judge.source import CANDIDATE_FATES, fate
    from pytest_cannbench.workers.batch import WorkerStatus

    assert set(CANDIDATE_FATES) == set(WorkerStatus) - {WorkerStatus.OK}
    assert {w.value for w in WorkerStatus} >= {ft.value for ft in oc.GUARD_FAILURES}
    for status, (case_status, failure) in CANDIDATE_FATES.items():
        assert isinstance(case_status, Status) and isinstance(failure, FailureType), status
    assert fate("something a worker never says") == (oc.CRASHED, oc.CANDIDATE_CRASH)


# ---------------------------------------------------------------------------------------------------- registries


def test_every_checker_has_a_judge_and_every_judge_a_checker() -> None:
    from pytest_cannbench.judge.precision import JUDGES

    assert set(JUDGES) == set(registry.CHECKERS)
    assert registry.checker_names()[0] == registry.DEFAULT_CHECKER
    assert registry.resolve_checker("cann_default") == "relative_error"
    with pytest.raises(ValueError, match="unknown checker 'ulp'; expected one of relative_error, allclose"):
        registry.resolve_checker("ulp")


def test_the_option_the_cli_and_the_task_gate_offer_every_checker() -> None:
    """--cann-checker, ``cannbench check --checker`` and the task-quality module's own CLI read the registry."""
    from pytest_cannbench import options

    assert options.CHECKERS == registry.checker_names()
    helps = [subprocess.run([sys.executable, "-m", module, *args, "--help"], capture_output=True, text=True,
                            cwd=ROOT, check=True).stdout
             for module, args in (("pytest_cannbench.cli", ["check"]), ("pytest_cannbench.judge.task_quality", []))]
    for text in helps:
        for name in registry.CHECKERS:
            assert name in text


def test_every_timer_has_its_function_and_the_guard_captures_it() -> None:
    from pytest_cannbench.timing import in_worker

    assert set(in_worker.TIMED_BY) == set(registry.TIMERS)
    for name, fn in in_worker.TIMED_BY.items():
        assert getattr(in_worker, fn.__name__) is fn, name
        assert fn.__name__ in in_worker.GUARDED, name
    assert registry.host_clock("cpu_clock") and not registry.host_clock("cuda_events")
    assert registry.host_clock("a timer nobody registered")  # a worker's reply is read: the strict checks
    assert registry.DeviceKind.CUDA.timers[0] == "cuda_profiler"


def test_device_kinds() -> None:
    kind = registry.DeviceKind
    assert registry.DEVICE_CHOICES == ("auto", "cpu", "cuda", "npu")
    assert kind.of("cuda:1") is kind.CUDA and kind.of("cpu") is kind.CPU and kind.of("npu") is kind.NPU
    with pytest.raises(ValueError, match="device 'mps:0': not a device of a known kind"):
        kind.of("mps:0")
    assert kind.CUDA.visibility_env == "CUDA_VISIBLE_DEVICES" and kind.CPU.visibility_env is None
    assert kind.NPU.address(1) == "npu:1" and kind.CPU.address(3) == "cpu"
    assert registry.on_accelerator("cuda:0") and not registry.on_accelerator("cpu")
    assert not registry.on_accelerator("mps")
    assert registry.parse_ids("0, 3") == [0, 3] and registry.parse_ids("all") == []


def test_options_no_longer_imports_the_judge() -> None:
    """The option parser reads the registries from vocab/ (no torch, no pytest), not from the judge: a cycle
    between the two rooms is gone."""
    import ast

    imported = {n.module for path in (ROOT / "pytest_cannbench" / "options").glob("*.py")
                for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported and not {m for m in imported if m.startswith(("pytest_cannbench.judge", "pytest_cannbench.timing"))}


# ---------------------------------------------------------------------------------------------------- records


def _plain(hint: object) -> object:
    return typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint


def test_the_timing_record_has_every_field_of_case_timing_with_its_type() -> None:
    from pytest_cannbench.timing.stats import CaseTiming, Interval, TimingSummary

    for cls, record in ((CaseTiming, TimingRecord), (TimingSummary, TimingSummaryRecord), (Interval, IntervalRecord)):
        fields = typing.get_type_hints(cls)
        declared = {k: _plain(v) for k, v in typing.get_type_hints(record, include_extras=True).items()}
        assert set(fields) <= set(declared), set(fields) - set(declared)
        for name in (f.name for f in dataclasses.fields(cls)):
            assert fields[name] == declared[name], name
        if record is not TimingRecord:  # its extra baselines' fields are written beside the dataclass's
            assert set(fields) == set(declared)


def test_times_and_the_sealed_timing() -> None:
    record = TimingRecord(measured=True, t_cand_us=2.0, t_baseline_us="nan", t_hw_us=None,  # type: ignore[typeddict-item]
                          notes=["a"])
    cand, base, hw = times_of(record)
    assert cand == 2.0 and base != base and hw is None
    assert times_of(None) == (None, None, None)
    assert times_of({"t_cand_us": True}).cand is None
    assert sealed_timing(record) == {"measured": True, "t_cand_us": 2.0, "t_baseline_us": "nan", "t_hw_us": None}
    assert sealed_timing(TimingRecord()) == {}


def test_the_guard_reports_any_timer_function_rebound() -> None:
    """The worker hands the guard the timers' functions from the registry (timing.in_worker.TIMED_BY, through
    candidate_main.watched): in a real worker-like process, rebinding any of them is api_tampered, named."""
    probe = textwrap.dedent("""
        import json, os, torch
        from pytest_cannbench.guard.runtime import Guard
        from pytest_cannbench.timing import in_worker
        from pytest_cannbench.workers.candidate_main import watched
        guard = Guard("block", "cpu", os.getcwd(), [], watched=watched("cpu"))
        out = {}
        for name in sorted({fn.__name__ for fn in in_worker.TIMED_BY.values()}):
            real = getattr(in_worker, name)
            setattr(in_worker, name, lambda *a, **k: None)
            guard.check()
            out[name] = [p["detail"] for p in guard.report() if p["kind"] == "api_tampered"]
            setattr(in_worker, name, real)
        guard.check()
        out["restored"] = guard.report()
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found.pop("restored") == []
    assert set(found) == {"run_batch", "graph_batch", "_cuda_profiled", "_cuda_events", "_npu_profiled"}
    for name, details in found.items():
        assert details == [f"pytest_cannbench.timing.in_worker.{name} was replaced or rewritten"], name

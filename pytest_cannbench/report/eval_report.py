"""The leaderboard in the official harness's ``EvalReport`` JSON shape (docs/ci.md), for tools that read those
files.

Every score comes from the board (computed by :mod:`scoring`); this module only renames and regroups. Fields the
official report has and the board cannot know are present with the official "unknown" value (``op_times`` ``{}``,
``subprocess_failure_reason`` ``null``, ``perf_recheck`` ``null``). Our own detail rides along in extra keys
(``cannbench_status``, ``cannbench_failure_type``, ``hap_flags``, a top-level ``cannbench`` block with the level
sums and weights), which readers of the official shape ignore.

Case ``status`` (ours -> official):

- ``passed`` -> ``success``
- ``missing`` (no interface in the submission) and ``skipped`` -> ``skipped``, ``failure_type`` ``skipped``
- ``compile_failed``, ``install_failed``, ``import_failed`` -> ``cascade``, ``failure_type`` ``cascade_device``
  (the official harness marks the cases of an operator that did not build that way), and the operator's
  ``compilation_error`` carries the build message
- anything else (``failed``, ``error``, ``crashed``, ``timeout``, ``oom_killed``) -> ``failed``

Case ``failure_type`` of a failed case uses the official vocabulary where it has a counterpart (so an official
re-scorer splits precision from compile/runtime failures as :mod:`scoring` did): ``timed_output_wrong`` ->
``precision_mismatch``, ``candidate_timeout``/``pytest_timeout`` -> ``timeout``, ``out_of_memory`` ->
``oom_killed``, ``candidate_crashed``/``worker_crashed`` -> ``subprocess_failure``, ``not_provided`` ->
``interface_error``; other types keep their name. ``failed_cases`` counts ``failed`` cases; ``cascade_cases``
counts ``cascade`` and ``skipped`` ones, and ``genuine_pass_rate`` leaves them out, as the official summary does.
``speedup`` is T_base / T_cand with the official missing-baseline proxy (0.0 when not measured), ``avg_speedup``
its arithmetic mean over passed cases, ``elapsed_us`` T_cand (``null`` when not measured), ``perf_score`` the
case's HAP.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pytest_cannbench.figures import baseline_proxy
from pytest_cannbench.outcome import BUILD_FAILURES
from pytest_cannbench.report.scoring import PRECISION_FAILURES
from pytest_cannbench.vocab.records import times_of

STATUS_MAP: dict[str, str] = {"passed": "success", "missing": "skipped", "skipped": "skipped",
              **{status: "cascade" for status in BUILD_FAILURES}}
FAILURE_TYPE_MAP = {"timed_output_wrong": "precision_mismatch", "candidate_timeout": "timeout",
                    "pytest_timeout": "timeout", "out_of_memory": "oom_killed",
                    "candidate_crashed": "subprocess_failure", "worker_crashed": "subprocess_failure",
                    "not_provided": "interface_error"}
# The check ran (and has something to say) for these, even without per-output verdicts.
CHECKED_FAILURES = PRECISION_FAILURES | {"compile_runtime_error"}
ENVIRONMENT_KEYS: dict[str, tuple[str, ...]] = {
    "npu": ("npu", "hardware_key"), "cpu": ("cpu",), "cann": ("cann", "cann_version"),
    "driver": ("driver", "driver_version"), "pytorch": ("pytorch", "torch"),
    "pytorch_npu": ("pytorch_npu", "torch_npu"), "torchvision": ("torchvision",),
    "python": ("python",), "os": ("os", "platform"), "docker": ("docker",)}


def number(value: Any) -> float | None:
    """A finite float or None: boards read back from JSON carry NaN and infinities as strings."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def board_device(board: Mapping[str, Any]) -> str:
    """Where the run timed its cases: the environment's device, else the devices its timings name."""
    device = (board.get("environment") or {}).get("device")
    if device:
        return str(device)
    seen = sorted({str(c["timing"]["device"]) for op in board.get("operators") or [] for c in op.get("cases") or []
                   if isinstance(c.get("timing"), dict) and c["timing"].get("device")})
    return ",".join(seen)


def _setting(board: Mapping[str, Any], name: str) -> Any:
    for part in ("config", "environment"):
        value = (board.get(part) or {}).get(name)
        if value not in (None, ""):
            return value
    return None


def _eval_code(board: Mapping[str, Any]) -> str:
    code = _setting(board, "eval_code")
    if code:
        return str(code)
    try:
        stamp = datetime.fromisoformat(str(board.get("generated_at"))).strftime("%Y%m%d_%H%M%S")
    except ValueError:
        return "cannbench_eval"
    return f"cannbench_eval_{stamp}"


def speedup(case: Mapping[str, Any]) -> float:
    """T_base / T_cand, with the official proxy baseline when T_base is missing; 0.0 when not measured."""
    t_cand, t_base, t_hw = (number(t) for t in times_of(case))
    if t_cand is None or t_cand <= 0:
        return 0.0
    if t_base is not None and t_base > 0:
        return t_base / t_cand
    if t_hw is not None and t_hw > 0:
        return baseline_proxy(t_hw) / t_cand
    return 0.0


def _dtype_category(dtype: Any) -> str:
    text = str(dtype or "").lower()
    return "int" if ("int" in text or "bool" in text) else "float"


def _output_result(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """One output's verdict under the official field names, with our own fields flattened beside them."""
    official = {
        "index": verdict.get("index", 0), "name": verdict.get("name", ""), "dtype": verdict.get("dtype", ""),
        "passed": bool(verdict.get("passed")),
        "error_msg": "" if verdict.get("passed") else verdict.get("message") or "",
        "mismatch_count": verdict.get("mismatch_count", 0), "total_count": verdict.get("total_count", 0),
        "dtype_category": _dtype_category(verdict.get("dtype")), "threshold": verdict.get("threshold"),
        "mere": verdict.get("mere"), "mare": verdict.get("mare"), "max_diff": verdict.get("max_abs_err"),
        "max_abs_diff": verdict.get("max_abs_err"), "mean_diff": verdict.get("mean_abs_err"),
    }
    return {**{k: v for k, v in verdict.items() if k != "message"}, **official}


def _max(values: list[Any]) -> float | None:
    found = [v for v in (number(x) for x in values) if v is not None]
    return max(found) if found else None


def _accuracy(case: Mapping[str, Any]) -> dict[str, Any] | None:
    verdicts = [v for v in case.get("accuracy") or [] if isinstance(v, dict)]
    failure = case.get("failure_type")
    if not verdicts and failure not in CHECKED_FAILURES:
        return None  # the check never ran (crash, timeout, build failure, missing interface)
    failing = next((v for v in verdicts if not v.get("passed")), None)
    passed = bool(verdicts) and failing is None and case.get("status") == "passed"
    error = (failing.get("message") if failing else None) or (None if passed else case.get("message") or None)
    why = str((failing or {}).get("failure_type") or failure or "")
    result: dict[str, Any] = {
        "passed": passed,
        "error_msg": error,
        "output_results": [_output_result(v) for v in verdicts],
        "metadata": {
            "checker_name": next((v.get("checker") for v in verdicts if v.get("checker")), ""),
            "failure_type": None if passed or not why else FAILURE_TYPE_MAP.get(why, why),
            "mere": _max([v.get("mere") for v in verdicts]),
            "mare": _max([v.get("mare") for v in verdicts]),
            "max_diff": _max([v.get("max_abs_err") for v in verdicts]),
            "mismatch_count": sum(int(number(v.get("mismatch_count")) or 0) for v in verdicts),
            "total_count": sum(int(number(v.get("total_count")) or 0) for v in verdicts),
            "trial": 1,
        },
    }
    threshold = next((v.get("threshold") for v in verdicts if v.get("threshold") is not None), None)
    if threshold is not None:
        result["threshold"] = threshold
    return result


def _case(op: Mapping[str, Any], case: Mapping[str, Any], device: str, timestamp: str) -> dict[str, Any]:
    ours = str(case.get("status"))
    status = STATUS_MAP.get(ours, "failed")
    failure = case.get("failure_type")
    if status == "cascade":
        official_failure: str | None = "cascade_device"
    elif status == "skipped":
        official_failure = "skipped"
    elif status == "failed":
        official_failure = FAILURE_TYPE_MAP.get(str(failure), failure)
    else:
        official_failure = None
    raw_timing = case.get("timing")
    timing: dict[str, Any] = raw_timing if isinstance(raw_timing, dict) else {}
    cand = number(times_of(case).cand)
    measured = bool(timing.get("measured")) and cand is not None
    perf_error = None
    if status == "success" and not measured:
        perf_error = f"not measured: {timing.get('reason') or 'no timing'}"
    return {
        "rel_path": op.get("rel_path", ""),
        "operator": op.get("name", ""),
        "case_id": case.get("key", ""),
        "status": status,
        "elapsed_us": cand if measured else None,
        "op_times": {},
        "error_msg": (case.get("message") or None) if status != "success" else None,
        "performance_error_msg": perf_error,
        "device": str(timing.get("device") or device),
        "timestamp": timestamp,
        "accuracy": _accuracy(case),
        "speedup": speedup(case) if status == "success" else 0.0,
        "baseline_perf_us": number(case.get("t_baseline_us")) or 0.0,
        "t_hw_us": number(case.get("t_hw_us")) or 0.0,
        "perf_score": number(case.get("hap")) if status == "success" else None,
        "failure_type": official_failure,
        "perf_recheck": None,
        "cannbench_status": ours,
        "cannbench_failure_type": failure,
        "hap_flags": list(case.get("flags") or []),
    }


def _score_error(op: Mapping[str, Any]) -> str | None:
    code = op.get("score_error")
    if not code:
        return None
    first = next((str(c.get("message") or "").strip().splitlines()[0] for c in op.get("cases") or []
                  if str(c.get("message") or "").strip()), "")
    why = {"missing": "the submission does not provide this operator",
           "no cases": "the operator has no cases"}.get(code, f"the submission failed: {code}")
    return f"operator scores 0: {why}" + (f" ({first[:300]})" if first else "")


def _operator(op: Mapping[str, Any], device: str, timestamp: str) -> dict[str, Any]:
    cases = [_case(op, c, device, timestamp) for c in op.get("cases") or []]
    total = int(op.get("cases_total") or len(cases))
    passed = int(op.get("cases_passed") or 0)
    speedups = [c["speedup"] for c in cases if c["status"] == "success" and c["speedup"] > 0]
    build_error = None
    if op.get("status") in BUILD_FAILURES or op.get("score_error") in BUILD_FAILURES:
        build_error = next((str(c.get("message")) for c in op.get("cases") or [] if c.get("message")),
                           str(op.get("score_error") or op.get("status")))
    return {
        "rel_path": op.get("rel_path", ""),
        "operator": op.get("name", ""),
        "total_cases": total,
        "passed_cases": passed,
        "failed_cases": sum(1 for c in cases if c["status"] == "failed"),
        "pass_rate": passed / total if total > 0 else 0.0,
        "avg_speedup": sum(speedups) / len(speedups) if speedups else 0.0,
        "score": number(op.get("score")) or 0.0,
        "compilation_score": number(op.get("compile_score")) or 0.0,
        "compile_runtime_score": number(op.get("compile_score")) or 0.0,
        "compile_runtime_fail_cases": int(op.get("compile_runtime_failures") or 0),
        "function_score": number(op.get("function_score")) or 0.0,
        "performance_score": number(op.get("performance_score")) or 0.0,
        "cases": cases,
        "compilation_error": build_error,
        "subprocess_failure_reason": None,
        "score_error_code": op.get("score_error") or None,
        "score_error": _score_error(op),
        "level": op.get("level"),
        "cannbench_status": op.get("status"),
        "speedup_geomean": number(op.get("speedup_geomean")),
    }


def to_eval_report(board: Mapping[str, Any]) -> dict[str, Any]:
    """The official ``EvalReport.to_dict`` shape of a leaderboard (scores as the board has them)."""
    device = board_device(board)
    timestamp = str(board.get("generated_at") or "")
    operators = [_operator(op, device, timestamp) for op in board.get("operators") or []]
    cases = [c for op in operators for c in op["cases"]]
    total = sum(op["total_cases"] for op in operators)
    passed = sum(op["passed_cases"] for op in operators)
    failed = sum(op["failed_cases"] for op in operators)
    cascade = sum(1 for c in cases if c["status"] in ("cascade", "skipped"))
    overall = number(board.get("total_score")) or 0.0
    version = str(board.get("plugin_version") or "")
    tasks_version = str(_setting(board, "tasks_version") or "")
    env = board.get("environment") or {}
    return {
        "framework_version": version,
        "tasks_version": tasks_version,
        "eval_code": _eval_code(board),
        "timestamp": timestamp,
        "device": device,
        "total_operators": len(operators),
        "total_cases": total,
        "passed_cases": passed,
        "failed_cases": failed,
        "overall_score": overall,
        "summary": {
            "total_operators": len(operators),
            "total_cases": total,
            "passed_cases": passed,
            "failed_cases": failed,
            "cascade_cases": cascade,
            "pass_rate": passed / total if total > 0 else 0.0,
            "genuine_pass_rate": passed / (total - cascade) if total - cascade > 0 else 0.0,
            "overall_score": overall,
        },
        "setup_info": {
            "metadata": {
                "framework": f"pytest-cannbench {version}".strip(),
                "tasks_version": tasks_version,
                "date": timestamp,
                "agent_skill": str(_setting(board, "agent_skill") or ""),
                "base_model": str(_setting(board, "base_model") or ""),
                "harness": str(_setting(board, "harness") or "pytest-cannbench"),
                "benchmark": str(_setting(board, "benchmark") or os.path.basename(str(_setting(board, "tasks") or ""))),
                "license": str(_setting(board, "license") or ""),
            },
            "environment": {name: next((env[k] for k in keys if env.get(k) not in (None, "")), None)
                            for name, keys in ENVIRONMENT_KEYS.items()},
        },
        "operators": operators,
        "cannbench": {
            "schema": board.get("schema"),
            "levels": board.get("levels") or {},
            "weights": board.get("weights") or {},
            "counts": board.get("counts") or {},
            "failure_types": board.get("failure_types") or {},
            "submission": board.get("submission"),
        },
    }

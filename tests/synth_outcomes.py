"""Synthetic case outcomes (``CaseOutcome.to_dict`` shape) for the report and merge tests: no tasks, no torch."""

from __future__ import annotations

from typing import Any

from pytest_cannbench.report import leaderboard

BUILD_MESSAGE = "build.sh failed (rc 1)\nerror: a | b <tag> `x`"


def timed(t_cand: float, t_base: float | None = 20.0, t_hw: float = 2.0, **extra: Any) -> dict[str, Any]:
    return {"measured": True, "device": "cpu", "timer": "cpu_clock", "t_cand_us": t_cand, "t_baseline_us": t_base,
            "t_hw_us": t_hw, "baseline_source": "live", "t_hw_source": "roofline", "flags": [], **extra}


def outcome(rel_path: str, operator: str, case_id: int, status: str = "passed", failure_type: str | None = None,
            message: str = "", timing: dict[str, Any] | None = None,
            accuracy: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    if timing is None:
        timing = timed(10.0 + case_id) if status == "passed" else {"measured": False, "reason": "not passed"}
    return {"key": f"{rel_path}_{case_id}", "rel_path": rel_path, "operator": operator, "case_id": case_id,
            "status": status, "failure_type": failure_type, "message": message,
            "accuracy": accuracy if accuracy is not None else [], "timing": timing}


def verdict(passed: bool, mere: float = 1e-4, **extra: Any) -> dict[str, Any]:
    return {"index": 0, "name": "y", "dtype": "float16", "expected_dtype": "float16", "passed": passed,
            "compared": True, "failure_type": None if passed else "precision_mismatch",
            "message": "" if passed else "MERE 0.2 > 0.001 | output y", "checker": "relative_error",
            "threshold": 0.001, "total_count": 64, "mismatch_count": 0 if passed else 12, "mere": mere,
            "mare": 10 * mere, "max_abs_err": 0.5, "mean_abs_err": 0.01, **extra}


def all_outcomes() -> list[dict[str, Any]]:
    """Five operators over three levels: passing, partly failing, build failure, missing, unmeasured/crashed."""
    out = [outcome("level1/exp", "Exp", i, accuracy=[verdict(True)]) for i in (1, 2, 3)]
    out += [outcome("level1/relu", "Relu", 1, timing=timed(2.5, t_base=None)),  # proxy baseline
            outcome("level1/relu", "Relu", 2, timing=timed(30.0)),
            outcome("level1/relu", "Relu", 3, "failed", "precision_mismatch", "MERE 0.2 > 0.001",
                    accuracy=[verdict(False, 0.2)])]
    out += [outcome("level2/matmul", "MatMul", i, "compile_failed", "compile_failed", BUILD_MESSAGE) for i in (1, 2)]
    out += [outcome("level2/softmax", "Softmax", i, "missing", "not_provided", "Softmax: not in the submission")
            for i in (1, 2)]
    out += [outcome("level3/conv", "Conv", 1, timing={"measured": False, "reason": "--cann-no-perf"}),
            outcome("level3/conv", "Conv", 2, "timeout", "candidate_timeout", "no answer in 300 s"),
            outcome("level3/conv", "Conv", 3, "crashed", "worker_crashed", "worker 'gw1' crashed\nsignal 9")]
    return out


def board_of(outcomes: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    submission = {"kind": "source", "source": "/src/sub", "status": "ok", "message": "",
                  "wheel": "/tmp/x/dist/cann_bench-0.1-py3-none-any.whl", "wheel_sha256": "ab" * 32,
                  "prebuilt": False}
    defaults: dict[str, Any] = {"submission": submission,
                                "environment": {"device": "cpu", "python": "3.12.1", "torch": "2.13.0",
                                                "platform": "Linux-x86_64", "cpu": "Test CPU"},
                                "config": {"seed": 0, "checker": "relative_error", "shard": None, "hap_cap": False,
                                           "run_identity": "abc123"}}
    defaults.update(kwargs)
    return leaderboard.build(outcomes, **defaults)

"""An answer from case outcomes: per case a stable code and a hint, per operator the official parts, the
candidate's status and a bounded reward; a batch's pass@k.

Statuses, worst first (the first that applies is the candidate's ``status``):

- ``harness_error``: a case ended on the service's side (golden, task, a judge lost twice): ``reward`` is None,
  nothing to learn from;
- ``cheating``: the guard caught the candidate (a tainting failure: ``outcome.TAINTING_FAILURES``);
- ``compile_failed``/``install_failed``/``import_failed``: the build;
- ``timeout``: a call did not return in time, or the deadline cut the request short;
- ``crashed``: a call killed its process or went over its memory;
- ``failed``: a wrong or malformed output;
- ``missing``: no interface for a selected operator;
- ``passed``: every selected case passed.

Reward (docs/serve.md, Reward), always within [-1, 1]:

- caught cheating: :data:`REWARD_CHEAT` (-1);
- nothing ran (the build failed, or no selected operator is provided): :data:`REWARD_NO_BUILD` (-0.5);
- otherwise the mean over the selected operators of the official operator score (compile 20 + function 30 +
  performance 50, ``report/scoring.py``) divided by 100, or by 50 with ``perf: false`` (then only compile and
  function can be earned): 0 (every case crashed) up to 1 (every case passed at the hardware limit);
- None when it tells nothing of the candidate: ``harness_error``, or no case of it ever reached a judge (its
  deadline passed in the queue, or the service stopped first); the adapter turns it into 0 and says so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from pytest_cannbench import outcome as oc
from pytest_cannbench.report.passk import KS, pass_at_k
from pytest_cannbench.report.scoring import W_COMPILE, W_FUNCTION, CaseScore, operator_score
from pytest_cannbench.serve.hints import DEADLINE, JUDGE_LOST, NOT_GRADED_YET, failure_hint

REWARD_CHEAT = -1.0
REWARD_NO_BUILD = -0.5
MESSAGE_CHARS = 2000
SERVICE_FAILURES = frozenset(oc.HARNESS_FAILURES - oc.NOT_GRADED) | {JUDGE_LOST}
TIMEOUT_CODES = frozenset({oc.CANDIDATE_TIMEOUT, DEADLINE, NOT_GRADED_YET, oc.PYTEST_TIMEOUT})


def code_of(case: dict[str, Any]) -> str | None:
    """A case's stable failure code: its failure type, else its status; None when it passed."""
    if case.get("status") == oc.PASSED:
        return None
    return case.get("failure_type") or case.get("status")


def status_of(cases: list[dict[str, Any]]) -> str:
    """The worst news among some case outcomes (module docstring)."""
    codes = {code_of(c) for c in cases}
    statuses = {c.get("status") for c in cases}
    if not cases or codes & SERVICE_FAILURES:
        return "harness_error"
    if codes & set(oc.TAINTING_FAILURES):
        return "cheating"
    build = next((b for b in oc.BUILD_FAILURES if b in codes or b in statuses), None)
    if build is not None:
        return build
    if oc.TIMEOUT in statuses or codes & TIMEOUT_CODES:
        return oc.TIMEOUT
    if statuses & {oc.CRASHED, oc.OOM_KILLED}:
        return oc.CRASHED
    if statuses & {oc.FAILED, oc.ERROR}:
        return oc.FAILED
    if oc.MISSING in statuses:
        return oc.MISSING
    return oc.PASSED


def _speedup(timing: dict[str, Any]) -> tuple[float | None, list[float] | None]:
    interval = timing.get("speedup")
    if not isinstance(interval, dict):
        return None, None
    est, low, high = interval.get("estimate"), interval.get("low"), interval.get("high")
    ci = [float(low), float(high)] if isinstance(low, (int, float)) and isinstance(high, (int, float)) else None
    return (float(est) if isinstance(est, (int, float)) else None), ci


def case_answer(case: dict[str, Any], hap: float | None, hap_flags: list[str]) -> dict[str, Any]:
    timing = case.get("timing") or {}
    speedup, ci = _speedup(timing)
    code = code_of(case)
    flags = sorted(set(list(case.get("flags") or []) + list(timing.get("flags") or []) + hap_flags))
    return {
        "key": case["key"],
        "operator": case.get("rel_path") or case.get("operator") or "",
        "case_id": case.get("case_id"),
        "status": case["status"],
        "code": code,
        "hint": failure_hint(code),
        "message": (case.get("message") or "")[:MESSAGE_CHARS],
        "speedup": speedup,
        "speedup_ci": ci,
        "hap": hap,
        "flags": flags,
    }


def _score_case(case: dict[str, Any]) -> CaseScore:
    timing = case.get("timing") or {}
    return CaseScore(
        case["status"],
        case.get("failure_type"),
        timing.get("t_cand_us"),
        timing.get("t_baseline_us"),
        timing.get("t_hw_us"),
    )


def grade_answer(
    cases: list[dict[str, Any]],
    *,
    perf: bool,
    provenance: dict[str, Any],
    job_id: str,
    name: str | None,
    message: str = "",
    seconds: dict[str, float] | None = None,
    attempts: int = 1,
) -> dict[str, Any]:
    """The answer to one candidate (``schema.GradeAnswer``) from its case outcomes (``CaseOutcome.to_dict``)."""
    by_op: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for case in cases:
        by_op[case.get("rel_path") or case.get("operator") or "?"].append(case)
    operators, answers = [], []
    for rel_path, group in sorted(by_op.items()):
        group.sort(key=lambda c: (c.get("case_id") is None, c.get("case_id") or 0, c["key"]))
        score = operator_score([_score_case(c) for c in group])
        answers += [case_answer(c, h, f) for c, h, f in zip(group, score.haps, score.hap_flags)]
        operators.append(
            {
                "rel_path": rel_path,
                "score": score.score,
                "compile": score.compile_score,
                "function": score.function_score,
                "performance": score.performance_score,
                "cases": score.cases_total,
                "passed": score.cases_passed,
                "score_error": score.score_error,
                "status": status_of(group),
                "ungraded": all(code_of(c) == NOT_GRADED_YET for c in group),
            }
        )
    status = status_of(cases)
    return {
        "status": status,
        "reward": reward(status, operators, perf=perf),
        "operators": operators,
        "provenance": provenance,
        "name": name,
        "id": job_id,
        "cases": answers,
        "message": message,
        "seconds": seconds or {},
        "attempts": attempts,
    }


def reward(status: str, operators: list[dict[str, Any]], *, perf: bool) -> float | None:
    """The bounded reward of one candidate (module docstring)."""
    if status == "harness_error" or not operators or all(op.get("ungraded") for op in operators):
        return None
    if status == "cheating":
        return REWARD_CHEAT
    if status in oc.BUILD_FAILURES or all(op["status"] == oc.MISSING for op in operators):
        return REWARD_NO_BUILD
    best = 100.0 if perf else 100.0 * (W_COMPILE + W_FUNCTION)
    mean = sum(min(op["score"], best) for op in operators) / len(operators)
    return max(0.0, min(1.0, mean / best))


def batch_answer(answers: list[dict[str, Any]], provenance: dict[str, Any], goldens_computed: int) -> dict[str, Any]:
    """A group's answer: every candidate's, pass@k per operator (a candidate is correct on an operator when every
    selected case of it passed; candidates whose reward is None are not samples) and over operators."""
    samples: dict[str, list[bool]] = defaultdict(list)
    for answer in answers:
        if answer["reward"] is None:  # nothing learnt of it: not a sample
            continue
        for op in answer["operators"]:
            samples[op["rel_path"]].append(op["cases"] > 0 and op["passed"] == op["cases"])
    rows: list[dict[str, Any]] = []
    for rel_path, correct in sorted(samples.items()):
        n, c = len(correct), sum(correct)
        rows.append(
            {
                "rel_path": rel_path,
                "samples": n,
                "correct": c,
                "pass_at_k": {str(k): pass_at_k(n, c, k) for k in KS if k <= n},
            }
        )
    overall = {}
    for k in KS:
        values = [row["pass_at_k"][str(k)] for row in rows if str(k) in row["pass_at_k"]]
        if values:
            overall[str(k)] = sum(values) / len(values)
    cut = any(
        a["status"] == oc.TIMEOUT and any(c.get("code") in (DEADLINE, NOT_GRADED_YET) for c in a["cases"])
        for a in answers
    )
    return {
        "status": "timeout" if cut else "done",
        "reward": [a["reward"] for a in answers],
        "operators": rows,
        "provenance": provenance,
        "candidates": answers,
        "pass_at_k": overall,
        "goldens_computed": goldens_computed,
    }


def placeholder(case: dict[str, Any], code: str, message: str) -> dict[str, Any]:
    """The outcome of a selected case that never got a verdict (deadline, a lost judge): ``case`` holds its key,
    rel_path, operator and case_id."""
    status = oc.TIMEOUT if code in (DEADLINE, NOT_GRADED_YET) else oc.ERROR
    return {**case, "status": status, "failure_type": code, "message": message, "timing": {}, "flags": []}


def goldens_computed(outcomes: Iterable[dict[str, Any]]) -> int:
    """Cases whose golden was computed for this answer (not taken from a memo or the golden cache)."""
    return sum(
        1
        for o in outcomes
        if o.get("status") not in (oc.MISSING, *oc.BUILD_FAILURES)
        and o.get("failure_type") not in (DEADLINE, NOT_GRADED_YET, JUDGE_LOST)
        and not o.get("golden_cached")
    )

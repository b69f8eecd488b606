"""The multi-candidate summary: pass@k per problem and over problems, best speed-up, fast_p over the batch."""

from __future__ import annotations

import pytest

from pytest_cannbench.report.kernelbench import ProblemResult
from pytest_cannbench.report.passk import summary


def result(rel: str, correct: bool, speedup: float | None = None, status: str = "") -> ProblemResult:
    return ProblemResult(rel_path=rel, name=rel, correct=correct, status=status or ("passed" if correct else "failed"),
                         items_passed=1, items_total=1, speedup=speedup)


def test_summary_counts_samples_per_problem_and_skips_the_ungraded():
    s = summary({"a": [result("p1", True, 2.0), result("p2", False)],
                 "b": [result("p1", True, 1.2), result("p2", True, 0.5)],
                 "c": [result("p1", False), result("p2", False, status="skipped")]})
    rows = {r["rel_path"]: r for r in s["problems"]}
    assert (rows["p1"]["samples"], rows["p1"]["correct"], rows["p2"]["samples"]) == (3, 2, 2)
    assert rows["p1"]["best_speedup"] == 2.0 and rows["p1"]["best_candidate"] == "a"
    assert rows["p1"]["pass_at_k"]["1"] == pytest.approx(2 / 3) and rows["p2"]["pass_at_k"]["2"] == 1.0
    assert s["pass_at_k"]["1"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert set(s["pass_at_k"]) == {"1", "2"}  # pass@5 would need five samples of some problem
    assert s["graded_pairs"] == 5
    assert s["fast_p"]["0"] == pytest.approx(3 / 5) and s["fast_p"]["1"] == pytest.approx(2 / 5)


def test_the_sessions_kernelbench_line_says_when_it_pools_candidates():
    """The session's kernelbench section pools every candidate's items per problem: with an honest candidate and
    a cheat, "0/1 problems correct" read like the honest one failed. The line now says what it counts."""
    from pytest_cannbench.report.kernelbench import section, summary_lines

    def item(candidate: str, status: str) -> dict:
        return {"key": f"cand={candidate}/level1/23_Softmax.py_1", "rel_path": "level1/23_Softmax.py",
                "operator": "23_Softmax", "case_id": 1, "status": status, "candidate": candidate,
                "failure_type": None if status == "passed" else "no_custom_kernel", "message": "",
                "kernelbench": {"problem": "23_Softmax"}}

    pooled = section([item("honest_s0", "passed"), item("cheat_s0", "failed")])
    assert pooled is not None and pooled["candidates"] == 2 and pooled["problems_correct"] == 0
    lines = summary_lines(pooled)
    assert "kernelbench: 0/1 problems correct" in lines[-2] and "the 2 candidates' items together" in lines[-1]
    alone = section([item("honest_s0", "passed")])
    assert alone is not None and not any("together" in line for line in summary_lines(alone))

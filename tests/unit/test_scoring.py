"""Eq.3/4/5 against hand-computed values, including the official data's quirky cases."""

from __future__ import annotations

import math

import pytest

from pytest_cannbench.figures import hap, hap_interval
from pytest_cannbench.report.scoring import CaseScore, geometric_mean_speedup, level_of, operator_score, totals

NAN = float("nan")


@pytest.mark.parametrize("t_base, t_cand, t_hw, expected, flag", [
    (100.0, 100.0, 10.0, 0.5, None),  # at the baseline
    (100.0, 10.0, 10.0, 1.0, None),  # at the hardware limit
    (100.0, 55.0, 10.0, 90 / 135, None),  # (100-10) / ((55-10) + (100-10))
    (100.0, 400.0, 10.0, 90 / 480, None),  # slower than the baseline: below 0.5, never negative
    (100.0, 5.0, 10.0, 1.0, "implausible_time"),  # faster than T_hw (90 / 85 by the formula): never above 1
    (None, 50.0, 2.0, 18 / 66, "baseline_proxy"),  # missing baseline: max(10*2, 10) = 20 -> 18 / (48 + 18)
    (0.0, 50.0, 0.5, 9.5 / 59, "baseline_proxy"),  # proxy floor: max(5, 10) = 10 -> 9.5 / (49.5 + 9.5)
    (-3.0, 50.0, 0.5, 9.5 / 59, "baseline_proxy"),
    (6.83, 10.0, 6.83, 0.0, None),  # official level2/scatter/12: baseline == T_hw -> 0 for any slower kernel
    (6.83, 6.83, 6.83, None, "degenerate_anchors"),  # ... and None at T_hw (0 / 0)
    (5.0, 20.0, 10.0, -5 / 5, "baseline_below_t_hw"),  # baseline below T_hw: computed, flagged; denominator 10 - 5 = 5
    (NAN, 10.0, 1.0, None, "missing_time"),
    (10.0, NAN, 1.0, None, "missing_time"),
    (10.0, 5.0, NAN, None, "missing_time"),
    (10.0, None, 1.0, None, "missing_time"),
    (10.0, 0.0, 1.0, None, "non_positive_time"),
    (10.0, 5.0, 0.0, None, "non_positive_time"),
])
def test_hap(t_base, t_cand, t_hw, expected, flag):
    value, flags = hap(t_base, t_cand, t_hw)
    assert (value is None) if expected is None else value == pytest.approx(expected)
    if flag:
        assert flag in flags
    else:
        assert flags == []


def test_an_operator_never_scores_above_100():
    """Times below T_hw (a merged board of an old run; the grader itself fails such cases) earn HAP 1 at most."""
    fast = [case(t=(100.0, 0.01, 10.0)), case(t=(1e6, 1e-3, 50.0)), case()]
    score = operator_score(fast)
    assert score.haps[0] == score.haps[1] == 1.0 and score.score <= 100.0
    perfect = operator_score([case(t=(100.0, 1e-3, 10.0))] * 3)
    assert perfect.score == pytest.approx(100.0) and perfect.performance_score == pytest.approx(50.0)


def test_hap_interval_maps_the_speedup_interval_end_to_end():
    low, high = hap_interval(100.0, 10.0, {"low": 1.5, "high": 2.5})
    assert low == pytest.approx(hap(100.0, 100.0 / 1.5, 10.0)[0]) and high == pytest.approx(hap(100.0, 40.0, 10.0)[0])
    assert low < hap(100.0, 50.0, 10.0)[0] < high
    assert hap_interval(100.0, 10.0, None) is None and hap_interval(None, 10.0, {"low": 1, "high": 2}) is None
    assert hap_interval(100.0, 10.0, {"low": 0.0, "high": 2.0}) is None


def test_hap_cap_clips_at_one():
    assert hap(100.0, 5.0, 10.0, cap=True) == (1.0, ["implausible_time", "hap_capped"])
    assert hap(100.0, 55.0, 10.0, cap=True)[0] == pytest.approx(90 / 135)


def case(status="passed", failure_type=None, t=(100.0, 55.0, 10.0)):
    return CaseScore(status, failure_type, t_cand_us=t[1], t_baseline_us=t[0], t_hw_us=t[2])


def test_operator_all_passed():
    s = operator_score([case(), case(t=(100.0, 100.0, 10.0)), case(t=(100.0, 10.0, 10.0)), case(t=(100.0, None, 10.0))])
    # N = 4; compile 20; function 30; performance 50 * (90/135 + 0.5 + 1.0 + 0) / 4
    assert (s.compile_score, s.function_score) == (20.0, 30.0)
    assert s.performance_score == pytest.approx(50 * (90 / 135 + 1.5) / 4)
    assert s.score == pytest.approx(50 + 50 * (90 / 135 + 1.5) / 4)
    assert s.haps[3] is None and s.cases_passed == 4


def test_precision_failures_do_not_deduct_compile_but_runtime_ones_do():
    cases = [case(), case("failed", "precision_mismatch"), case("failed", "timed_output_wrong"),
             case("failed", "compile_runtime_error"), case("crashed", "candidate_crashed"),
             case("timeout", "candidate_timeout"), case("error", "golden_error"), case("oom_killed", "out_of_memory")]
    s = operator_score(cases)
    n = 8
    assert s.compile_runtime_failures == 6  # all but the pass and the pure precision failure
    assert s.compile_score == pytest.approx(100 * 0.2 * (n - 6) / n)
    assert s.function_score == pytest.approx(100 * 0.3 * 1 / n)
    assert s.performance_score == pytest.approx(100 * 0.5 * (90 / 135) / n)


@pytest.mark.parametrize("status", ["compile_failed", "install_failed", "import_failed"])
def test_a_submission_that_never_ran_scores_zero(status):
    s = operator_score([case(), case(status, status)])
    assert (s.score, s.compile_score, s.function_score, s.performance_score) == (0, 0, 0, 0)
    assert s.score_error == status


def test_missing_operator_scores_zero():
    s = operator_score([case("missing", "not_provided"), case("missing", "not_provided")])
    assert s.score == 0 and s.score_error == "missing"


def test_totals_and_levels():
    total, levels = totals([("level1/a", 50.0), ("level1/b", 25.0), ("level2/c", 80.0), ("level10/d", 1.0),
                            ("flat_op", 7.0)])
    assert total == pytest.approx(163.0)
    assert levels == {"level1": {"score": 75.0, "operators": 2}, "level2": {"score": 80.0, "operators": 1},
                      "level10": {"score": 1.0, "operators": 1}, "other": {"score": 7.0, "operators": 1}}
    assert level_of("level10/x") == "level10" and level_of("levelx/y") == ""


def test_geometric_mean_speedup():
    assert geometric_mean_speedup([(100.0, 50.0), (10.0, 40.0)]) == pytest.approx(math.sqrt(2 * 0.25))
    assert geometric_mean_speedup([(None, 5.0), (5.0, 0.0)]) is None
    assert geometric_mean_speedup([(5.0, float("inf")), (float("inf"), 5.0), (float("nan"), 1.0)]) is None

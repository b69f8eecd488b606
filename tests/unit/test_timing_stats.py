"""The paired speed-up and its bootstrap interval, the adaptive count, and the plausibility floor of a
streamed batch (issue 20, issue 16 item 5)."""

from __future__ import annotations

import statistics

import pytest

from pytest_cannbench.timing.stats import (
    HANDSHAKE_CAP_S,
    HANDSHAKE_CPU_S,
    HANDSHAKE_MARGIN,
    bootstrap_seed,
    handshake_allowance,
    implausible,
    median_interval,
    paired_speedup,
    sets_needed,
    unaccounted_per_handshake,
)
from pytest_cannbench.workers.tensor_wire import plan_batch


def test_paired_speedup_is_the_median_ratio_and_reproducible():
    base = [2.0e-3, 2.2e-3, 1.9e-3, 2.1e-3, 2.05e-3, 1.95e-3]
    cand = [1.0e-3, 1.0e-3, 1.0e-3, 1.0e-3, 1.0e-3, 1.1e-3]
    one = paired_speedup(base, cand, seed=7)
    assert one.estimate == pytest.approx(statistics.median(b / c for b, c in zip(base, cand)))
    assert one.low <= one.estimate <= one.high and one.samples == 6
    assert one == paired_speedup(base, cand, seed=7)  # same seed, same interval
    assert one.rel_half_width == pytest.approx((one.high - one.low) / 2 / one.estimate)


def test_a_drift_that_hits_both_members_of_a_pair_cancels():
    """The machine slows down 3x in the middle of the run: both sides of each pair slow alike, the ratio
    does not move, and the paired interval stays tight while each side's own interval widens."""
    drift = [1.0, 1.0, 3.0, 3.0, 1.0, 3.0, 1.0, 3.0]
    base = [2e-3 * d for d in drift]
    cand = [1e-3 * d for d in drift]
    paired = paired_speedup(base, cand, seed=1)
    assert paired.estimate == pytest.approx(2.0) and paired.rel_half_width == pytest.approx(0.0)
    assert median_interval(cand, seed=1).rel_half_width > 0.3


def test_median_interval_in_microseconds():
    iv = median_interval([1e-3, 1.1e-3, 0.9e-3, 1.05e-3, 0.95e-3], seed=3)
    assert iv.estimate == pytest.approx(1000.0) and 900.0 <= iv.low <= iv.estimate <= iv.high <= 1100.0


def test_paired_speedup_refuses_unpaired_or_empty_input():
    with pytest.raises(ValueError):
        paired_speedup([1.0], [1.0, 2.0], seed=0)
    with pytest.raises(ValueError):
        paired_speedup([], [], seed=0)


def test_bootstrap_seed_depends_on_secret_seed_and_case():
    a = bootstrap_seed("ab", 0, "level1/exp_1")
    assert a == bootstrap_seed("ab", 0, "level1/exp_1")
    assert len({a, bootstrap_seed("cd", 0, "level1/exp_1"), bootstrap_seed("ab", 1, "level1/exp_1"),
                bootstrap_seed("ab", 0, "level1/exp_2")}) == 4


@pytest.mark.parametrize("done, rel, target, expected", [
    (10, 0.01, 0.02, 10),  # already there
    (10, 0.04, 0.02, 40),  # half-width shrinks as 1/sqrt(n): 4x the sets for half the width
    (10, 0.03, 0.02, 23),
    (10, float("inf"), 0.02, 20),  # no estimate yet: double
])
def test_sets_needed(done, rel, target, expected):
    assert sets_needed(done, rel, target) == expected


STREAMED = {"prepare": 0.001, "warmup": 0.003, "flush": 0.003, "wait": 0.2, "calls": 0.003, "write": 0.0005,
            "total": 0.2095}


def test_a_streamed_batch_is_plausible_however_long_the_judge_held_it():
    assert implausible([0.001] * 3, STREAMED, 0.215, "cpu_clock", 0.012, busiest_s=0.012) is None


def test_each_handshake_may_cost_the_worker_cpu_inside_its_wait():
    """Recorded on this machine (gelu case 5, 56 streamed calls of ~0.2 ms): the worker's phases outside its wait
    came to 55.3 ms, its thread ran 66.0 ms; the handshakes cost 10.0 ms (0.18 ms each) in its wait. Before the
    allowance this honest batch failed as timing_implausible."""
    phases = {"prepare": 0.00767, "warmup": 0.00027, "flush": 0.01324, "wait": 0.38755, "calls": 0.01183,
              "write": 0.00887, "total": 0.42176, "guard": 0.01346}
    seconds = [0.01183 / 56] * 56
    assert implausible(seconds, phases, 0.4464, "cpu_clock", 0.0678, busiest_s=0.066, handshakes=56) is None
    why = implausible(seconds, phases, 0.4464, "cpu_clock", 0.0678, busiest_s=0.066, handshakes=0)
    assert why is not None and "its clock runs slow" in why
    # the allowance is the judge's count of handshakes, bounded: a clock slowed 2x still shows
    slowed = {k: v / 2 if k != "wait" else v for k, v in phases.items()}
    slowed["total"] = sum(slowed[k] for k in ("warmup", "flush", "wait", "calls", "write"))
    why = implausible([s / 2 for s in seconds], slowed, 0.4464, "cpu_clock", 0.0678, busiest_s=0.066,
                      handshakes=56)
    assert why is not None and "its clock runs slow" in why


def test_a_wait_shorter_than_the_judges_hold_is_a_slow_clock():
    """The judge holds a streamed worker from each "ready" to its "go" (0.36 s here, its own clock); that lies
    inside the worker's wait, so a clock slowed even only 10% shows there, however the CPU floor's slack is."""
    phases = {"prepare": 0.00767, "warmup": 0.00027, "flush": 0.01324, "wait": 0.38755, "calls": 0.01183,
              "write": 0.00887, "total": 0.42176, "guard": 0.01346}
    seconds = [0.01183 / 56] * 56
    assert implausible(seconds, phases, 0.4464, "cpu_clock", handshakes=56, held_s=0.3801) is None
    slowed = {k: v * 0.9 for k, v in phases.items()}
    why = implausible([s * 0.9 for s in seconds], slowed, 0.4464, "cpu_clock", handshakes=56, held_s=0.3801)
    assert why is not None and "who held it 380.10 ms" in why and "its clock runs slow" in why


# A fenced window on a quiet VM (softplus 6, 10 streamed calls): the worker accounts for 77.93 ms besides
# waiting, its busiest thread ran 97.03 ms: 1.1 ms of CPU per handshake, past the fixed 0.6 ms allowance.
QUIET = {"prepare": 0.005, "warmup": 0.01, "flush": 0.02, "wait": 0.23707, "calls": 0.02, "write": 0.01293,
         "total": 0.3, "guard": 0.01}


def test_the_handshake_allowance_follows_the_baseline_within_bounds():
    assert handshake_allowance(None) == HANDSHAKE_CPU_S  # no streamed baseline in the window: the fixed one
    assert handshake_allowance(float("nan")) == HANDSHAKE_CPU_S
    assert handshake_allowance(0.0) == HANDSHAKE_CPU_S  # never below the fixed allowance
    assert handshake_allowance(0.0009) == pytest.approx(HANDSHAKE_MARGIN * 0.0009)
    assert handshake_allowance(1.0) == HANDSHAKE_CAP_S  # nothing done to the machine buys more than the cap


def test_the_baseline_calibration_is_its_unaccounted_cpu_per_handshake():
    # the baseline worker's own batch in the same window: it accounts for 40 ms besides waiting, ran 51 ms
    phases = {"prepare": 0.004, "total": 0.236, "guard": 0.0, "wait": 0.2}
    assert unaccounted_per_handshake(phases, 0.051, 1, 0.051, 10) == pytest.approx(0.0011)
    assert unaccounted_per_handshake(phases, 0.030, 1, 0.030, 10) == 0.0  # less CPU than accounted: nothing
    assert unaccounted_per_handshake(phases, None, 1, None, 10) is None  # no /proc reading
    assert unaccounted_per_handshake(phases, 0.051, 1, 0.051, 0) is None  # no handshake to spread it over


def test_a_quiet_windows_costlier_handshakes_pass_when_the_baseline_shows_them():
    seconds = [0.002] * 10
    fixed = implausible(seconds, QUIET, 0.35, "cpu_clock", 0.09703, busiest_s=0.09703, handshakes=10,
                        held_s=0.2)
    assert fixed is not None and "accounts for 77.93 ms" in fixed and "allowed 13.85 ms" in fixed
    allowance = handshake_allowance(0.0011)  # the baseline's handshakes cost 1.1 ms each in that window
    assert implausible(seconds, QUIET, 0.35, "cpu_clock", 0.09703, busiest_s=0.09703, handshakes=10, held_s=0.2,
                       handshake_s=allowance) is None
    # a clock slowed 2x outside the waits is still caught at the largest allowance there is
    slowed = {k: v / 2 if k != "wait" else v for k, v in QUIET.items()}
    slowed["total"] = sum(slowed[k] for k in ("warmup", "flush", "wait", "calls", "write"))
    why = implausible([s / 2 for s in seconds], slowed, 0.35, "cpu_clock", 0.09703, busiest_s=0.09703,
                      handshakes=10, held_s=0.2, handshake_s=HANDSHAKE_CAP_S)
    assert why is not None and "its clock runs slow" in why


def test_claiming_a_longer_wait_cannot_hide_cpu_time():
    """A forged account moves call time into the wait (during which the worker is frozen): the CPU time the
    kernel charged to its threads no longer fits in what it says it did besides waiting."""
    forged = dict(STREAMED, wait=0.2 + 0.05, calls=0.0003, total=0.2095 + 0.05 - 0.0027)
    why = implausible([0.0001] * 3, forged, 0.3, "cpu_clock", 0.06, busiest_s=0.06)
    assert why is not None and "its clock runs slow" in why


def test_plan_batch_keeps_each_sets_writes_apart():
    import torch

    sets = [{"x": torch.zeros(10), "a": 1.0}, {"x": torch.ones(10), "a": 2.0}, {"x": torch.ones(3), "a": 3.0}]
    layout, writes = plan_batch(sets, [1, 2], 40)
    assert [len(w) for w in layout.set_writes] == [1, 1, 1]
    assert [off for w in layout.set_writes for _, off in w] == [off for _, off in writes]
    assert layout.set_writes[1][0][1] == layout.sets[1]["x"][1]["offset"]


def _outcome(case_id: int, t_base: float, t_cand: float, t_hw: float) -> dict:
    return {"key": f"level1/exp_{case_id}", "rel_path": "level1/exp", "operator": "Exp", "case_id": case_id,
            "status": "passed", "timing": {
                "measured": True, "t_cand_us": t_cand, "t_baseline_us": t_base, "t_hw_us": t_hw,
                "speedup": {"estimate": t_base / t_cand, "low": 0.9 * t_base / t_cand, "high": 1.1 * t_base / t_cand},
                "repeat": {"mode": "auto", "count": 14, "achieved": 0.018}, "flags": []}}


def test_the_board_carries_intervals_counts_and_degenerate_anchors():
    from pytest_cannbench.report.leaderboard import score_cases
    from pytest_cannbench.report.markdown import render

    board = score_cases([_outcome(1, 100.0, 50.0, 10.0), _outcome(2, 5.0, 20.0, 10.0)])
    one, _two = board["operators"][0]["cases"]
    assert one["timed_calls"] == 14 and one["precision"] == 0.018
    low, high = one["hap_interval"]
    assert low < one["hap"] < high
    assert board["degenerate_anchors"] == {"count": 1, "cases": ["level1/exp_2"]}
    text = render(board)
    assert "Speed-up [95% CI]" in text and "2x [1.8, 2.2]" in text and "±1.8%" in text
    assert "Degenerate anchors:** 1 case(s)" in text


def _bootstrap_by_hand(values: list[float], seed: int, resamples: int) -> list[float]:
    """The definition bootstrap_medians must match: Python's own resampling, one median at a time."""
    import random
    import statistics

    rng = random.Random(seed)
    return [statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 16, 33, 64])
@pytest.mark.parametrize("seed", [0, 7, 2**63 + 12345])
def test_bootstrap_medians_are_pythons_resampling_bit_for_bit(n: int, seed: int) -> None:
    import random

    from pytest_cannbench.timing.stats import bootstrap_medians

    values = [random.Random(n * 1000 + i).lognormvariate(0, 0.3) * 1e-4 for i in range(n)]
    values[0] = values[-1]  # ties, as equal timings give
    assert bootstrap_medians(values, seed, 300) == _bootstrap_by_hand(values, seed, 300)

"""The CUDA timer's per-call time from the profiler's intervals (``timing.in_worker.device_span_us``).

The intervals are in the profiler's microseconds (large epoch-based values, as Kineto records them): the call's
window is the ``cannbench_call_<i>`` range on the host, the kernels are device intervals on any stream."""

from __future__ import annotations

import pytest

from pytest_cannbench.timing.in_worker import device_span_us

T0 = 1_733_324_400_000_000  # a Kineto timestamp, us


def test_one_kernel_costs_from_the_call_start_to_its_end():
    # launched 6 us into the call, ran 40 us, then the synchronise returned 9 us later
    assert device_span_us((T0, T0 + 55), [(T0 + 6, T0 + 46)]) == 46


def test_host_work_between_launches_counts_where_a_kernel_union_would_not():
    # a 2 ms loop on the host, then a 30 us copy of its result to the card: the union would say 30 us
    kernels = [(T0 + 2_000, T0 + 2_030)]
    assert device_span_us((T0, T0 + 2_040), kernels) == 2_030


def test_side_streams_count_once_and_to_their_last_kernel():
    main, side = (T0 + 5, T0 + 105), (T0 + 8, T0 + 308)  # concurrent: the side stream ends last
    assert device_span_us((T0, T0 + 320), [main, side]) == 308


def test_kernels_of_other_calls_and_of_the_flush_are_left_out():
    flush_before, next_call = (T0 - 400, T0 - 10), (T0 + 900, T0 + 950)
    assert device_span_us((T0, T0 + 120), [flush_before, (T0 + 4, T0 + 100), next_call]) == 100


def test_a_call_that_launched_nothing_costs_its_window():
    assert device_span_us((T0, T0 + 75), []) == 75


@pytest.mark.parametrize("late", [0, 1, 50])
def test_a_kernel_started_inside_the_window_counts_to_its_end_even_after_the_window(late):
    # the window ends at the host's synchronise; a kernel's end is never later in practice, but the rule is the
    # kernel's own end, not the window's
    assert device_span_us((T0, T0 + 100), [(T0 + 10, T0 + 100 + late)]) == 100 + late


def test_a_card_batch_accounts_for_the_time_it_waited_for_the_judge():
    """Seen on an H200: every streamed CUDA batch was refused as "0.00 ms of waiting for the judge, who held it
    80 ms" (timing_implausible): the device timers left the wait phase out of their account."""
    from pytest_cannbench.timing.in_worker import BatchTimes, with_waits
    from pytest_cannbench.timing.stats import implausible

    def batch(waits):
        out = BatchTimes()
        out.phases.update(warmup=0.01, total=0.40)
        out.seconds = [2e-5] * 10
        out.timer = "cuda_profiler"
        return with_waits(out, waits) if waits is not None else out

    held = 0.30  # the judge's own clock: how long it held the worker between the calls
    honest = batch([0.03] * 10)
    assert honest.phases["wait"] == pytest.approx(0.30)
    assert implausible(honest.seconds, honest.phases, wall_s=0.45, timer=honest.timer, held_s=held) is None
    before = batch(None)
    assert "of waiting for the judge" in implausible(before.seconds, before.phases, wall_s=0.45, timer=before.timer,
                                                     held_s=held)


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU; none here")
def test_a_streamed_cuda_batch_records_its_waits():
    import time

    import torch

    from pytest_cannbench.timing.in_worker import run_batch

    waits: list[float] = []
    sets = [{"x": torch.randn(1 << 16, device="cuda")} for _ in range(4)]

    def fetch(i):
        t0 = time.perf_counter()
        time.sleep(0.01)  # the judge writing set i
        waits.append(time.perf_counter() - t0)
        return sets[i]

    out = run_batch(lambda x: x * 2, sets[0], fetch, 4, 1, "cuda:0", time.perf_counter, None, lambda i, r: None,
                    waits=waits)
    assert out.timer in ("cuda_profiler", "cuda_events") and out.phases["wait"] >= 0.04

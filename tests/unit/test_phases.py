"""The phase clock (pytest_cannbench.phases): sums of wall and CPU, peaks as maxima, the high-water reset."""

from __future__ import annotations

import time

from pytest_cannbench.phases import PhaseClock, peak_mib, reset_peak


def test_phases_add_up_over_passes_and_keep_the_largest_peak() -> None:
    clock = PhaseClock()
    clock.add("compare", 1.0, 0.5, 100.0)
    clock.add("compare", 2.0, 1.5, 50.0)
    clock.merge({"compare": 0.5, "compare_peak_mib": 300.0, "golden": 4.0, "junk": "x", "flag": True})
    assert clock.seconds == {"compare": 3.5, "compare_cpu": 2.0, "compare_peak_mib": 300.0, "golden": 4.0}


def test_a_phase_records_wall_cpu_and_this_process_peak() -> None:
    clock = PhaseClock()
    with clock.phase("work"):
        block = bytearray(64 << 20)  # 64 MiB touched: the phase's peak is at least that
        for i in range(0, len(block), 4096):
            block[i] = 1
        end = time.process_time() + 0.05
        while time.process_time() < end:
            pass
    del block
    assert clock.seconds["work"] >= clock.seconds["work_cpu"] * 0.5 > 0
    if reset_peak():  # /proc/self/clear_refs is writable on this kernel
        assert clock.seconds["work_peak_mib"] >= 64
        reset_peak()
        assert (peak_mib() or 0) < clock.seconds["work_peak_mib"]


def test_a_phase_that_raises_is_still_recorded() -> None:
    clock = PhaseClock()
    try:
        with clock.phase("golden"):
            raise ValueError("boom")
    except ValueError:
        pass
    assert "golden" in clock.seconds and "golden_cpu" in clock.seconds


def test_a_part_inside_a_phase_keeps_the_phase_peak() -> None:
    """A part (timing's sub-phases) records wall and CPU only: resetting the high-water mark inside the enclosing
    phase would hide what the phase touched before the part began."""
    clock = PhaseClock()
    with clock.phase("timing"):
        block = bytearray(64 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        del block
        with clock.part("timing_sets"):
            end = time.process_time() + 0.02
            while time.process_time() < end:
                pass
    assert set(clock.seconds) >= {"timing_sets", "timing_sets_cpu"} and "timing_sets_peak_mib" not in clock.seconds
    assert clock.seconds["timing"] >= clock.seconds["timing_sets"] > 0
    if reset_peak():
        assert clock.seconds["timing_peak_mib"] >= 64

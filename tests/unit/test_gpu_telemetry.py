"""GPU telemetry (timing/gpu_telemetry.py): nvidia-smi's CSV, the throttle rule, and 'unavailable' without a GPU."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from pytest_cannbench.timing import gpu_telemetry as gt
from pytest_cannbench.timing.gpu_telemetry import GpuReading, Telemetry, parse_smi, throttled, window_throttled

# What `nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit,
# clocks_throttle_reasons.active --format=csv,noheader,nounits` prints (no -i: every card, one line each).
EIGHT_H100_BUSY_AND_IDLE = """\
1980, 1980, 2619, 47, 512.36, 700.00, 0x0000000000000000
345, 1980, 2619, 31, 71.02, 700.00, 0x0000000000000001
1755, 1980, 2619, 58, 699.87, 700.00, 0x0000000000000004
1410, 1980, 2619, 87, 402.10, 700.00, 0x0000000000000060
1980, 1980, 2619, 45, 480.00, 700.00, 0x0000000000000000
1980, 1980, 2619, 44, 470.55, 700.00, 0x0000000000000000
1980, 1980, 2619, 46, 505.91, 700.00, 0x0000000000000000
990, 1980, 2619, 52, 300.00, 700.00, 0x0000000000000008
"""
# a consumer card without power readings, an old driver without throttle reasons
UNSUPPORTED = "1695, 2100, 7000, 61, [N/A], [N/A], [Not Supported]\n"
OLD_DRIVER = "1380, 1530, 877, 38, 41.08, 250.00, N/A\n"


def test_parse_every_card_and_the_hex_bitmask():
    cards = parse_smi(EIGHT_H100_BUSY_AND_IDLE)
    assert len(cards) == 8
    assert cards[0] == GpuReading(1980, 1980, 2619, 47, 512.36, 700.0, 0, "nvidia-smi")
    assert cards[1].reasons == gt.REASON_GPU_IDLE and cards[1].sm_mhz == 345
    assert cards[2].reasons == gt.REASON_SW_POWER_CAP
    assert cards[3].reasons == gt.REASON_SW_THERMAL | gt.REASON_HW_THERMAL
    assert cards[7].reasons == gt.REASON_HW_SLOWDOWN


def test_not_available_fields_are_none():
    (card,) = parse_smi(UNSUPPORTED)
    assert (card.sm_mhz, card.sm_max_mhz, card.power_w, card.power_limit_w, card.reasons) == (
        1695, 2100, None, None, None)
    (old,) = parse_smi(OLD_DRIVER)
    assert old.reasons is None and old.power_limit_w == 250.0


def test_lines_of_the_wrong_shape_are_skipped():
    assert parse_smi("") == []
    assert parse_smi("No devices were found\n") == []
    assert len(parse_smi("garbage\n" + OLD_DRIVER + "1, 2\n")) == 1


def test_the_throttle_rule():
    cards = parse_smi(EIGHT_H100_BUSY_AND_IDLE)
    busy, idle, power, thermal, steady, _, _, slowdown = cards
    assert throttled(busy, steady) is None
    assert throttled(idle, busy) is None  # the window started on an idle card that then boosted
    assert throttled(busy, idle) is None  # read just after the window, the card is idle again: not a throttle
    assert "sw_power_cap" in str(throttled(busy, power))
    assert "sw_thermal+hw_thermal" in str(throttled(thermal, busy))
    assert "hw_slowdown" in str(throttled(busy, slowdown))
    # no reason reported, but the clock fell by more than 50 MHz during the window
    drop = GpuReading(sm_mhz=1920, sm_max_mhz=1980, reasons=0)
    assert "fell from 1980 to 1920" in str(throttled(busy, drop))
    assert throttled(busy, GpuReading(sm_mhz=1931, sm_max_mhz=1980, reasons=0)) is None  # within 50 MHz
    # a busy card far below its maximum with no reason reported (an old driver)
    low = GpuReading(sm_mhz=900, sm_max_mhz=1980)
    assert "below 0.5 of its maximum" in str(throttled(low, low))
    # locked at a data-centre base clock: not flagged
    base = GpuReading(sm_mhz=1095, sm_max_mhz=1410, reasons=gt.REASON_APPLICATIONS_CLOCKS)
    assert throttled(base, base) is None


def test_missing_readings_never_flag():
    (card,) = parse_smi(UNSUPPORTED)
    assert throttled(card, card) is None
    assert throttled(None, None) is None
    assert throttled(GpuReading(), GpuReading()) is None
    assert window_throttled({"start": {"unavailable": "no NVML"}, "end": {"unavailable": "no NVML"}}) is None
    hot = parse_smi(EIGHT_H100_BUSY_AND_IDLE)[3].to_dict()
    assert window_throttled({"start": hot, "end": {"unavailable": "nvidia-smi timed out"}})


def test_unavailable_says_why_and_never_raises(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    monkeypatch.setattr(gt.shutil, "which", lambda name: None)
    t = Telemetry()
    first = t.read(0)
    assert "unavailable" in first and "nvidia-smi: not on PATH" in first["unavailable"]
    assert "NVML" in first["unavailable"]
    assert t.read(3) == first  # probed once


def test_nvidia_smi_backend(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(gt.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    seen = []

    def run(argv, **kwargs):
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout=EIGHT_H100_BUSY_AND_IDLE.splitlines()[2] + "\n")

    monkeypatch.setattr(gt.subprocess, "run", run)
    reading = Telemetry().read(2)
    assert reading["source"] == "nvidia-smi" and reading["reasons"] == 4 and reading["power_w"] == 699.87
    assert seen[0][-2:] == ["-i", "2"] and "clocks_throttle_reasons.active" in seen[0][1]

    def fail(argv, **kwargs):
        raise subprocess.CalledProcessError(9, argv, "No devices were found")

    monkeypatch.setattr(gt.subprocess, "run", fail)
    assert "CalledProcessError" in Telemetry().read(0)["unavailable"]


def test_nvml_backend(monkeypatch):
    fake = types.SimpleNamespace(
        NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0, nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetClockInfo=lambda h, c: {1: 1755, 2: 2619}[c],
        nvmlDeviceGetMaxClockInfo=lambda h, c: 1980,
        nvmlDeviceGetTemperature=lambda h, s: 66,
        nvmlDeviceGetPowerUsage=lambda h: 654321,  # milliwatts
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x4)

    def unsupported(h):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    fake.nvmlDeviceGetEnforcedPowerLimit = unsupported
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    reading = Telemetry().read(0)
    assert reading == {"sm_mhz": 1755.0, "sm_max_mhz": 1980.0, "mem_mhz": 2619.0, "temp_c": 66.0,
                       "power_w": pytest.approx(654.321), "power_limit_w": None, "reasons": 4, "source": "nvml"}


def test_the_leaderboard_sums_up_a_cases_gpu_readings():
    from pytest_cannbench.report.leaderboard import _gpu

    busy, _, power = parse_smi(EIGHT_H100_BUSY_AND_IDLE)[:3]
    timing = {"gpu": [{"start": busy.to_dict(), "end": power.to_dict()},
                      {"start": busy.to_dict(), "end": {"unavailable": "nvidia-smi timed out"}}],
              "flags": ["gpu_throttled"], "cuda_graph": {"mode": "auto", "used": True}}
    assert _gpu(timing) == {"sm_mhz_min": 1755.0, "temp_c_max": 58.0, "power_w_max": 699.87,
                            "gpu_throttled": True, "cuda_graph": True}
    assert _gpu({"load": []}) is None  # not CUDA


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="GPU telemetry needs a GPU; none here")
def test_a_real_card_is_read():
    reading = Telemetry().read(0)
    assert "unavailable" not in reading, reading
    assert reading["sm_mhz"] and reading["sm_max_mhz"] and reading["sm_mhz"] <= reading["sm_max_mhz"] + 1

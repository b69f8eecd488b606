"""Unit tests for roofline.py: the T_HW formula, the per-machine cache and one real calibration.

Only ``test_calibration_is_plausible`` spawns the measuring child (about 2-3 s); the cache tests
replace :func:`roofline.calibrate` with a counting fake, so they test the key logic, not timing.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import threading
import time
from pathlib import Path

import pytest

from pytest_cannbench.timing import roofline
from pytest_cannbench.timing.roofline import CalibrationError, MachineLimits, cached_limits, calibrate, t_hw_us

LIMITS = MachineLimits(bandwidth_gbs=100.0, peak_gflops=1000.0, key={"device": "cpu"}, measured_at="2026-01-01")


@pytest.mark.parametrize("nbytes, flops, expected", [
    (1e9, None, 1e4),  # 1 GB at 100 GB/s = 10 ms
    (1e9, 0, 1e4),
    (1e9, 1e9, 1e4),  # memory-bound: 10 ms vs 1 ms of compute
    (1e6, 1e10, 1e4),  # compute-bound: 1e10 flop at 1 TFLOP/s = 10 ms
    (1e3, 1e3, 1.0),  # 10 ns -> the 1 us floor
    (0, None, 1.0),
    (None, None, 1.0),
    (2e5, None, 2.0),
])
def test_t_hw_us(nbytes, flops, expected: float) -> None:
    assert t_hw_us(nbytes, flops, LIMITS) == pytest.approx(expected)


def test_t_hw_us_floor_is_configurable_and_inputs_checked() -> None:
    assert t_hw_us(1e3, None, LIMITS, floor_us=0.0) == pytest.approx(0.01)
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            t_hw_us(bad, None, LIMITS)
        with pytest.raises(ValueError):
            t_hw_us(0.0, bad, LIMITS)


def test_limits_json_round_trip_and_describe() -> None:
    limits = MachineLimits(12.34, 187.6, {"device": "cpu", "device_name": "Some CPU", "threads": 1},
                           "2026-11-29T22:00:00+00:00", {"matmul_n": 1024})
    again = MachineLimits.from_json(json.loads(json.dumps(limits.to_json())))
    assert again == limits and not again.cached
    line = limits.describe()
    assert "12.3 GB/s" in line and "188 GFLOP/s" in line and "Some CPU" in line and "1 thread)" in line
    assert "\n" not in line and "(cached)" not in line


@pytest.mark.parametrize("data", [
    None,
    [],
    {"bandwidth_gbs": 1.0, "peak_gflops": 1.0, "key": {}},  # no measured_at
    {"bandwidth_gbs": 0, "peak_gflops": 1.0, "key": {}, "measured_at": "x"},
    {"bandwidth_gbs": -3.0, "peak_gflops": 1.0, "key": {}, "measured_at": "x"},
    {"bandwidth_gbs": True, "peak_gflops": 1.0, "key": {}, "measured_at": "x"},
    {"bandwidth_gbs": 1.0, "peak_gflops": "1", "key": {}, "measured_at": "x"},
    {"bandwidth_gbs": 1.0, "peak_gflops": math.inf, "key": {}, "measured_at": "x"},
    {"bandwidth_gbs": 1.0, "peak_gflops": 1.0, "key": [], "measured_at": "x"},
])
def test_limits_from_json_rejects(data) -> None:
    with pytest.raises(ValueError):
        MachineLimits.from_json(data)


@pytest.mark.parametrize("device, threads", [("tpu", 1), ("cuda:x", 1), ("cpu", 0), ("cpu", True), ("cpu", 1.5)])
def test_calibrate_rejects_bad_arguments(device, threads) -> None:
    with pytest.raises(ValueError):
        calibrate(device, threads)
    with pytest.raises(ValueError):
        cached_limits(Path("/nonexistent"), device, threads)


# --------------------------------------------------------------------------------------------
# the cache, with a fake calibration


class FakeCalibration:
    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[tuple[str, int]] = []
        self.delay = delay
        self.lock = threading.Lock()

    def __call__(self, device: str = "cpu", threads: int = 1, timeout_s: float = 0) -> MachineLimits:
        with self.lock:
            self.calls.append((device, threads))
            n = len(self.calls)
        time.sleep(self.delay)
        return MachineLimits(10.0 * n, 100.0 * n, roofline.machine_key(device, threads),
                             dt.datetime.now(dt.timezone.utc).isoformat())


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeCalibration:
    calibration = FakeCalibration()
    monkeypatch.setattr(roofline, "calibrate", calibration)
    monkeypatch.setattr(roofline, "cpu_model", lambda: "Test CPU A")
    monkeypatch.setattr(roofline, "_torch_version", lambda: "2.13.0")
    return calibration


def test_cache_hit_does_not_recalibrate(tmp_path: Path, fake: FakeCalibration) -> None:
    first = cached_limits(tmp_path / "cache", "cpu", 1)
    assert len(fake.calls) == 1 and not first.cached
    second = cached_limits(tmp_path / "cache", "cpu", 1)
    assert len(fake.calls) == 1 and second.cached
    assert (second.bandwidth_gbs, second.peak_gflops, second.key) == (first.bandwidth_gbs, first.peak_gflops,
                                                                        first.key)
    assert "(cached)" in second.describe()
    files = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert [f for f in files if f.endswith(".json")] == [f for f in files if f.startswith("roofline-")]
    assert not [f for f in files if f.endswith(".tmp")]  # the atomic write left nothing behind
    stored = json.loads(next((tmp_path / "cache").glob("roofline-*.json")).read_text())
    assert stored["key"]["cpu_model"] == "Test CPU A" and stored["bandwidth_gbs"] == 10.0


@pytest.mark.parametrize("change", ["cpu_model", "torch", "threads", "cpus", "method"])
def test_cache_recalibrates_when_the_key_changes(tmp_path: Path, fake: FakeCalibration,
                                                 monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    cached_limits(tmp_path, "cpu", 1)
    threads = 1
    if change == "cpu_model":
        monkeypatch.setattr(roofline, "cpu_model", lambda: "Test CPU B")
    elif change == "torch":
        monkeypatch.setattr(roofline, "_torch_version", lambda: "2.14.0")
    elif change == "threads":
        threads = 2
    elif change == "cpus":
        monkeypatch.setattr(roofline.os, "cpu_count", lambda: 512)
    elif change == "method":
        monkeypatch.setattr(roofline, "METHOD_VERSION", roofline.METHOD_VERSION + 1)
    fresh = cached_limits(tmp_path, "cpu", threads)
    assert len(fake.calls) == 2 and not fresh.cached and fresh.bandwidth_gbs == 20.0
    assert cached_limits(tmp_path, "cpu", threads).cached  # the new key is cached in turn
    assert len(fake.calls) == 2


@pytest.mark.parametrize("damage", ["garbage", "empty", "wrong key", "zero bandwidth"])
def test_damaged_cache_entry_recalibrates(tmp_path: Path, fake: FakeCalibration, damage: str) -> None:
    cached_limits(tmp_path, "cpu", 1)
    path = next(tmp_path.glob("roofline-*.json"))
    data = json.loads(path.read_text())
    if damage == "garbage":
        path.write_text("{not json")
    elif damage == "empty":
        path.write_text("")
    elif damage == "wrong key":  # a hand-copied file from another machine
        data["key"]["cpu_model"] = "Other CPU"
        path.write_text(json.dumps(data))
    else:
        data["bandwidth_gbs"] = 0
        path.write_text(json.dumps(data))
    assert not cached_limits(tmp_path, "cpu", 1).cached
    assert len(fake.calls) == 2
    assert cached_limits(tmp_path, "cpu", 1).cached


def test_recalibrate_forces_a_measurement(tmp_path: Path, fake: FakeCalibration) -> None:
    cached_limits(tmp_path, "cpu", 1)
    assert not cached_limits(tmp_path, "cpu", 1, recalibrate=True).cached
    assert cached_limits(tmp_path, "cpu", 1).bandwidth_gbs == 20.0  # the forced result replaced the entry
    assert len(fake.calls) == 2


def test_parallel_callers_calibrate_once(tmp_path: Path, fake: FakeCalibration) -> None:
    fake.delay = 0.3
    results: list[MachineLimits] = []
    threads = [threading.Thread(target=lambda: results.append(cached_limits(tmp_path, "cpu", 1))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(results) == 3 and len(fake.calls) == 1
    assert sorted(r.cached for r in results) == [False, True, True]


def test_unwritable_cache_still_returns_limits(tmp_path: Path, fake: FakeCalibration) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    limits = cached_limits(blocker / "cache", "cpu", 1)
    assert limits.bandwidth_gbs == 10.0 and len(fake.calls) == 1


# --------------------------------------------------------------------------------------------
# the calibration child


@pytest.mark.parametrize("returncode, stdout, stderr, problem", [
    (1, "", "Traceback ...\nImportError: no torch", "failed (exit 1): Traceback ... | ImportError: no torch"),
    (0, "hello\n", "", "failed (exit 0)"),
    (0, "{broken\n", "", "printed no usable result"),
    (0, '{"bandwidth_gbs": 1.0}\n', "", "printed no usable result"),
    (0, '{"bandwidth_gbs": -1.0, "peak_gflops": 5.0}\n', "", "measured -1.0 GB/s"),
])
def test_calibration_child_failures(monkeypatch: pytest.MonkeyPatch, returncode, stdout, stderr, problem) -> None:
    def run(command, **kwargs):
        return subprocess.CompletedProcess(command, returncode, stdout, stderr)

    monkeypatch.setattr(roofline.subprocess, "run", run)
    with pytest.raises(CalibrationError) as info:
        calibrate("cpu", 1)
    assert problem in str(info.value)


def test_calibration_child_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs.get("timeout"))

    monkeypatch.setattr(roofline.subprocess, "run", run)
    with pytest.raises(CalibrationError, match="took more than 7 s"):
        calibrate("cpu", 1, timeout_s=7)


def test_calibration_is_plausible() -> None:
    """The one real measurement of this module: a fresh child, 1 thread, a few seconds."""
    start = time.perf_counter()
    limits = calibrate("cpu", 1)
    elapsed = time.perf_counter() - start
    assert 0.5 <= limits.bandwidth_gbs <= 2000, limits
    assert 1 <= limits.peak_gflops <= 1e6, limits
    assert limits.key == roofline.machine_key("cpu", 1)
    assert limits.details["threads"] == 1 and limits.details["buffer_mib"] >= 64
    assert dt.datetime.fromisoformat(limits.measured_at).tzinfo is not None
    assert elapsed < 60, f"calibration took {elapsed:.1f} s"
    # a 64 MiB copy can never beat the measured bandwidth's roofline
    assert t_hw_us(2 * 64 * 2 ** 20, None, limits) > 1.0


@pytest.mark.cuda
def test_cuda_calibration() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    limits = calibrate("cuda", 1)
    assert 50 <= limits.bandwidth_gbs <= 20000, limits
    assert 100 <= limits.peak_gflops <= 1e6, limits
    assert limits.details["gpu"]


def test_a_working_set_the_flush_leaves_in_cache_gets_the_bandwidth_it_reached() -> None:
    """Calibrated: 100 GB/s for large buffers, 400 GB/s for 16 MiB sets after the flush (cache-resident).
    A set of 8 MiB or less may go as fast as the 16 MiB one; a 1 GiB set only as fast as memory."""
    from dataclasses import replace

    from pytest_cannbench.timing.roofline import bandwidth_for

    limits = replace(LIMITS, details={"bandwidth_by_bytes": [[16.0 * 2**20, 400.0], [64.0 * 2**20, 90.0],
                                                             ["bad", 1e9], [1.0, -1.0]]})
    assert bandwidth_for(8 * 2**20, limits) == 400.0 and bandwidth_for(2**10, limits) == 400.0
    assert bandwidth_for(2**30, limits) == 100.0
    assert t_hw_us(16e6, None, limits) == pytest.approx(40.0)  # 16e6 B / 400 GB/s
    assert t_hw_us(16e6, None, LIMITS) == pytest.approx(160.0)  # without the table: main memory only


# --------------------------------------------------------------------------------------------
# best of several calibrations (issue 20: a calibration taken under load made honest baselines beat T_HW)


def _limits(bandwidth: float, peak: float, table: list[list[float]], under_load: str | None,
            threads: int = 1) -> MachineLimits:
    details = {"bandwidth_by_bytes": table, "under_load": under_load, "calibrations": 1,
               "quiet_calibrations": 0 if under_load else 1}
    return MachineLimits(bandwidth, peak, roofline.machine_key("cpu", threads), "2026-12-02T20:00:00+00:00", details)


def test_merged_keeps_the_highest_figure_of_each_limit_and_size() -> None:
    quiet = _limits(29.5, 86.6, [[16384.0, 1.7], [4194304.0, 29.2]], None)
    loaded = _limits(9.2, 24.1, [[16384.0, 2.5], [4194304.0, 0.7], [67108864.0, 36.3]], "load average 9.18")
    both = roofline.merged(loaded, quiet)
    assert (both.bandwidth_gbs, both.peak_gflops) == (29.5, 86.6)
    assert both.details["bandwidth_by_bytes"] == [[16384.0, 2.5], [4194304.0, 29.2], [67108864.0, 36.3]]
    assert both.details["calibrations"] == 2 and both.details["quiet_calibrations"] == 1
    assert both.details["under_load"] is None  # one quiet calibration is enough to trust the entry
    assert roofline.bandwidth_for(4 << 20, both) == 36.3  # any size from a quarter up bounds the case
    assert t_hw_us(4 << 20, None, both) < t_hw_us(4 << 20, None, _limits(9.2, 24.1, [[4194304.0, 0.7]], "load"))
    assert "best of 2 calibrations" in both.describe() and "UNDER LOAD" not in both.describe()
    assert "MEASURED UNDER LOAD (load average 9.18)" in loaded.describe()


def test_an_entry_measured_under_load_is_measured_again_once_quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    runs = [_limits(9.2, 24.1, [[16384.0, 0.6]], "load average 9.18"), _limits(29.5, 86.6, [[16384.0, 1.7]], None)]
    calls: list[int] = []

    def calibration(device: str = "cpu", threads: int = 1, timeout_s: float = 0) -> MachineLimits:
        calls.append(threads)
        return runs[len(calls) - 1]

    monkeypatch.setattr(roofline, "calibrate", calibration)
    monkeypatch.setattr(roofline, "load_sample", lambda: {"loadavg1": 9.0, "cpu_some_avg10": 60.0})
    first = cached_limits(tmp_path, "cpu", 1)
    assert first.details["under_load"] and cached_limits(tmp_path, "cpu", 1).cached  # still loaded: kept
    assert len(calls) == 1
    monkeypatch.setattr(roofline, "load_sample", lambda: {"loadavg1": 0.1, "cpu_some_avg10": 0.0})
    again = cached_limits(tmp_path, "cpu", 1)
    assert len(calls) == 2 and not again.cached and again.bandwidth_gbs == 29.5
    assert again.details["under_load"] is None and again.details["calibrations"] == 2
    assert cached_limits(tmp_path, "cpu", 1).cached and len(calls) == 2  # quiet now: read as it is


def test_more_threads_never_get_lower_limits_than_fewer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {1: _limits(29.5, 86.6, [[4194304.0, 29.2]], None, 1),
            2: _limits(9.2, 24.1, [[4194304.0, 0.7]], "load average 9.18", 2)}
    monkeypatch.setattr(roofline, "calibrate", lambda device="cpu", threads=1, timeout_s=0: runs[threads])
    monkeypatch.setattr(roofline, "load_sample", lambda: {"loadavg1": 9.0, "cpu_some_avg10": 60.0})
    one = cached_limits(tmp_path, "cpu", 1)
    two = cached_limits(tmp_path, "cpu", 2)
    assert two.key["threads"] == 2 and (two.bandwidth_gbs, two.peak_gflops) == (29.5, 86.6)
    assert two.details["bandwidth_by_bytes"] == [[4194304.0, 29.2]]
    assert cached_limits(tmp_path, "cpu", 1).bandwidth_gbs == one.bandwidth_gbs  # fewer threads: never more


def test_a_failed_calibration_is_said_once_and_never_ends_the_session(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen on an H200 (torch 2.11): the calibration child failed, and the header's exception ended the session
    as an INTERNALERROR. Now the header says why, and later cases get the same error without measuring again."""
    from pytest_cannbench.timing.anchors import roofline_line
    from pytest_cannbench.timing.devices import DevicePlan

    calls: list[str] = []

    def failing(device: str = "cpu", threads: int = 1, timeout_s: float = 0) -> MachineLimits:
        calls.append(device)
        raise CalibrationError(f"roofline calibration on {device} failed (exit 1): ValueError: no index")

    monkeypatch.setattr(roofline, "calibrate", failing)
    monkeypatch.setattr(roofline, "_FAILED", {})
    line = roofline_line(tmp_path, DevicePlan("cuda", 0), 1)
    assert line.startswith("cannbench: T_HW UNAVAILABLE") and "no index" in line
    with pytest.raises(CalibrationError, match="no index"):
        cached_limits(tmp_path, "cuda", 1)
    assert calls == ["cuda"]
    assert not list(tmp_path.glob("*.json")), "a failure is not cached on disk: the next session measures again"


def test_the_calibration_child_addresses_its_card_by_index() -> None:
    from pytest_cannbench.timing.calibrate import indexed

    assert indexed("cuda") == "cuda:0" and indexed("cuda:1") == "cuda:1" and indexed("cpu") == "cpu"

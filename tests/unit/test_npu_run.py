"""npu_run: the profiler output lookup, the export wait and the profiler runner (with a fake torch_npu).

The fake export copies a fixture from ``fixtures/npu_profiles`` (secret shape ``96,1024,10477``).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from pytest_cannbench.timing import npu_run
from pytest_cannbench.timing.npu_parse import ProfileParseError, parse_kernel_details
from pytest_cannbench.timing.npu_run import (
    ProfileExportTimeout,
    clean_profiler_dir,
    find_kernel_details,
    wait_for_kernel_details,
)

PROFILES = Path(__file__).parents[1] / "fixtures" / "npu_profiles"
SECRET = "96,1024,10477"
SECRETS = {SECRET}
CLEAN_TOTALS = [12.34 + 3.02, 12.30 + 3.00, 12.41 + 3.05, 12.28 + 2.98, 12.35 + 3.01]


def approx(values):
    return pytest.approx(values, abs=1e-9)


# --------------------------------------------------------------------------------------------
# output directories


def export(root: Path, worker: str = "host_4242_20260101010101", name: str = "kernel_details.csv") -> Path:
    path = root / f"{worker}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x\n")
    return path


def test_find_canonical(tmp_path: Path) -> None:
    assert find_kernel_details(tmp_path / "absent") is None
    assert find_kernel_details(tmp_path) is None
    export(tmp_path, name="op_statistic.csv")
    assert find_kernel_details(tmp_path) is None
    path = export(tmp_path)
    assert find_kernel_details(tmp_path) == path
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / "kernel_details.csv").write_text("x\n")
    assert find_kernel_details(tmp_path) == path  # the canonical location wins


@pytest.mark.parametrize("where", ["kernel_details.csv", "a/kernel_details.csv", "a/b/c/kernel_details.csv"])
def test_find_fallback(tmp_path: Path, where: str) -> None:
    (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / where).write_text("x\n")
    assert find_kernel_details(tmp_path) == tmp_path / where


def test_find_ambiguous(tmp_path: Path) -> None:
    export(tmp_path, "host_1_a")
    export(tmp_path, "host_1_b")
    with pytest.raises(ProfileParseError, match=r"2 kernel_details\.csv .*runs are mixed"):
        find_kernel_details(tmp_path)
    other = tmp_path / "other"
    for sub in ("x", "y"):
        (other / sub).mkdir(parents=True)
        (other / sub / "kernel_details.csv").write_text("x\n")
    with pytest.raises(ProfileParseError, match="runs are mixed"):
        find_kernel_details(other)


def test_clean_profiler_dir(tmp_path: Path) -> None:
    run = tmp_path / "prof" / "case_1"
    assert clean_profiler_dir(run) == run.resolve() and run.is_dir()
    stale = export(run)
    (run / "note.txt").write_text("old")
    clean_profiler_dir(run)
    assert run.is_dir() and not stale.exists() and list(run.iterdir()) == []


def test_clean_profiler_dir_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for bad in (tmp_path, tmp_path.parent, Path("/"), Path.home()):
        with pytest.raises(ValueError, match="not a per-run profiler directory"):
            clean_profiler_dir(bad)
    (tmp_path / "file").write_text("keep")
    with pytest.raises(ValueError, match="not a directory"):
        clean_profiler_dir(tmp_path / "file")
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "keep").write_text("keep")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ValueError, match="symlink"):
        clean_profiler_dir(tmp_path / "link")
    assert (tmp_path / "real" / "keep").exists() and (tmp_path / "file").exists()


def test_wait_for_late_export(tmp_path: Path) -> None:
    def write_later() -> None:
        time.sleep(0.15)
        path = tmp_path / "w_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
        path.parent.mkdir(parents=True)
        path.write_text((PROFILES / "clean_5steps.csv").read_text())
    thread = threading.Thread(target=write_later)
    thread.start()
    try:
        path = wait_for_kernel_details(tmp_path, timeout_s=5, poll_s=0.02)
    finally:
        thread.join()
    assert parse_kernel_details(path, SECRETS, 5).step_us == approx(CLEAN_TOTALS)


@pytest.mark.parametrize("content", [None, ""])
def test_wait_times_out(tmp_path: Path, content) -> None:
    if content is not None:
        export(tmp_path).write_text(content)  # an empty file is never complete
    start = time.monotonic()
    with pytest.raises(ProfileExportTimeout, match=r"no complete kernel_details\.csv"):
        wait_for_kernel_details(tmp_path, timeout_s=0.2, poll_s=0.02)
    assert time.monotonic() - start < 3
    assert issubclass(ProfileExportTimeout, ProfileParseError)


# --------------------------------------------------------------------------------------------
# the runner, against a fake torch_npu


def fake_torch_npu(events: list, csv_source: Path, *, with_metrics_off: bool = True) -> types.ModuleType:
    """Just the torch_npu.profiler surface profile_steps uses; the export copies a fixture file."""
    recorded: dict = {}

    class Profile:
        def __init__(self, **kwargs) -> None:
            recorded["profile"] = kwargs
            self.active = kwargs["schedule"]["active"]
            self.steps = 0

        def __enter__(self):
            events.append("enter")
            return self

        def __exit__(self, *exc) -> None:
            events.append("exit")

        def step(self) -> None:
            events.append("step")
            self.steps += 1
            if self.steps == self.active:
                recorded["profile"]["on_trace_ready"](self)

    def handler(dir_name: str):
        def ready(prof) -> None:
            out = Path(dir_name) / "host_99_20260101_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
            out.mkdir(parents=True)
            (out / "kernel_details.csv").write_bytes(csv_source.read_bytes())
        recorded["dir_name"] = dir_name
        return ready

    metrics = types.SimpleNamespace(PipeUtilization="pipe", **({"AiCoreNone": "none"} if with_metrics_off else {}))
    profiler = types.SimpleNamespace(
        profile=Profile, ProfilerActivity=types.SimpleNamespace(NPU="npu", CPU="cpu"),
        ProfilerLevel=types.SimpleNamespace(Level0="l0", Level1="l1", Level2="l2"), AiCMetrics=metrics,
        schedule=lambda **kw: kw, tensorboard_trace_handler=handler,
        _ExperimentalConfig=lambda **kw: recorded.setdefault("experimental", kw))
    module = types.ModuleType("torch_npu")
    module.profiler = profiler
    module.recorded = recorded
    return module


@pytest.mark.parametrize("with_metrics_off", [True, False])
def test_profile_steps_protocol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_metrics_off: bool) -> None:
    events: list = []
    fake = fake_torch_npu(events, PROFILES / "clean_5steps.csv", with_metrics_off=with_metrics_off)
    monkeypatch.setitem(sys.modules, "torch_npu", fake)
    out = tmp_path / "prof" / "case_3"
    export(out, "stale_run")  # a previous run's output must not survive (it would make the lookup ambiguous)
    steps = npu_run.profile_steps(lambda: events.append("call"), 5, lambda: events.append("clean"),
                                      lambda: events.append("sync"), out, secret_shapes=[SECRET], level="Level2")
    assert events == ["enter", *["clean", "call", "sync", "step"] * 5, "exit"]
    assert steps.step_us == approx(CLEAN_TOTALS)
    profile = fake.recorded["profile"]
    assert profile["activities"] == ["npu"]
    assert profile["schedule"] == {"wait": 0, "warmup": 0, "active": 5, "repeat": 1}
    assert fake.recorded["dir_name"] == str(out.resolve())
    expected = {"profiler_level": "l2", **({"aic_metrics": "none"} if with_metrics_off else {})}
    assert fake.recorded["experimental"] == expected
    assert not (out / "stale_run_ascend_pt").exists()


@pytest.mark.parametrize("kwargs, message", [
    ({"level": "Level3"}, "level must be one of"), ({"secret_shapes": [""]}, "not a list of dims"),
    ({"n_steps": 0}, "n_steps must be"),
])
def test_profile_steps_validates_before_importing_torch_npu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           kwargs: dict, message: str) -> None:
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # importing it would raise ImportError
    args = {"call": lambda: None, "n_steps": 2, "clean": lambda: None, "device_sync": lambda: None,
            "out_dir": tmp_path / "p", "secret_shapes": [SECRET], **kwargs}
    with pytest.raises(ValueError, match=message):
        npu_run.profile_steps(**args)
    assert not (tmp_path / "p").exists()


def test_profile_steps_without_torch_npu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    with pytest.raises(ImportError):
        npu_run.profile_steps(lambda: None, 2, lambda: None, lambda: None, tmp_path / "p", secret_shapes=[SECRET])


def test_module_imports_no_torch() -> None:
    code = ("import sys, pytest_cannbench.timing.npu_run; "
            "bad = [m for m in ('torch', 'torch_npu', 'numpy') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)

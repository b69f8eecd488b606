"""Issue 20 item 3: the quiet-window fence (shared accuracy work, exclusive timed windows) and the load rule."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_cannbench.timing.isolation import (
    LOAD_FACTOR,
    PSI_SOME_AVG10,
    Fence,
    cpu_pressure,
    gate_path,
    remove_fence,
    under_load,
)


def sample(load: float | None = None, psi: float | None = None) -> dict:
    return {"loadavg1": load, "cpu_some_avg10": psi}


@pytest.mark.parametrize("samples, cores, fragment", [
    ([sample(1.0, 0.0), sample(2.0, 5.0)], 2, None),
    ([sample(LOAD_FACTOR * 2, 0.0)], 2, None),  # at the bound: not above it
    ([sample(3.5, 0.0)], 2, "load average 3.50 on 2 cores"),
    ([sample(0.5, None), sample(0.4, PSI_SOME_AVG10 + 1)], 2, "CPU pressure 21.0%"),
    ([sample(None, None)], 2, None),  # nothing readable never flags
    ([sample(1.6, None)], 1, "on 1 core"),
    ([sample(1.6, None)], 0, "on 1 core"),  # a budget is at least one core
    ([], 2, None),
], ids=["quiet", "at-bound", "load", "pressure", "unreadable", "one-core", "zero-cores", "no-samples"])
def test_under_load_rule(samples, cores, fragment):
    why = under_load(samples, cores)
    assert (why is None) if fragment is None else (fragment in why), why


def test_cpu_pressure_parses_psi_and_tolerates_its_absence(tmp_path: Path):
    psi = tmp_path / "cpu"
    psi.write_text("some avg10=12.50 avg60=3.00 avg300=1.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 "
                   "total=0\n")
    assert cpu_pressure(str(psi)) == 12.5
    assert cpu_pressure(str(tmp_path / "missing")) is None
    psi.write_text("garbage\n")
    assert cpu_pressure(str(psi)) is None


def test_fence_off_is_a_no_op():
    off = Fence(None)
    spans: list = []
    with off.shared(spans), off.exclusive():
        pass
    assert spans == [] and not off.active


def test_fence_nests_shared_and_refuses_a_window_inside_accuracy_work(tmp_path: Path):
    fence = Fence(tmp_path / "s.fence")
    spans: list = []
    with fence.shared(spans):
        with fence.shared(spans):
            pass
        with pytest.raises(RuntimeError, match="deadlock"), fence.exclusive():
            pass
    assert len(spans) == 1 and spans[0][0] <= spans[0][1]
    with fence.exclusive(), fence.shared(spans):  # work inside the process's own window is the window's
        pass
    assert len(spans) == 1
    remove_fence(tmp_path / "s.fence")
    assert not (tmp_path / "s.fence").exists() and not gate_path(tmp_path / "s.fence").exists()


SCRIPT = textwrap.dedent('''
    import json, sys, time
    from pathlib import Path
    from pytest_cannbench.timing.isolation import Fence
    fence, kind, spans = Fence(Path(sys.argv[1])), sys.argv[2], []
    for _ in range(4):
        hold = fence.exclusive() if kind == "window" else fence.shared()
        with hold:
            start = time.monotonic(); time.sleep(0.05); spans.append([start, time.monotonic()])
        time.sleep(0.01)
    print(json.dumps({"kind": kind, "spans": spans}))
''')


def test_a_window_excludes_accuracy_work_of_other_processes(tmp_path: Path):
    """Two accuracy processes share the fence; a window overlaps neither of them."""
    path = str(tmp_path / "s.fence")
    kinds = ["window", "accuracy", "accuracy"]
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, path, kind], stdout=subprocess.PIPE, text=True)
             for kind in kinds]
    results = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    windows = [s for r in results if r["kind"] == "window" for s in r["spans"]]
    accuracy = [s for r in results if r["kind"] == "accuracy" for s in r["spans"]]
    assert len(windows) == 4 and len(accuracy) == 8
    assert not [(a, w) for a in accuracy for w in windows if a[0] < w[1] and w[0] < a[1]]

"""Issue 20 item 3: the quiet-window fence (shared accuracy work, exclusive timed windows) and the load rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_cannbench.figures import window_figures
from pytest_cannbench.timing.isolation import (
    LOAD_FACTOR,
    PSI_SOME_AVG10,
    STEAL_PCT,
    Fence,
    cpu_pressure,
    cpu_stall_us,
    gate_path,
    load_sample,
    remove_fence,
    steal_s,
    under_load,
    windows_under_load,
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


def window(seconds: float, stall_s: float | None = None, steal: float | None = None, cpus: int = 2,
           edge_load: float | None = 0.5, edge_psi: float | None = 0.0, at: float = 100.0) -> dict:
    """A timed window's two samples, with the totals moved by ``stall_s`` and ``steal`` CPU seconds."""
    start = {"loadavg1": edge_load, "cpu_some_avg10": edge_psi, "cpus": cpus, "t": at,
             "cpu_some_total_us": None if stall_s is None else 5e6, "steal_s": None if steal is None else 40.0}
    end = dict(start, t=at + seconds,
               cpu_some_total_us=None if stall_s is None else 5e6 + stall_s * 1e6,
               steal_s=None if steal is None else 40.0 + steal)
    return {"start": start, "end": end}


@pytest.mark.parametrize("windows, fragment", [
    # busy edges (this session's own accuracy work in the 10 s before) but a quiet window: not under load
    ([window(0.5, stall_s=0.0, steal=0.0, edge_load=9.0, edge_psi=60.0)], None),
    ([window(1.0, stall_s=0.25)], "waited for a CPU during 25.0%"),
    # pooled over the case's windows: 0.3 s of stall in 2 s of windows is 15%, under the bound
    ([window(1.0, stall_s=0.3), window(1.0, stall_s=0.0, at=200.0)], None),
    ([window(1.0, stall_s=0.0, steal=0.5)], "stole 25.0%"),  # 0.5 CPU s of 2 cores x 1 s
    ([window(1.0, stall_s=0.0, steal=0.3)], None),
    # no totals (an older kernel, or an older version's samples): the edges decide as before
    ([window(1.0, edge_load=9.0)], "load average 9.00"),
    ([window(1.0, edge_psi=PSI_SOME_AVG10 + 5)], "CPU pressure"),
    ([], None),
], ids=["quiet-window-busy-edges", "stalled", "pooled", "stolen", "some-steal", "edges-load", "edges-psi", "none"])
def test_windows_under_load_rule(windows, fragment):
    why = windows_under_load(windows, 2)
    assert (why is None) if fragment is None else (fragment in why), why


def test_window_figures_pool_the_windows_and_skip_what_was_not_read():
    figures = window_figures([window(1.0, stall_s=0.1, steal=0.2), window(3.0, stall_s=0.1, at=300.0)])
    assert figures["cpu_stall_pct"] == pytest.approx(5.0)  # 0.2 s of 4 s
    assert figures["steal_pct"] == pytest.approx(10.0)  # the second window read no steal: 0.2 of 2 cores x 1 s
    assert window_figures([window(1.0)]) == {"cpu_stall_pct": None, "steal_pct": None}
    assert STEAL_PCT == 20.0


def test_the_totals_parse_and_tolerate_their_absence(tmp_path: Path):
    psi = tmp_path / "cpu"
    psi.write_text("some avg10=1.00 avg60=3.00 avg300=1.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 "
                   "total=0\n")
    assert cpu_stall_us(str(psi)) == 123456.0 and cpu_stall_us(str(tmp_path / "missing")) is None
    stat = tmp_path / "stat"
    stat.write_text("cpu  3458491 433593 1126368 5613385 16536 0 2681 48058 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    assert steal_s(str(stat)) == pytest.approx(48058 / os.sysconf("SC_CLK_TCK"))
    stat.write_text("intr 1 2 3\n")
    assert steal_s(str(stat)) is None and steal_s(str(tmp_path / "missing")) is None
    live = load_sample()  # this machine: every field there, the totals never going back
    later = load_sample()
    assert set(live) == {"loadavg1", "cpu_some_avg10", "cpu_some_total_us", "steal_s", "cpus", "t"}
    for name in ("cpu_some_total_us", "steal_s", "t"):
        if live[name] is not None:
            assert later[name] >= live[name]


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


def test_letting_windows_pass_without_one_waiting_keeps_the_hold(tmp_path: Path):
    fence, spans = Fence(tmp_path / "s.fence"), []
    assert fence.let_windows_pass() == 0.0  # outside any hold: nothing to let go
    with fence.shared(spans) as hold:
        assert hold.let_windows_pass() == 0.0
        with fence.shared(spans) as inner:  # a nested hold passes the outermost one's
            assert inner.let_windows_pass() == 0.0
    assert len(spans) == 1
    off = Fence(None)
    with off.shared(spans) as hold:
        assert hold.let_windows_pass() == 0.0


STEPS = textwrap.dedent('''
    import json, sys, time
    from pathlib import Path
    from pytest_cannbench.timing.isolation import Fence
    fence, steps, spans, passed = Fence(Path(sys.argv[1])), int(sys.argv[3]), [], 0.0
    with fence.shared(spans) as hold:
        Path(sys.argv[2]).touch()  # holding it now
        for _ in range(steps):
            if sys.argv[4] == "pass":
                passed += hold.let_windows_pass()
            time.sleep(0.05)
    print(json.dumps({"spans": spans, "passed": passed}))
''')

WINDOW = textwrap.dedent('''
    import json, sys, time
    from pathlib import Path
    from pytest_cannbench.timing.isolation import Fence
    fence = Fence(Path(sys.argv[1]))
    while not Path(sys.argv[2]).exists():
        time.sleep(0.005)
    asked = time.monotonic()
    with fence.exclusive():
        start = time.monotonic(); time.sleep(0.2); end = time.monotonic()
    print(json.dumps({"waited": start - asked, "window": [start, end]}))
''')


@pytest.mark.parametrize("mode", ["pass", "hold"])
def test_a_waiting_window_goes_between_two_steps_of_accuracy_work(tmp_path: Path, mode: str):
    """Accuracy work in 20 steps of 50 ms under one shared hold: a window asked for meanwhile starts after the
    step under way when the steps let it pass, after all of them otherwise; never while a step runs."""
    path, flag = str(tmp_path / "s.fence"), str(tmp_path / "holding")
    work = subprocess.Popen([sys.executable, "-c", STEPS, path, flag, "20", mode], stdout=subprocess.PIPE, text=True)
    window = subprocess.Popen([sys.executable, "-c", WINDOW, path, flag], stdout=subprocess.PIPE, text=True)
    steps, timed = (json.loads(p.communicate(timeout=60)[0]) for p in (work, window))
    w = timed["window"]
    assert not [s for s in steps["spans"] if s[0] < w[1] and w[0] < s[1]]
    if mode == "pass":
        assert timed["waited"] < 0.5 and len(steps["spans"]) == 2 and steps["passed"] >= 0.15
    else:
        assert timed["waited"] > 0.5 and len(steps["spans"]) == 1 and steps["passed"] == 0.0

"""A slowed clock whose work runs on threads that exit inside the call, and a kernel that fans out to many threads.

The judge's CPU floor is its evidence against a clock the submission slowed: the CPU the kernel charged the worker
during a batch, over its thread budget, must fit the time the worker accounts for. Read from the schedstat of the
threads alive at the end, it missed a thread born and joined inside the call, and a kernel could fan out to more
CPUs than the budget. One C++ submission (tests/adversarial/cpp/clock_threads, its variant picked by the cases'
``threshold``) attacks both:

* its clock patched in libc's text: the judge finds libc's code pages written in memory (``api_tampered``);
* the same clock reached through the GOT (no code page written): the judge's meter, which keeps exited threads,
  sees the joined thread's CPU time and the floor fails the batch (``timing_implausible``);
* eight threads per call on an honest clock: they all run on the budget's CPUs (affinity), and the floor sees
  their CPU time, so the call gains nothing and is not flagged.

The cases are float32 softplus of 1 M elements (10-30 ms a call here), large enough that the hidden time is many
times the floor's slack.
"""

from __future__ import annotations

import json
import platform
import re
from pathlib import Path

import pytest
from inner import run_inner

from pytest_cannbench.workers.cpu_budget import allowed_cpus
from pytest_cannbench.workers.cpu_meter import ENV_KINDS, probe_kind

FIXTURE = Path(__file__).parent / "cpp" / "clock_threads"
ARGS = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-repeat=3",
        "--cann-warmup=1", "--cann-case-timeout=120", "--cann-guard=block", "-k", "softplus")
LIBC_TEXT, GOT, FAN_OUT, HONEST = 19.0, 18.0, 17.0, 20.0  # the fixture's variants (csrc/ops.cpp)


pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the attacks patch x86-64 code")


def cases(threshold: float) -> str:
    return ("cases:\n"
            f"- {{operator: Softplus, case_id: 1, input_shape: [[1024, 1024]], dtype: [float32], "
            f"attrs: {{threshold: {threshold}}}, value_range: [-5, 5]}}\n"
            f"- {{operator: Softplus, case_id: 2, input_shape: [[2048, 512]], dtype: [float32], "
            f"attrs: {{beta: 2.0, threshold: {threshold}}}, value_range: [-5, 5]}}\n")


def grade(pytester, capsys, task_tree, prebuilt_source, threshold: float):
    tasks = task_tree("submission")
    (tasks / "level1" / "softplus" / "cases.yaml").write_text(cases(threshold))
    run = run_inner(pytester, capsys, tasks, *ARGS, f"--cann-source={prebuilt_source(FIXTURE)}")
    board = json.loads((Path(pytester.path) / "reports" / "leaderboard.json").read_text())
    softplus = next(op for op in board["operators"] if op["rel_path"] == "level1/softplus")
    logs = "\n".join(p.read_text(errors="replace") for p in (Path(pytester.path) / "reports").rglob("*.log"))
    return run, softplus, board, logs


def explain(run) -> list:
    return [(n, c.cann["status"], c.cann["failure_type"], c.cann["message"][:400]) for n, c in run.cases.items()]


def test_clock_patched_in_libc_text_is_tampering(pytester, capsys, task_tree, prebuilt_source):
    run, softplus, _, logs = grade(pytester, capsys, task_tree, prebuilt_source, LIBC_TEXT)
    assert "attack: clock hooked (libc text" in logs
    found = [c.cann for c in run.cases.values()]
    assert all(c["status"] != "passed" for c in found), explain(run)
    assert any(c["failure_type"] == "api_tampered" and "code patched in memory" in c["message"]
               and "libc" in c["message"] for c in found), explain(run)
    assert softplus["score"] == 0 and softplus["status"] == "api_tampered", softplus


@pytest.mark.parametrize("meter", ["perf_task_clock", "cgroup_v2,cgroup_v1"])
def test_clock_redirected_through_the_got_fails_the_floor(meter, pytester, capsys, task_tree, prebuilt_source,
                                                          monkeypatch):
    monkeypatch.setenv(ENV_KINDS, meter)
    kind = probe_kind()
    if kind == "schedstat":
        pytest.skip(f"no {meter} meter here")
    run, softplus, _, logs = grade(pytester, capsys, task_tree, prebuilt_source, GOT)
    hooked = re.search(r"attack: clock hooked \(GOT, (\d+) GOT slot", logs)
    assert hooked and int(hooked.group(1)) >= 1, logs[-2000:]  # the attack is live: no code page was written
    refused = [c.cann for c in run.cases.values() if c.cann["failure_type"] == "timing_implausible"]
    assert refused, explain(run)
    assert softplus["score"] == 0 and softplus["status"] == "timing_implausible", softplus
    # the floor saw the joined threads' CPU time: at least what the refused batch's threads used (its case log
    # holds that batch's output: one joined thread per warm-up and timed call)
    for case in refused:
        seen = float(re.search(r"whose threads ran ([\d.]+) ms", case["message"]).group(1))
        log = Path(pytester.path) / "reports" / "logs" / "cases" / "level1" / f"softplus_{case['case_id']}.log"
        joined = [int(v) / 1e6 for v in re.findall(r"joined thread cpu_ns=(\d+)", log.read_text())]
        assert len(joined) >= 2 and seen >= 0.95 * sum(joined), (seen, joined)


def test_fan_out_stays_on_the_budget_cpus(pytester, capsys, task_tree, prebuilt_source):
    run, softplus, board, logs = grade(pytester, capsys, task_tree, prebuilt_source, FAN_OUT)
    budget = board["config"]["cpu_budget"]
    assert budget["enforced_by"] == "cpu_affinity", budget
    ran = [set(map(int, cpus.split(","))) for cpus in re.findall(r"fanout: threads=8 cpu_ns=\d+ cpus=([\d,]+)",
                                                                   logs)]
    assert ran, logs[-2000:]
    threads = board["config"]["timing_threads"] or len(allowed_cpus())
    # every call's eight threads ran on no more CPUs than the budget: no speed-up from the fan-out
    assert all(len(cpus) <= threads for cpus in ran), ran
    for name, case in run.cases.items():  # an honest clock: the floor, which sees the eight threads, holds
        assert case.cann["status"] == "passed", (name, case.cann["failure_type"], case.cann["message"][:400])
        timing = case.cann["timing"]
        assert timing["cpu_meter"] == probe_kind(), timing.get("cpu_meter")
        for window in timing["cpu_floor"]:
            assert window["accounted_ms"] >= window["used_ms"] - window["slack_ms"], window
    assert softplus["function_score"] == pytest.approx(30.0), softplus


def test_weaker_meter_is_said_on_every_case(pytester, capsys, task_tree, prebuilt_source, monkeypatch):
    """Where no meter that keeps exited threads opens, the floor falls back to /proc schedstat: never silently."""
    monkeypatch.setenv(ENV_KINDS, "schedstat")
    run, _, board, _ = grade(pytester, capsys, task_tree, prebuilt_source, HONEST)
    assert board["config"]["cpu_budget"]["cpu_meter"] == "schedstat"
    assert "CPU floor WEAKER" in run.text
    for name, case in run.cases.items():
        assert case.cann["status"] == "passed", (name, case.cann["message"][:400])
        timing = case.cann["timing"]
        assert timing["cpu_meter"] == "schedstat" and "cpu_meter_weak" in timing["flags"], timing
        assert any("threads that exit inside a batch" in note for note in timing["notes"]), timing["notes"]

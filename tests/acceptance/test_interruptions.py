"""Issue 19: every selected case is on the board however the session ends, and no child of ours outlives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from inner import int_attr_operator, run_inner

BASE = ("-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-no-perf")


def _board(root: Path) -> dict[str, tuple[str, str | None]]:
    board = json.loads((root / "reports" / "leaderboard.json").read_text())
    return {c["key"]: (c["status"], c["failure_type"]) for op in board["operators"] for c in op["cases"]}


def test_pytest_timeout_in_setup_keeps_the_case_on_the_board(pytester, capsys, task_tree) -> None:
    """A golden slower than --timeout: pytest-timeout fires in setup; the case is a timeout, the next one runs on a
    fresh golden worker (the interrupted one's late reply must not answer it)."""
    tasks = task_tree("golden_timeout")
    run = run_inner(pytester, capsys, tasks, *BASE, "--cann-source=@golden", "--timeout=30")
    assert _board(pytester.path) == {"slow_golden_1": ("timeout", "pytest_timeout"),
                                     "slow_golden_2": ("passed", None)}, run.text[-3000:]
    assert run.cases["slow_golden[02]"].outcome == "passed"


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (workers start sessions of their own, so walk parent links)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_killed_session_leaves_no_child_and_accounts_for_its_cases(pytester, task_tree, sig) -> None:
    task_tree("golden_timeout")
    cmd = [sys.executable, "-m", "pytest", *BASE, "--cann-tasks=tasks", "--cann-source=@golden"]
    # An xdist worker (where this test may run) ignores SIGINT, and an ignored SIGINT is inherited: Python then
    # installs no KeyboardInterrupt handler. A terminal's pytest has the default one, so give the child that.
    proc = subprocess.Popen(cmd, cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
    log = pytester.path / "reports" / "logs" / "golden-worker-main.log"
    deadline = time.monotonic() + 240
    children: set[int] = set()
    while time.monotonic() < deadline and proc.poll() is None:
        children |= _descendants(proc.pid)
        if log.exists() and any(b"golden_main" in Path(f"/proc/{c}/cmdline").read_bytes()
                                for c in children if _alive(c)):
            break
        time.sleep(0.2)
    time.sleep(3)  # the worker has started and is sleeping in case 1's golden
    children |= _descendants(proc.pid)
    assert children, "no golden worker started"
    proc.send_signal(sig)
    out = proc.communicate(timeout=120)[0].decode(errors="replace")
    end = time.monotonic() + 15
    while time.monotonic() < end and any(_alive(c) for c in children):
        time.sleep(0.2)
    assert not [c for c in children if _alive(c)], out[-3000:]
    if sig != signal.SIGKILL:
        assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
        reason = "the session was interrupted (Ctrl-C or SIGTERM) before this case ran"
        board = json.loads((pytester.path / "reports" / "leaderboard.json").read_text())
        cases = {c["key"]: (c["status"], c["failure_type"], c["message"])
                 for op in board["operators"] for c in op["cases"]}
        assert cases == {f"slow_golden_{i}": ("interrupted", "session_interrupted", reason) for i in (1, 2)}


KILLER = '''import os
import signal

import torch


def judge_killer(x: torch.Tensor, deadly: int = 0) -> torch.Tensor:
    if deadly:
        os.kill(os.getppid(), signal.SIGKILL)  # the golden worker's parent: the pytest-xdist worker
    return x + 1
'''


def test_a_lost_xdist_worker_leaves_no_case_unaccounted(pytester, capsys, task_tree) -> None:
    tasks = task_tree("basic")
    int_attr_operator(tasks, "judge_killer", "JudgeKiller", KILLER, "deadly", "kills its judge",
                      ["attrs: {deadly: 1}, value_range: [-1, 1], note: a", "attrs: {}, value_range: [-1, 1], note: b"])
    result = pytester.runpytest_subprocess(*BASE, "--cann-tasks=tasks", "--cann-source=@golden", "-n", "2",
                                           "--max-worker-restart=0")
    cases = _board(pytester.path)
    assert set(cases) == {"level1/axpy_1", "level1/axpy_2", "level1/axpy_3", "level1/judge_killer_1",
                          "level1/judge_killer_2"}, result.stdout.str()[-3000:]
    assert cases["level1/judge_killer_1"] == ("crashed", "worker_crashed")
    assert all(status in ("passed", "interrupted") for status, _ in cases.values() if status != "crashed")


def test_the_board_records_the_selection(pytester, capsys, task_tree) -> None:
    tasks = task_tree("basic")
    run_inner(pytester, capsys, tasks, *BASE, "--cann-source=@golden", "-k", "axpy and 01")
    board = json.loads((pytester.path / "reports" / "leaderboard.json").read_text())
    selection = board["config"]["selection"]
    assert {k: selection[k] for k in ("keyword", "markexpr", "selected", "deselected", "interrupted", "partial")} == {
        "keyword": "axpy and 01", "markexpr": "", "selected": 1, "deselected": 2, "interrupted": 0, "partial": True}
    assert [c["key"] for op in board["operators"] for c in op["cases"]] == ["level1/axpy_1"]


def test_an_interrupted_xdist_session_files_unrun_cases_under_their_operators(pytester, task_tree) -> None:
    """SIGINT to the whole process group, as `timeout` and a terminal's Ctrl-C send it: the xdist workers end
    before they name their cases' keys to the controller. Seen on an H200 (benchmarks/gpu_proof.sh): each unrun
    case became an "operator" of its own, keyed by its node id ("236 operators" for 25). The controller now reads
    the key from the node id as collection makes it."""
    tasks = task_tree("golden_timeout")
    cases_yaml = tasks / "slow_golden" / "cases.yaml"  # both workers busy: neither can name the other's keys
    cases_yaml.write_text(cases_yaml.read_text().replace("delay_s: 0.0", "delay_s: 600.0"))
    cmd = [sys.executable, "-m", "pytest", *BASE, "--cann-tasks=tasks", "--cann-source=@golden", "-n", "2"]
    proc = subprocess.Popen(cmd, cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
    deadline = time.monotonic() + 240
    logs = pytester.path / "reports" / "logs"
    while time.monotonic() < deadline and proc.poll() is None:
        if logs.is_dir() and len([p for p in logs.glob("golden-worker-gw*.log")]) >= 2:
            break
        time.sleep(0.2)
    time.sleep(5)  # each worker sleeps in a case's golden
    os.killpg(proc.pid, signal.SIGINT)
    out = proc.communicate(timeout=120)[0].decode(errors="replace")
    board = json.loads((pytester.path / "reports" / "leaderboard.json").read_text())
    assert [op["rel_path"] for op in board["operators"]] == ["slow_golden"], out[-3000:]
    cases = {c["key"]: c["status"] for op in board["operators"] for c in op["cases"]}
    assert set(cases) == {"slow_golden_1", "slow_golden_2"}, (cases, out[-3000:])
    assert set(cases.values()) == {"interrupted"}


def test_every_collected_key_reads_back_from_its_node_id(pytester, task_tree) -> None:
    """What the controller reads from a node id (nodes.keys.key_from_nodeid) is the key collection gave the item,
    for an operator tree's cases and a KernelBench tree's trials and timed cases."""
    import shutil

    from pytest_cannbench.nodes.items import case_key
    from pytest_cannbench.nodes.keys import key_from_nodeid

    task_tree("basic")
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "kernelbench" / "problems",
                    pytester.path / "problems")
    for args in (("tasks", "--cann-source=@golden"), ("problems", "--cann-kb-trials=3", "--cann-source=@golden")):
        items, _ = pytester.inline_genitems(*args, "-p", "no:cacheprovider")
        keys = {item.nodeid: case_key(item) for item in items}
        assert keys and all(keys.values()), keys
        assert {n: key_from_nodeid(n, pytester.path, kb_trials=3) for n in keys} == keys

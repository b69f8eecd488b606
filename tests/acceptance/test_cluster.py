"""``cannbench cluster-grade`` on a real Ray cluster of simulated nodes on this machine.

One cluster for the module (``ray.cluster_utils.Cluster``: a head and a second node, each with one CPU and a
resource of its own), the bundled C++ example (prebuilt once), a small tree of five level-1 operators (ten
cases, one operator the example does not provide), accuracy only. Every run is the real command in a subprocess
that joins the cluster with ``--address``; every shard is a real pytest session on the node Ray chose. The
reference is one local pytest session on the same tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="cluster-grade needs Ray: the 'cluster' extra (scripts/setup.sh installs it)")
from ray.cluster_utils import Cluster  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cluster"
COMMON = ["--cann-no-perf", "--cann-golden-cache=off"]
RUN_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def cluster():
    """A head node (resource node_a) and a second node (node_b), one CPU each: one CPU judge per node."""
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"node_a": 1}})
    try:
        made.add_node(num_cpus=1, resources={"node_b": 1})
        made.wait_for_nodes()
        yield made
    finally:
        made.shutdown()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cluster")
    shutil.copytree(FIXTURE, root / "tasks")
    return root


@pytest.fixture(scope="module")
def source(prebuilt: Any) -> Path:
    return Path(prebuilt("cpp_cpu"))


@pytest.fixture(scope="module")
def local(work: Path, source: Path) -> dict[str, Any]:
    """The reference: one local pytest session grading the whole tree, as a user runs it."""
    done = subprocess.run([sys.executable, "-m", "pytest", f"--cann-tasks={work / 'tasks'}", f"--cann-source={source}",
                           f"--cann-report-dir={work / 'local'}", f"--junitxml={work / 'local' / 'junit.xml'}",
                           "-p", "no:cacheprovider", *COMMON], cwd=work, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((work / "local" / "leaderboard.json").read_text())


def _grade(cluster: Cluster, work: Path, tree: Path, source: Path, out: str, *extra: str,
           on_line: Any = None) -> tuple[int, str, dict[str, Any]]:
    """The real command, joining the test's cluster; its exit status, its output and the merged board."""
    cmd = [sys.executable, "-m", "pytest_cannbench.cli", "cluster-grade", "--tasks", str(tree), "--source",
           str(source), "--address", cluster.address, "--report-dir", str(work / out), "--cpus-per-judge", "1",
           *extra, "--", *COMMON]
    proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(RUN_TIMEOUT_S, proc.kill)
    timer.start()
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if on_line is not None:
                on_line(line)
        rc = proc.wait()
    finally:
        timer.cancel()
    text = "".join(lines)
    board_path = work / out / "leaderboard.json"
    assert board_path.is_file(), text[-4000:]
    return rc, text, json.loads(board_path.read_text())


def _cases(board: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    return {c["key"]: (c["status"], c.get("failure_type")) for op in board["operators"] for c in op["cases"]}


def _scores(board: dict[str, Any]) -> list[tuple[str, str, float]]:
    return [(op["rel_path"], op["status"], op["score"]) for op in board["operators"]]


def _junit(path: Path) -> tuple[int, dict[str, str]]:
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    statuses = {}
    for case in suite.findall("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        statuses[str(props["cann_case"])] = str(props["cann_status"])
    return int(suite.get("tests", "-1")), statuses


def _sessions_on(tree: Path) -> list[str]:
    """pytest sessions still grading ``tree`` (an orphan of a killed node would be one)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"--cann-tasks={tree}" in cmdline and "pytest" in cmdline:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def test_shards_spread_over_both_nodes_and_merge_into_a_local_runs_files(
        cluster: Cluster, work: Path, source: Path, local: dict[str, Any]) -> None:
    rc, text, board = _grade(cluster, work, work / "tasks", source, "two_nodes")
    assert rc == 0, text[-4000:]
    assert f"Ray cluster at {cluster.address}" in text and "2 CPU judge slots" in text
    shards = board["cluster"]["shards"]
    assert len(shards) == 2 and all(s["status"] == "graded" for s in shards), shards
    assert len({s["node_id"] for s in shards}) == 2, shards  # one judge per node: both nodes graded a shard
    assert sorted(s["cases"] for s in shards) == [5, 5]  # gelu+softplus / elu+silu+leaky_relu: balanced by cases
    for shard in shards:
        assert f"shard {shard['label']}: started on" in text and f"shard {shard['label']}: done on" in text
    # the same cases, statuses and scores as the local session
    assert _cases(board) == _cases(local) and len(_cases(board)) == 10
    assert _scores(board) == _scores(local) and board["total_score"] == local["total_score"] == 200.0
    assert board["cluster"]["missing"] == [] and board["config"]["selection"]["partial"] is False
    assert "total score 200.0 over 5 operators" in text
    # and the same files beside it
    out = work / "two_nodes"
    journal = [json.loads(line)["outcome"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(o["key"] for o in journal) == sorted(_cases(local))
    assert _junit(out / "junit.xml") == _junit(work / "local" / "junit.xml")
    assert "level1/gelu" in (out / "report.html").read_text()
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["1", "2"]
    assert (out / "shards" / "1" / "pytest.log").is_file() and (out / "shards" / "2" / "leaderboard.json").is_file()


def test_a_node_killed_while_its_shard_runs_loses_no_shard(
        cluster: Cluster, work: Path, source: Path, local: dict[str, Any]) -> None:
    victim_node = cluster.add_node(num_cpus=1, resources={"node_c": 1})
    cluster.wait_for_nodes()
    head = cluster.head_node.node_id
    killed: list[str] = []

    def kill_on_start(line: str) -> None:
        """At the first shard that starts on a node other than the head: take that node down 1 s later (its
        session has not finished starting: a shard of five small cases takes several seconds even when idle)."""
        if killed or ": started on " not in line:
            return
        prefix = line.split("(node ", 1)[1][:8]
        for node in cluster.list_all_nodes():
            if node.node_id.startswith(prefix) and node.node_id != head:
                killed.append(node.node_id)
                threading.Timer(1.0, cluster.remove_node, args=(node,), kwargs={"allow_graceful": False}).start()
                return

    # two shards on three one-judge nodes: the lost one is rerun on the idle node at once
    rc, text, board = _grade(cluster, work, work / "tasks", source, "killed", "--shards", "2", on_line=kill_on_start)
    assert killed, text[-4000:]
    assert rc == 0, text[-4000:]
    assert _cases(board) == _cases(local) and _scores(board) == _scores(local), text[-4000:]
    assert board["cluster"]["missing"] == []
    shards = board["cluster"]["shards"]
    hit = [s for s in shards if any(a["node_id"] == killed[0] for a in s["attempts"])]
    assert hit, shards
    for shard in hit:  # lost where it ran, graded on a node still there
        assert [a["result"] for a in shard["attempts"]] == ["lost", "graded"], shard["attempts"]
        assert shard["node_id"] != killed[0] and shard["status"] == "graded"
        assert f"shard {shard['label']}: lost on" in text
    time.sleep(1)
    assert _sessions_on(work / "tasks") == []  # the killed node's session did not grade on, orphaned
    del victim_node


def test_a_shard_that_cannot_run_is_named_on_the_board(cluster: Cluster, work: Path, source: Path) -> None:
    """A session that dies (here: a golden that kills its judge) leaves no board, twice: the shard is named with
    its log's tail, and its operator's cases are on the board as interrupted, never left out."""
    tree = work / "crashing" / "tasks"
    (tree / "level1").mkdir(parents=True)
    shutil.copytree(FIXTURE / "level1" / "gelu", tree / "level1" / "gelu")
    shutil.copytree(FIXTURE / "level1" / "silu", tree / "level1" / "crash_judge")
    (tree / "level1" / "crash_judge" / "golden.py").write_text(KILLS_ITS_JUDGE)
    rc, text, board = _grade(cluster, work, tree, source, "crashing", "--shards", "2")
    assert rc == 3, text[-4000:]
    missing = board["cluster"]["missing"]
    assert [m["rel_path"] for m in missing] == ["level1/crash_judge"] and missing[0]["cases"] == 2
    assert "pytest exited with status -9" in missing[0]["reason"]
    failed = [s for s in board["cluster"]["shards"] if s["status"] == "failed"]
    assert len(failed) == 1 and len(failed[0]["attempts"]) == 2  # tried again once, then named
    assert f"shard {failed[0]['label']}: FAILED after 2 attempt(s): pytest exited with status -9" in text
    assert "log tail:" in text and "MISSING level1/crash_judge (2 of 2 cases" in text
    cases = _cases(board)
    assert cases["level1/crash_judge_1"] == cases["level1/crash_judge_2"] == ("interrupted", "session_interrupted")
    assert [cases[f"level1/gelu_{i}"] for i in (1, 2, 3)] == [("passed", None)] * 3
    crash = next(op for op in board["operators"] if op["rel_path"] == "level1/crash_judge")
    assert crash["score"] == 0.0 and "no verdict: shard" in crash["cases"][0]["message"]
    assert board["config"]["selection"]["partial"] is True and board["config"]["selection"]["interrupted"] == 2
    _, junit = _junit(work / "crashing" / "junit.xml")
    assert junit["level1/crash_judge_1"] == "interrupted" and junit["level1/gelu_1"] == "passed"
    assert os.path.getsize(work / "crashing" / "shards" / str(failed[0]["index"]) / "pytest.log") > 0


KILLS_ITS_JUDGE = '''"""Test fixture: a golden that takes its judge down (SIGKILL to the pytest session whose
golden worker runs it), so the shard grading it ends without a board, as a crashed session does."""

import os
import signal

import torch


def silu(x: torch.Tensor) -> torch.Tensor:
    os.kill(os.getppid(), signal.SIGKILL)
    return torch.nn.functional.silu(x)
'''

"""The cluster run's parts that need no cluster: the shard plan, the options it refuses, a node's own checks,
the judge slots read from node resources, when an attempt counts, and the joined junit file."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_cannbench import __version__
from pytest_cannbench.cluster.command import _selects, check_extra
from pytest_cannbench.cluster.connect import CPU, GPU, NPU, judges_of, kind_of
from pytest_cannbench.cluster.grade import failure
from pytest_cannbench.cluster.junit import merge_junit
from pytest_cannbench.cluster.plan import Unit, ignored_elsewhere, refuse_problems, split, units_of
from pytest_cannbench.cluster.shard import ShardResult, ShardSpec, ship, unreachable
from pytest_cannbench.report.merge import InputError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cluster"


def _unit(name: str, cases: int) -> Unit:
    return Unit(f"level1/{name}", f"/t/level1/{name}", tuple(f"level1/{name}_{i}" for i in range(1, cases + 1)))


def test_the_tree_is_read_with_every_case_key() -> None:
    units = units_of(FIXTURE)
    assert [u.rel_path for u in units] == ["level1/elu", "level1/gelu", "level1/leaky_relu", "level1/silu",
                                           "level1/softplus"]
    assert [u.cases for u in units] == [2, 3, 1, 2, 2]
    assert units[1].keys == ("level1/gelu_1", "level1/gelu_2", "level1/gelu_3")


def test_shards_are_balanced_by_cases_not_by_operators() -> None:
    units = [_unit("big", 12), *(_unit(f"small{i}", 2) for i in range(6))]
    shards = split(units, 2)
    assert [s.cases for s in shards] == [12, 12]
    assert [len(s.units) for s in shards] == [1, 6]  # a hash of paths would split 7 operators about 4/3
    assert split(units, 2) == shards  # the same plan every time


def test_every_operator_is_in_exactly_one_shard_and_no_shard_is_empty() -> None:
    units = [_unit(f"op{i}", i % 5 + 1) for i in range(11)]
    for count in (1, 3, 4, 11, 40):
        shards = split(units, count)
        assert len(shards) == min(count, 11) and all(s.units for s in shards)
        assert sorted(u.rel_path for s in shards for u in s.units) == sorted(u.rel_path for u in units)
        assert [s.label for s in shards] == [f"{i}/{len(shards)}" for i in range(1, len(shards) + 1)]
    with pytest.raises(InputError, match="at least 1"):
        split(units, 0)


def test_a_shard_ignores_exactly_the_other_shards_operators() -> None:
    units = [_unit("a", 3), _unit("b", 2), _unit("c", 1)]
    first, second = split(units, 2)
    assert ignored_elsewhere(first, units) == [f"--ignore={u.path}" for u in second.units]


def test_an_operator_that_cannot_load_is_planned_under_its_task_key(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE, tmp_path / "tasks")
    (tmp_path / "tasks" / "level1" / "gelu" / "cases.yaml").write_text("cases: [not a mapping\n")
    gelu = next(u for u in units_of(tmp_path / "tasks") if u.rel_path == "level1/gelu")
    assert gelu.keys == ("level1/gelu_task",) and gelu.problem


def test_kernelbench_problems_and_empty_trees_are_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "19_ReLU.py").write_text("class Model(object):\n    pass\n")
    with pytest.raises(InputError, match=r"KernelBench problem files \(level1/19_ReLU.py\)"):
        refuse_problems(tmp_path)
    with pytest.raises(InputError, match="no operator directory"):
        units_of(tmp_path)
    with pytest.raises(InputError, match="no such directory"):
        units_of(tmp_path / "absent")


def test_options_the_run_sets_itself_are_refused_with_what_to_use() -> None:
    check_extra(["--cann-no-perf", "-k", "gelu", "-n", "2"])
    for arg, hint in (("--cann-shard=1/2", "--shards"), ("--junitxml", "junit is <report dir>/junit.xml"),
                      ("--cann-report-dir=x", "--report-dir"), ("--cann-resume", "fresh run")):
        with pytest.raises(InputError, match=hint):
            check_extra([arg])
    assert _selects(["-k", "gelu"]) and _selects(["-kgelu"]) and _selects(["-m=level1"])
    assert not _selects(["--cann-no-perf", "-n", "2"])


def _spec(tmp_path: Path, **changes: object) -> ShardSpec:
    spec = ShardSpec(1, "1/1", str(FIXTURE), str(tmp_path), [str(FIXTURE / "level1" / "gelu")], [], [],
                     str(tmp_path), None, __version__, CPU, 1.0, None)
    for name, value in changes.items():
        setattr(spec, name, value)
    return spec


def test_a_node_that_cannot_see_the_files_or_runs_another_version_says_so(tmp_path: Path) -> None:
    assert unreachable(_spec(tmp_path)) == ""
    gone = tmp_path / "not-mounted" / "tasks"
    why = unreachable(_spec(tmp_path, tree=str(gone)))
    assert f"cannot see the task tree at {gone}" in why and "shared filesystem" in why
    why = unreachable(_spec(tmp_path, operators=[str(gone / "level1" / "gelu")]))
    assert "cannot see an operator directory of this shard" in why
    assert "install the same version on every node" in unreachable(_spec(tmp_path, version="0.0.0-other"))


def test_judge_slots_follow_the_node_resources() -> None:
    npu_host, gpu_host, cpu_host = {"CPU": 64.0, "NPU": 8.0}, {"CPU": 32.0, "GPU": 4.0}, {"CPU": 16.0}
    assert kind_of([{"Resources": cpu_host}, {"Resources": npu_host}]) == NPU
    assert kind_of([{"Resources": cpu_host}, {"Resources": gpu_host}]) == GPU
    assert kind_of([{"Resources": cpu_host}]) == CPU
    assert judges_of(npu_host, NPU, 2) == 8 and judges_of(gpu_host, GPU, 2) == 4
    assert judges_of(cpu_host, CPU, 2) == 8 and judges_of(cpu_host, CPU, 16) == 1 and judges_of(cpu_host, CPU, 32) == 0
    assert judges_of(cpu_host, NPU, 2) == 0  # a CPU host holds no judge of a run on cards


def test_an_attempt_counts_only_when_its_session_ran_to_the_end_and_wrote_a_board() -> None:
    board = {"leaderboard.json": b"{}"}
    assert failure(ShardResult(1, 1, rc=0, files=board)) == "" and failure(ShardResult(1, 1, rc=1, files=board)) == ""
    assert failure(ShardResult(1, 1, rc=5)) == ""  # the options selected none of its cases
    assert failure(ShardResult(1, 1, rc=4)) == "pytest exited with status 4 (usage error)"
    assert failure(ShardResult(1, 1, rc=-9, files=board)) == "pytest exited with status -9"
    assert "wrote no leaderboard.json" in failure(ShardResult(1, 1, rc=0))
    assert failure(ShardResult(1, 1, rc=0, files=board, error="did not finish")) == "did not finish"


def test_a_report_directory_ships_the_board_first_and_cuts_logs_to_their_tails(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "leaderboard.json").write_text("{}")
    (tmp_path / "logs" / "big.log").write_bytes(b"x" * (5 * 2**20) + b"the end\n")
    files, cut = ship(tmp_path)
    assert files["leaderboard.json"] == b"{}" and cut == ["logs/big.log"]
    assert files["logs/big.log"].endswith(b"the end\n") and len(files["logs/big.log"]) == 4 * 2**20


SHARD_JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest"
errors="0" failures="{failures}" skipped="0" tests="{tests}" time="1.0" timestamp="T{n}" hostname="h">
<properties><property name="cann_total_score" value="1.0" /></properties>{cases}</testsuite></testsuites>"""
CASE = ('<testcase classname="tasks.level1.{op}.cases.yaml" name="{op}[0{i}]" time="0.1"><properties>'
        '<property name="cann_case" value="level1/{op}_{i}" /></properties>{verdict}</testcase>')


def test_shard_junit_files_join_into_one_suite_with_the_lost_cases_as_errors(tmp_path: Path) -> None:
    one = tmp_path / "1.xml"
    one.write_text(SHARD_JUNIT.format(n=1, failures=1, tests=2, cases=CASE.format(op="silu", i=1, verdict="")
                                      + CASE.format(op="silu", i=2, verdict='<failure message="m" />')))
    two = tmp_path / "2.xml"
    two.write_text(SHARD_JUNIT.format(n=2, failures=0, tests=1, cases=CASE.format(op="gelu", i=1, verdict="")))
    lost = [{"key": "level1/elu_1", "rel_path": "level1/elu", "status": "interrupted",
             "failure_type": "session_interrupted", "message": "no verdict: shard 3/3 (it crashed)"}]
    out = tmp_path / "junit.xml"
    merge_junit([one, two, tmp_path / "absent.xml"], lost, {"total_score": 150.0}, out, 12.5)
    suite = ET.parse(out).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("time")) == ("4", "1", "1",
                                                                                                   "12.500")
    assert [c.get("name") for c in suite.findall("testcase")] == ["elu[01]", "gelu[01]", "silu[01]", "silu[02]"]
    assert suite.findall("testcase")[0].get("classname") == "tasks.level1.elu.cases.yaml"
    properties = suite.find("properties")
    assert properties is not None
    assert {p.get("name"): p.get("value") for p in properties} == {"cann_total_score": "150.0"}

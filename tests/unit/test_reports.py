"""The Markdown summary, the official EvalReport shape and --cann-shard's operator split (no tasks, no torch)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections import Counter

import pytest
from synth_outcomes import BUILD_MESSAGE, all_outcomes, board_of, outcome, timed

from pytest_cannbench.nodes.sharding import in_shard, normalise, parse_shard, shard_of
from pytest_cannbench.report import leaderboard
from pytest_cannbench.report.eval_report import to_eval_report
from pytest_cannbench.report.markdown import cell, render

# Field lists of the official EvalReport (docs/ci.md).
TOP = ["framework_version", "tasks_version", "eval_code", "timestamp", "device", "total_operators", "total_cases",
       "passed_cases", "failed_cases", "overall_score", "summary", "setup_info", "operators"]
SUMMARY = ["total_operators", "total_cases", "passed_cases", "failed_cases", "cascade_cases", "pass_rate",
           "genuine_pass_rate", "overall_score"]
METADATA = ["framework", "tasks_version", "date", "agent_skill", "base_model", "harness", "benchmark", "license"]
ENVIRONMENT = ["npu", "cpu", "cann", "driver", "pytorch", "pytorch_npu", "torchvision", "python", "os", "docker"]
OPERATOR = ["rel_path", "operator", "total_cases", "passed_cases", "failed_cases", "pass_rate", "avg_speedup", "score",
            "compilation_score", "compile_runtime_score", "compile_runtime_fail_cases", "function_score",
            "performance_score", "cases", "compilation_error", "subprocess_failure_reason", "score_error_code",
            "score_error"]
CASE = ["rel_path", "operator", "case_id", "status", "elapsed_us", "op_times", "error_msg", "performance_error_msg",
        "device", "timestamp", "accuracy", "speedup", "baseline_perf_us", "t_hw_us", "perf_score", "failure_type",
        "perf_recheck"]
ACCURACY = ["passed", "error_msg", "output_results", "metadata"]
OUTPUT = ["index", "name", "dtype", "passed", "error_msg", "mismatch_count", "total_count", "dtype_category",
          "threshold", "mere", "mare", "max_diff", "mean_diff", "max_abs_diff"]


@pytest.fixture
def board() -> dict:
    return board_of(all_outcomes())


def _op(report: dict, rel_path: str) -> dict:
    return next(op for op in report["operators"] if op["rel_path"] == rel_path)


def _case(report: dict, key: str) -> dict:
    return next(c for op in report["operators"] for c in op["cases"] if c["case_id"] == key)


# ------------------------------------------------------------------------------------------------ Markdown


def _tables(text: str) -> list[list[str]]:
    tables: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def test_markdown_headline_levels_and_operators(board: dict) -> None:
    text = render(board)
    assert text.startswith(f"## CANN-Bench score: {board['total_score']:.2f}\n")
    assert "**Cases passed:** 6/13" in text and "**Operators:** 5" in text and "**Device:** cpu" in text
    assert f"**Generated:** {board['generated_at']}" in text
    assert "cann_bench-0.1-py3-none-any.whl (built, sha256 abababababab) — build ok" in text
    assert "| level1 | 2 | " in text and "| level3 | 1 | 16.67 | 16.67 |" in text
    total = board["total_score"]
    assert f"| **total** | **5** | **{total:.2f}** | **{total / 5:.2f}** |" in text
    exp = next(op for op in board["operators"] if op["rel_path"] == "level1/exp")
    assert (f"| Exp (level1/exp) | level1 | 3/3 | 20.00 | 30.00 | {exp['performance_score']:.2f} | "
            f"{exp['score']:.2f} | {exp['speedup_geomean']:.2f}× |") in text
    assert "| MatMul (level2/matmul) — **build failed** | level2 | 0/2 | 0.00 | 0.00 | 0.00 | 0.00 | – |" in text
    assert "Softmax (level2/softmax) — **not provided**" in text
    assert "**Not provided by the submission** (score 0): level2/softmax" in text
    assert "**Not measured:** 1 passed case has no time" in text and "--cann-no-perf (1)" in text
    assert "`baseline_proxy` (1)" in text


def test_markdown_failures_grouped_with_one_escaped_example(board: dict) -> None:
    text = render(board)
    failures = text.split("### Failures", 1)[1].split("###", 1)[0]
    rows = [line for line in failures.splitlines() if line.startswith("| ") and "Failure type" not in line]
    assert [r.split(" | ")[0][2:] for r in rows] == ["compile_failed", "not_provided", "candidate_timeout",
                                                     "precision_mismatch", "worker_crashed"]
    build = rows[0]
    assert "| compile_failed | 2 | candidate | level2/matmul_1: build.sh failed (rc 1)<br>error: a \\| b " in build
    assert "&lt;tag&gt; \\`x\\`" in build and "<tag>" not in text
    assert "| worker_crashed | 1 | harness/task | level3/conv_3: worker 'gw1' crashed<br>signal 9 |" in failures


def test_markdown_tables_keep_their_shape_whatever_the_messages(board: dict) -> None:
    hostile = all_outcomes() + [outcome("level4/evil|op", "Evil|Op\nX", 1, "failed", "compile_runtime_error",
                                        "line1\r\nline2 | ` ``` <script>alert(1)</script> \\| end\n\n")]
    text = render(board_of(hostile))
    assert "<script>" not in text
    unescaped = re.compile(r"(?<!\\)\|")
    for table in _tables(text):
        widths = {len(unescaped.findall(row)) for row in table}
        assert len(widths) == 1, table
    assert "Evil\\|Op<br>X (level4/evil\\|op)" in text


def test_cell_escapes_pipes_newlines_html_and_truncates() -> None:
    assert cell("a|b\nc\r\nd") == "a\\|b<br>c<br>d"
    assert cell("x < y & `z`") == "x &lt; y &amp; \\`z\\`"
    assert cell("back\\slash|") == "back\\\\slash\\|"
    assert cell("abcdefghij", limit=8) == "abcde..."
    assert cell(None) == ""


def test_markdown_is_deterministic_and_survives_a_json_round_trip(board: dict) -> None:
    text = render(board)
    assert render(copy.deepcopy(board)) == text
    assert render(json.loads(leaderboard.dumps(board))) == text
    later = dict(board, generated_at="2030-01-01T00:00:00+00:00")
    diff = [(a, b) for a, b in zip(text.splitlines(), render(later).splitlines()) if a != b]
    assert len(diff) == 1 and "2030-01-01" in diff[0][1]


def test_markdown_build_failure_and_other_submissions(board: dict) -> None:
    failed = dict(board, submission={"kind": "source", "status": "compile_failed", "wheel": None,
                                     "source": "/src/sub", "message": "build.sh exited 2 | see build.log\nmore"})
    text = render(failed)
    assert "**Submission:** /src/sub — **COMPILE_FAILED**: build.sh exited 2 \\| see build.log" in text
    assert "more" not in text.split("\n\n")[2]
    assert "self-check" in render(dict(board, submission={"kind": "self-check"}))
    assert "unknown" in render(dict(board, submission=None))


def test_markdown_of_an_empty_board() -> None:
    text = render(leaderboard.build([], submission=None, environment={}, config={}))
    assert text.startswith("## CANN-Bench score: 0.00")
    assert "**Cases passed:** 0/0" in text and "No operators were graded." in text and "### Failures" not in text


def test_markdown_device_falls_back_to_the_timings(board: dict) -> None:
    assert "**Device:** cpu" in render(dict(board, environment={}))
    assert "**Device:** unknown" in render(leaderboard.build([], submission=None, environment={}, config={}))


# ------------------------------------------------------------------------------------------------ EvalReport


def test_eval_report_has_the_official_fields_and_types(board: dict) -> None:
    report = to_eval_report(board)
    json.dumps(report, allow_nan=False)
    assert all(k in report for k in TOP)
    for key in ("framework_version", "tasks_version", "eval_code", "timestamp", "device"):
        assert isinstance(report[key], str), key
    for key in ("total_operators", "total_cases", "passed_cases", "failed_cases"):
        assert isinstance(report[key], int), key
    assert isinstance(report["overall_score"], float)
    assert list(report["summary"]) == SUMMARY
    assert list(report["setup_info"]) == ["metadata", "environment"]
    assert all(k in report["setup_info"]["metadata"] for k in METADATA)
    assert list(report["setup_info"]["environment"]) == ENVIRONMENT
    assert report["setup_info"]["environment"]["pytorch"] == "2.13.0"
    assert report["setup_info"]["environment"]["os"] == "Linux-x86_64"
    for op in report["operators"]:
        assert all(k in op for k in OPERATOR)
        for key in ("score", "compilation_score", "compile_runtime_score", "function_score", "performance_score",
                    "pass_rate", "avg_speedup"):
            assert isinstance(op[key], float), key
        for case in op["cases"]:
            assert all(k in case for k in CASE)
            assert case["status"] in ("success", "failed", "cascade", "skipped")
            assert re.fullmatch(r"level\d/\w+_\d+", case["case_id"])
            assert case["elapsed_us"] is None or isinstance(case["elapsed_us"], float)
            for key in ("speedup", "baseline_perf_us", "t_hw_us"):
                assert isinstance(case[key], float), key
            if case["accuracy"] is not None:
                assert all(k in case["accuracy"] for k in ACCURACY)
                assert "failure_type" in case["accuracy"]["metadata"]
                for out in case["accuracy"]["output_results"]:
                    assert all(k in out for k in OUTPUT)


def test_eval_report_scores_and_counts_come_from_the_board(board: dict) -> None:
    report = to_eval_report(board)
    assert report["overall_score"] == board["total_score"] == report["summary"]["overall_score"]
    for op in board["operators"]:
        ours = _op(report, op["rel_path"])
        assert (ours["score"], ours["compilation_score"], ours["function_score"], ours["performance_score"]) == (
            op["score"], op["compile_score"], op["function_score"], op["performance_score"])
        assert ours["compile_runtime_score"] == ours["compilation_score"]
        assert ours["compile_runtime_fail_cases"] == op["compile_runtime_failures"]
        for case, entry in zip(ours["cases"], op["cases"]):
            assert case["perf_score"] == (entry["hap"] if entry["status"] == "passed" else None)
    summary = report["summary"]
    assert (report["total_cases"], report["passed_cases"], report["failed_cases"]) == (13, 6, 3)
    assert summary["cascade_cases"] == 4  # 2 build-failed + 2 missing
    assert summary["pass_rate"] == pytest.approx(6 / 13) and summary["genuine_pass_rate"] == pytest.approx(6 / 9)
    assert report["device"] == "cpu" and report["timestamp"] == board["generated_at"]
    assert re.fullmatch(r"cannbench_eval_\d{8}_\d{6}", report["eval_code"])
    assert report["cannbench"]["levels"] == board["levels"]


def test_eval_report_status_mapping(board: dict) -> None:
    report = to_eval_report(board)
    matmul = _op(report, "level2/matmul")
    assert matmul["compilation_error"] == BUILD_MESSAGE and matmul["score_error_code"] == "compile_failed"
    assert "compile_failed" in matmul["score_error"]
    assert {(c["status"], c["failure_type"], c["cannbench_status"]) for c in matmul["cases"]} == {
        ("cascade", "cascade_device", "compile_failed")}
    softmax = _op(report, "level2/softmax")
    assert softmax["compilation_error"] is None and softmax["score_error_code"] == "missing"
    assert {(c["status"], c["failure_type"]) for c in softmax["cases"]} == {("skipped", "skipped")}
    relu3 = _case(report, "level1/relu_3")
    assert (relu3["status"], relu3["failure_type"], relu3["error_msg"]) == ("failed", "precision_mismatch",
                                                                           "MERE 0.2 > 0.001")
    assert relu3["accuracy"]["passed"] is False
    assert relu3["accuracy"]["metadata"]["failure_type"] == "precision_mismatch"
    assert relu3["accuracy"]["output_results"][0]["error_msg"].startswith("MERE 0.2")
    assert _case(report, "level3/conv_2")["failure_type"] == "timeout"
    assert _case(report, "level3/conv_3")["failure_type"] == "subprocess_failure"
    assert _case(report, "level3/conv_3")["accuracy"] is None
    assert _op(report, "level3/conv")["failed_cases"] == 2
    unmeasured = _case(report, "level3/conv_1")
    assert unmeasured["status"] == "success" and unmeasured["elapsed_us"] is None and unmeasured["speedup"] == 0.0
    assert unmeasured["perf_score"] is None and "--cann-no-perf" in unmeasured["performance_error_msg"]
    exp1 = _case(report, "level1/exp_1")
    assert (exp1["elapsed_us"], exp1["baseline_perf_us"], exp1["t_hw_us"]) == (11.0, 20.0, 2.0)
    assert exp1["speedup"] == pytest.approx(20.0 / 11.0) and exp1["error_msg"] is None
    assert exp1["accuracy"]["passed"] is True and exp1["accuracy"]["threshold"] == 0.001
    relu1 = _case(report, "level1/relu_1")  # no baseline: the official proxy max(10 T_hw, 10)
    assert relu1["speedup"] == pytest.approx(20.0 / 2.5) and relu1["baseline_perf_us"] == 0.0
    exp = _op(report, "level1/exp")
    assert exp["avg_speedup"] == pytest.approx(sum(20.0 / t for t in (11.0, 12.0, 13.0)) / 3)
    assert exp["pass_rate"] == 1.0 and exp["failed_cases"] == 0


def test_eval_report_of_a_json_round_tripped_board_with_non_finite_numbers() -> None:
    outcomes = [outcome("level1/exp", "Exp", 1, timing=timed(10.0, t_base=float("nan"))),
                outcome("level1/exp", "Exp", 2, accuracy=[{"index": 0, "passed": True, "max_abs_err": float("inf"),
                                                           "mere": float("nan")}])]
    board = board_of(outcomes)
    loaded = json.loads(leaderboard.dumps(board))
    assert loaded["operators"][0]["cases"][0]["t_baseline_us"] == "nan"
    for source in (board, loaded):
        report = to_eval_report(source)
        json.loads(leaderboard.dumps(report))
        case = _case(report, "level1/exp_1")
        assert case["baseline_perf_us"] == 0.0 and case["speedup"] == pytest.approx(20.0 / 10.0)
        assert _case(report, "level1/exp_2")["accuracy"]["metadata"]["max_diff"] is None


def test_eval_report_of_an_empty_board() -> None:
    report = to_eval_report(leaderboard.build([], submission=None, environment={}, config={}))
    assert report["operators"] == [] and report["summary"]["pass_rate"] == 0.0 and report["overall_score"] == 0.0


# ------------------------------------------------------------------------------------------------ sharding

PATHS = [f"level{i % 5 + 1}/op_{i:03d}" for i in range(200)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_every_operator_lands_in_exactly_one_shard(n: int) -> None:
    for path in PATHS:
        assert sum(in_shard(path, k, n) for k in range(1, n + 1)) == 1, path


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_shards_are_roughly_balanced(n: int) -> None:
    counts = Counter(shard_of(p, n) for p in PATHS)
    assert set(counts) == set(range(1, n + 1))
    assert all(0.6 * len(PATHS) / n <= c <= 1.4 * len(PATHS) / n for c in counts.values()), counts


def test_shards_are_stable_across_processes_and_releases() -> None:
    # pinned: a change would split one sharded CI run differently across machines running two versions
    assert [shard_of("level1/exp", n) for n in (2, 3, 4, 5)] == [1, 3, 3, 1]
    assert [shard_of("level2/matmul", n) for n in (2, 3, 4, 5)] == [2, 1, 4, 3]
    code = ("import json; from pytest_cannbench.nodes.sharding import shard_of; "
            f"print(json.dumps([shard_of(p, 4) for p in {PATHS!r}]))")
    for seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout
        assert json.loads(out) == [shard_of(p, 4) for p in PATHS]


def test_rel_path_spellings_agree() -> None:
    assert normalise("./level1\\exp/") == "level1/exp"
    assert shard_of("level1\\exp", 5) == shard_of("level1/exp/", 5) == shard_of("level1/exp", 5)


@pytest.mark.parametrize("spec, expected", [("1/4", (1, 4)), (" 2 / 3 ", (2, 3)), ("1/1", (1, 1)), ("4/4", (4, 4))])
def test_parse_shard(spec: str, expected: tuple[int, int]) -> None:
    assert parse_shard(spec) == expected


@pytest.mark.parametrize("spec, words", [("0/4", "numbered from 1"), ("5/4", "between 1 and N=4"),
                                         ("1/0", "at least 1"), ("4", "not K/N"), ("a/b", "not K/N"),
                                         ("", "not K/N"), ("-1/3", "not K/N"), ("1/4/5", "not K/N"),
                                         ("1.5/4", "not K/N")])
def test_bad_shard_specs_are_rejected(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        parse_shard(spec)


def test_in_shard_rejects_impossible_shards() -> None:
    with pytest.raises(ValueError):
        in_shard("level1/exp", 0, 3)
    with pytest.raises(ValueError):
        in_shard("level1/exp", 1, 0)

"""KernelBench (Stanford) problems as a second format: collection, self-check, honest and cheating ModelNews.

Fixtures in ``tests/fixtures/kernelbench``: ``problems`` (four small problems of our own: ReLU, matmul,
softmax with an init input, and a linear layer with parameters), ``honest`` (one ModelNew per problem in
both layouts), ``cheats`` (input mutation, replayed results, wrong dtype, a missing module) and ``late``
(right when checked, wrong when timed).
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from inner import InnerRun, run_inner

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kernelbench"
BASE = ("-p", "no:cacheprovider", "--cann-golden-cache=off")
PROBLEMS = ("1_ReLU", "2_Matmul", "3_Softmax", "1_Linear_GELU")


@pytest.fixture
def problems(pytester: pytest.Pytester) -> Path:
    import shutil

    shutil.copytree(FIXTURES / "problems", pytester.path / "problems")
    return pytester.path / "problems"


def grade(pytester, capsys, problems: Path, *args: str) -> InnerRun:
    return run_inner(pytester, capsys, problems, str(problems), *BASE, *args)


def statuses(run: InnerRun, problem: str) -> list[tuple]:
    return [(name, c.cann["status"], c.cann["failure_type"]) for name, c in sorted(run.cases.items())
            if name.startswith(problem + "[")]


def board(run: InnerRun) -> dict:
    return json.loads((run.root / "reports" / "leaderboard.json").read_text())


def test_problems_collect_as_items_with_levels_and_keywords(pytester, capsys, problems):
    result = pytester.runpytest(str(problems), "--collect-only", "-q", *BASE)
    assert "24 tests collected" in result.stdout.str()  # 4 problems x (5 trials + the timed case)
    result = pytester.runpytest(str(problems), "--collect-only", "-q", "-k", "relu", *BASE)
    assert "6/24 tests collected" in result.stdout.str()
    assert "problems/level1/1_ReLU.py::1_ReLU[timed]" in result.stdout.str()
    result = pytester.runpytest(str(problems), "--collect-only", "-q", "-m", "level2", "--cann-kb-trials=2", *BASE)
    assert "3/12 tests collected" in result.stdout.str()
    result = pytester.runpytest(str(problems), "--collect-only", "-q", "--cann-bench=cann", *BASE)
    assert "no tests collected" in result.stdout.str()


def test_self_check_runs_each_reference_as_the_candidate(pytester, capsys, problems):
    run = grade(pytester, capsys, problems, "--cann-source=@golden", "--cann-no-perf", "--cann-kb-trials=2")
    assert run.ret == 0, run.text
    assert len(run.cases) == 12 and all(c.cann["status"] == "passed" for c in run.cases.values())
    kb = board(run)["kernelbench"]
    assert kb["problems_correct"] == 4 and kb["fast_p"]["0"] == 1.0
    assert kb["fast_p"]["1"] == 0.0  # not timed: correct, but no speed-up to count


def test_honest_submission_is_graded_end_to_end(pytester, capsys, problems):
    junit = pytester.path / "junit.xml"
    markdown, html = pytester.path / "summary.md", pytester.path / "report.html"
    run = grade(pytester, capsys, problems, f"--cann-source={FIXTURES / 'honest'}", "--cann-guard=off",
                "--cann-kb-trials=2", "--cann-warmup=1", "--cann-repeat=2", f"--junitxml={junit}",
                "-o", f"cann_markdown={markdown}", f"--html={html}")
    assert run.ret == 0, run.text
    text = markdown.read_text()  # the same reports as CANN tasks: Markdown, HTML, junit, leaderboard
    assert "### KernelBench" in text and "4/4 problems correct" in text and "fast_1.5" in text
    assert "1_ReLU" in html.read_text()
    assert {c.cann["status"] for c in run.cases.values()} == {"passed"}
    kb = board(run)["kernelbench"]
    assert kb["problems_graded"] == 4 and kb["problems_correct"] == 4
    assert set(kb["fast_p"]) == {"0", "1", "1.5", "2"} and kb["speedup_geomean"] > 0
    timed = [p for p in kb["problems"] if p["speedup"]]
    assert len(timed) == 4 and all(p["t_cand_us"] > 0 and p["t_baseline_us"] > 0 for p in timed)
    assert math.isclose(kb["fast_p"]["1"], sum(p["speedup"] > 1 for p in timed) / 4)
    section = "\n".join(run.section())
    assert "kernelbench: 4/4 problems correct" in section and "fast_1.5" in section
    props = {p.get("name") for p in ET.parse(junit).iter("property")}
    assert {"cann_kb_speedup", "cann_t_cand_us", "cann_t_baseline_us", "cann_case"} <= props


def test_cheating_submissions_fail_for_what_they_did(pytester, capsys, problems):
    run = grade(pytester, capsys, problems, f"--cann-source={FIXTURES / 'cheats'}", "--cann-guard=off",
                "--cann-no-perf", "--cann-kb-trials=2")
    assert {s[1:] for s in statuses(run, "1_ReLU")} == {("failed", "input_mutated")}
    matmul = statuses(run, "2_Matmul")  # replays its first answer: only the first trial is right
    assert matmul[0][0] == "2_Matmul[timed]" and matmul[0][1:] == ("failed", "precision_mismatch")
    assert [s[1:] for s in matmul[1:]] == [("passed", None), ("failed", "precision_mismatch")]
    assert {s[1:] for s in statuses(run, "3_Softmax")} == {("failed", "compile_runtime_error")}
    assert {s[1:] for s in statuses(run, "1_Linear_GELU")} == {("missing", "not_provided")}
    kb = board(run)["kernelbench"]
    assert kb["problems_correct"] == 0 and kb["fast_p"]["0"] == 0.0
    assert {p["rel_path"]: p["status"] for p in kb["problems"]}["level2/1_Linear_GELU.py"] == "missing"


def test_right_only_when_checked_fails_the_timed_case(pytester, capsys, problems):
    run = grade(pytester, capsys, problems, f"--cann-source={FIXTURES / 'late'}", "--cann-guard=off",
                "--cann-kb-trials=1", "--cann-warmup=1", "--cann-repeat=2", "-k", "relu")
    assert statuses(run, "1_ReLU") == [("1_ReLU[timed]", "failed", "timed_output_wrong"),
                                       ("1_ReLU[trial1]", "passed", None)]


def test_the_guard_applies_to_modelnew(pytester, capsys, problems):
    run = grade(pytester, capsys, problems, f"--cann-source={FIXTURES / 'honest'}", "--cann-no-perf",
                "--cann-guard=strict", "--cann-kb-trials=1", "-k", "relu")
    assert {s[1:] for s in statuses(run, "1_ReLU")} == {("failed", "builtin_compute")}


def test_a_problem_over_the_input_budget_is_skipped_not_graded(pytester, capsys, problems):
    run = grade(pytester, capsys, problems, "--cann-source=@golden", "--cann-no-perf", "--cann-kb-trials=1",
                "-o", "cann_kb_max_input_gib=0.00005", "-k", "relu or matmul")
    assert {s[1:] for s in statuses(run, "1_ReLU")} == {("skipped", "too_large")}  # 64 KiB of input
    assert {s[1:] for s in statuses(run, "2_Matmul")} == {("passed", None)}  # 18 KiB
    kb = board(run)["kernelbench"]
    assert (kb["problems_total"], kb["problems_graded"], kb["problems_correct"]) == (2, 1, 1)


def test_parameters_are_copied_by_name_and_shape():
    import torch

    from pytest_cannbench.kernelbench.problem import copy_parameters

    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    state = {"0.weight": torch.ones(2, 3), "0.bias": torch.ones(5), "1.running_mean": torch.full((2,), 7.0),
             "extra": torch.zeros(1)}
    assert copy_parameters(model, state) == (2, 2)
    assert torch.equal(model[0].weight, torch.ones(2, 3)) and not torch.equal(model[0].bias, torch.ones(2))
    assert torch.equal(model[1].running_mean, torch.full((2,), 7.0))


def test_submission_layouts(tmp_path):
    from pytest_cannbench.submission.kernelbench import looks_like, module_for, prepare

    source = tmp_path / "sub"
    for rel in ("19_ReLU/ai_op.py", "level1/20_LeakyReLU.py", "Tanh/ai_op.py", "notes/readme.py"):
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text("class ModelNew:\n    pass\n" if "readme" not in rel else "x = 1\n")
    assert looks_like(str(source))
    state = prepare(str(source))
    try:
        assert state.ok and len(state.interfaces) == 3
        found = {p: module_for(state, p) for p in ("level1/19_ReLU.py", "level1/20_LeakyReLU.py", "level1/22_Tanh.py",
                                                   "level1/21_Sigmoid.py")}
        assert found["level1/19_ReLU.py"].endswith("19_ReLU/ai_op.py")
        assert found["level1/20_LeakyReLU.py"].endswith("level1/20_LeakyReLU.py")
        assert found["level1/22_Tanh.py"].endswith("Tanh/ai_op.py") and found["level1/21_Sigmoid.py"] is None
    finally:
        from pytest_cannbench.submission.build import cleanup

        cleanup(state)
    (source / "build.sh").write_text("true\n")
    assert not looks_like(str(source))  # a CANN submission


def test_fast_p_and_geomean_follow_kernelbench():
    from pytest_cannbench.report.kernelbench import section

    def case(rel, cid, status, cand=None, base=None):
        timing = {"measured": cand is not None, "t_cand_us": cand, "t_baseline_us": base}
        return {"key": f"{rel}_{cid}", "rel_path": rel, "operator": rel, "case_id": cid, "status": status,
                "failure_type": None if status == "passed" else "precision_mismatch", "timing": timing}

    outcomes = [case("l1/a.py", 1, "passed"), case("l1/a.py", 2, "passed", 10.0, 30.0),  # x3
                case("l1/b.py", 1, "passed"), case("l1/b.py", 2, "passed", 10.0, 12.0),  # x1.2
                case("l1/c.py", 1, "failed"), case("l1/c.py", 2, "passed", 1.0, 100.0),  # wrong: never counts
                case("l1/d.py", 1, "skipped"), case("l1/d.py", 2, "skipped"),  # not graded
                {"key": "level1/exp_1", "rel_path": "level1/exp", "case_id": 1, "status": "passed"}]  # CANN
    kb = section(outcomes)
    assert (kb["problems_total"], kb["problems_graded"], kb["problems_correct"]) == (4, 3, 2)
    assert kb["fast_p"] == {"0": 2 / 3, "1": 2 / 3, "1.5": 1 / 3, "2": 1 / 3}
    assert math.isclose(kb["speedup_geomean"], math.sqrt(3.0 * 1.2))
    assert section([outcomes[-1]]) is None

"""Many submissions in one session: several --cann-source directories and a KernelBench generation directory
(one candidate per sample), one golden per case for all of them, boards per candidate and pass@k.

``tests/fixtures/kernelbench/generations/run1`` (KernelBench's runs/<run>/ layout): problem 1 (ReLU) has
samples 0 and 1 right and 2 wrong; problem 2 (Matmul) has sample 0 right, sample 1 killing its worker and no
sample 2. ``honest`` is a fourth candidate, right on both.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from inner import run_inner

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kernelbench"
BASE = ("-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-no-perf", "--cann-kb-trials=2",
        "-k", "ReLU or Matmul")
CANDIDATES = ("run1_s0", "run1_s1", "run1_s2", "honest")


@pytest.fixture
def problems(pytester: pytest.Pytester) -> Path:
    shutil.copytree(FIXTURES / "problems" / "level1", pytester.path / "problems" / "level1")
    return pytester.path / "problems"


def test_candidates_expand_and_keep_their_names():
    from pytest_cannbench.submission.generations import expand, problem_number, sample_module

    gen, honest = str(FIXTURES / "generations" / "run1"), str(FIXTURES / "honest")
    assert [(c.name, c.sample) for c in expand([gen, honest, honest])] == [
        ("run1_s0", 0), ("run1_s1", 1), ("run1_s2", 2), ("honest", None), ("honest_2", None)]
    assert problem_number("level1/19_ReLU.py") == (1, 19) and problem_number("x.py") == (None, None)
    assert sample_module(Path(gen), 2, "level1/2_Matmul.py") is None
    assert sample_module(Path(gen), 1, "level1/2_Matmul.py").name == "level_1_problem_2_sample_1_kernel.py"


def test_pass_at_k_is_the_unbiased_estimator():
    from math import comb

    from pytest_cannbench.report.passk import pass_at_k

    for n, c, k in [(4, 3, 1), (4, 2, 2), (10, 3, 5), (5, 0, 2), (5, 5, 5)]:
        assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_a_generation_directory_and_a_plain_one_are_graded_in_one_session(pytester, capsys, problems):
    junit = pytester.path / "junit.xml"
    run = run_inner(pytester, capsys, problems, str(problems), *BASE, f"--junitxml={junit}",
                    f"--cann-source={FIXTURES / 'generations' / 'run1'}", f"--cann-source={FIXTURES / 'honest'}")
    got = {name: c.cann["status"] for name, c in run.cases.items()}
    for cand in CANDIDATES:  # every case once per candidate, the candidate in the test id
        assert {f"1_ReLU[trial1][cand={cand}]", f"2_Matmul[timed][cand={cand}]"} <= set(got), sorted(got)
    relu = {cand: {s for n, s in got.items() if n.startswith("1_ReLU") and n.endswith(f"[cand={cand}]")}
            for cand in CANDIDATES}
    assert relu == {"run1_s0": {"passed"}, "run1_s1": {"passed"}, "run1_s2": {"failed"}, "honest": {"passed"}}
    matmul = {cand: {s for n, s in got.items() if n.startswith("2_Matmul") and n.endswith(f"[cand={cand}]")}
              for cand in CANDIDATES}  # run1_s1's crashes cost only its own cases
    assert matmul == {"run1_s0": {"passed"}, "run1_s1": {"crashed"}, "run1_s2": {"missing"}, "honest": {"passed"}}

    # one golden per case for all candidates: computed by the first candidate that needed it, shared after
    computed = Counter(c.cann["rel_path"] + f"_{c.cann['case_id']}" for c in run.cases.values()
                       if c.cann["status"] != "missing" and not c.cann["golden_cached"])
    assert computed == {f"level1/{p}.py_{i}": 1 for p in ("1_ReLU", "2_Matmul") for i in (1, 2, 3)}

    board = json.loads((run.root / "reports" / "leaderboard.json").read_text())
    assert set(board["candidates"]) == set(CANDIDATES)
    assert board["candidates"]["honest"]["kernelbench"]["problems_correct"] == 2
    assert board["candidates"]["run1_s2"]["kernelbench"]["problems_correct"] == 0
    rows = {r["rel_path"]: r for r in board["summary"]["problems"]}
    assert (rows["level1/1_ReLU.py"]["samples"], rows["level1/1_ReLU.py"]["correct"]) == (4, 3)
    assert (rows["level1/2_Matmul.py"]["samples"], rows["level1/2_Matmul.py"]["correct"]) == (4, 2)
    assert board["summary"]["pass_at_k"]["1"] == pytest.approx((0.75 + 0.5) / 2)
    assert board["summary"]["pass_at_k"]["2"] == pytest.approx((1.0 + (1 - 1 / 6)) / 2)
    assert any("pass@1 62.5%" in line for line in run.section()), run.section()
    names = {tc.get("name") for tc in ET.parse(junit).getroot().iter("testcase")}
    assert "2_Matmul[timed][cand=run1_s1]" in names

    from pytest_cannbench.report.merge import merge

    for source in (run.root / "reports" / "leaderboard.json", run.root / "reports" / "results.jsonl"):
        merged = merge([str(source)])  # cannbench merge rebuilds the boards per candidate from either input
        assert set(merged["candidates"]) == set(CANDIDATES), source
        assert merged["summary"]["pass_at_k"] == board["summary"]["pass_at_k"]

    resumed = run_inner(pytester, capsys, problems, str(problems), *BASE, "--cann-resume",
                        f"--cann-source={FIXTURES / 'generations' / 'run1'}", f"--cann-source={FIXTURES / 'honest'}")
    assert {c.outcome for c in resumed.cases.values()} == {"skipped"}  # every candidate's case was recorded
    again = json.loads((run.root / "reports" / "leaderboard.json").read_text())
    assert again["summary"]["pass_at_k"] == board["summary"]["pass_at_k"]


SOFTPLUS = '''import torch


def softplus(x, beta=1.0, threshold=20.0):
    return torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold).to(x.dtype).contiguous()
'''
SEGFAULT = '''import ctypes


def softplus(x, beta=1.0, threshold=20.0):
    ctypes.string_at(0)
'''


def test_cann_wheels_many_at_a_time_each_with_its_own_build(pytester, capsys, task_tree):
    from inner import make_wheel

    tasks = task_tree("submission")
    good, crash, broken = (Path(pytester.path) / n for n in ("good", "crash", "broken"))
    make_wheel(good / "dist", {"cann_bench/__init__.py": SOFTPLUS})
    make_wheel(crash / "dist", {"cann_bench/__init__.py": SEGFAULT})
    broken.mkdir()  # neither a wheel nor a build.sh: its own compile_failed, nobody else's
    run = run_inner(pytester, capsys, tasks, "--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off",
                    "--cann-no-perf", "-k", "softplus", f"--cann-source={good}", f"--cann-source={crash}",
                    f"--cann-source={broken}")
    got = {name: c.cann["status"] for name, c in run.cases.items()}
    assert got == {f"softplus[0{i}][cand={cand}]": status for i in range(1, 5)
                   for cand, status in (("good", "passed"), ("crash", "crashed"), ("broken", "compile_failed"))}
    computed = Counter(c.cann["rel_path"] + f"_{c.cann['case_id']}" for c in run.cases.values()
                       if c.cann["status"] != "compile_failed" and not c.cann["golden_cached"])
    assert computed == {f"level1/softplus_{i}": 1 for i in range(1, 5)}  # one golden per case, two candidates
    board = json.loads((run.root / "reports" / "leaderboard.json").read_text())
    scores = {name: b["total_score"] for name, b in board["candidates"].items()}
    assert set(scores) == {"good", "crash", "broken"}, scores
    assert scores["good"] > 0 and scores["crash"] == 0 and scores["broken"] == 0

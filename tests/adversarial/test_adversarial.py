"""The adversarial suite: every attack scores 0 with the failure it deserves; an honest submission scores in full.

Each attack runs in its own inner session (one submission per session), timed like a real run but with few
calls, so both the correctness and the timing paths are attacked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from attacks import ATTACKS, CACHE_PRELUDE, HONEST
from inner import make_wheel, run_inner

ARGS = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-repeat=2",
        "--cann-warmup=1", "--cann-case-timeout=60")
SOFTPLUS = ("softplus[01]", "softplus[02]", "softplus[03]", "softplus[04]")


def grade(pytester, capsys, task_tree, code: str):
    tasks = task_tree("submission")
    source = Path(pytester.path) / "sub"
    make_wheel(source / "dist", {"cann_bench/__init__.py": CACHE_PRELUDE + code})
    run = run_inner(pytester, capsys, tasks, *ARGS, f"--cann-source={source}")
    board = json.loads((Path(pytester.path) / "reports" / "leaderboard.json").read_text())
    softplus = next(op for op in board["operators"] if op["rel_path"] == "level1/softplus")
    return run, softplus


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_scores_zero(attack, pytester, capsys, task_tree):
    run, softplus = grade(pytester, capsys, task_tree, attack.code)
    for name in SOFTPLUS:
        case = run.cases[name]
        assert case.outcome != "passed", (name, case.cann)
        assert case.cann["failure_type"] in attack.expect, (name, case.cann["failure_type"], case.cann["message"])
    # Nothing for function or performance. The official formula keeps the compile/runtime part for a pure
    # precision failure (the kernel ran and returned a well-formed tensor); every other failure loses it too.
    assert softplus["cases_passed"] == 0 and softplus["function_score"] == 0 and softplus["performance_score"] == 0
    precision_only = sum(run.cases[name].cann["failure_type"] == "precision_mismatch" for name in SOFTPLUS)
    assert softplus["score"] == pytest.approx(20 * precision_only / len(SOFTPLUS)), softplus


def test_honest_submission_keeps_its_full_score(pytester, capsys, task_tree):
    run, softplus = grade(pytester, capsys, task_tree, HONEST)
    assert all(run.cases[name].outcome == "passed" for name in SOFTPLUS)
    assert softplus["compile_score"] == 20.0 and softplus["function_score"] == 30.0
    assert softplus["performance_score"] > 0

"""Issue 19: the plugin at home in the user's world: inert in unrelated runs, within inherited limits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PROBLEM = '''import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return [torch.ones(2)]


def get_init_inputs():
    return []
'''


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_inert_in_an_unrelated_project(pytester: pytest.Pytester) -> None:
    """A plain project, even one holding a KernelBench-looking file, gets no file, line or section of ours."""
    pytester.makepyfile(test_x="def test_x():\n    assert 1 + 1 == 2\n")
    (pytester.path / "level1").mkdir()
    (pytester.path / "level1" / "1_Looks_Like_A_Problem.py").write_text(PROBLEM)
    before = _files(pytester.path)
    result = pytester.runpytest_subprocess("--html=page.html", "-v", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1)  # the problem file was not collected
    made = _files(pytester.path) - before
    assert {f for f in made if not f.startswith("assets/")} - {"stdout", "stderr"} == {"page.html"}, made
    # pytest's "plugins: cannbench-..." line (and pytest-metadata's) lists every installed plugin; nothing else may
    ours = [line for line in result.outlines
            if re.search(r"cann", line, re.I) and not line.startswith(("plugins:", "metadata:"))]
    assert ours == []
    page = (pytester.path / "page.html").read_text()
    assert not re.search(r"CANN[- ]Bench|cannbench:|[Ll]eaderboard", page)


AXPY = '''import torch


def axpy(x, b, alpha=1.0):
    return (alpha * x.float() + b.float()).to(x.dtype).contiguous()
'''


def _grade_under(root: Path, limits: list[str], name: str) -> tuple[dict[str, str], str]:
    """A subprocess pytest grading tests/fixtures/basic with a hand-made axpy wheel under ``prlimit limits``."""
    import json
    import shutil
    import subprocess
    import sys

    report = root / f"reports-{name}"
    cmd = ["prlimit", *limits, "--", sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--cann-tasks=tasks",
           f"--cann-source={root / 'sub'}", "--cann-golden-cache=off", "--cann-no-perf", "--cann-guard=off",
           f"--cann-report-dir={report}"]
    assert shutil.which("prlimit"), "prlimit (util-linux) is needed"
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600, check=False)
    board = json.loads((report / "leaderboard.json").read_text())
    statuses = {case["key"]: case["status"] for op in board["operators"] for case in op["cases"]}
    return statuses, done.stdout + done.stderr


def test_inherited_limits_grade_exactly_as_an_unlimited_run(pytester: pytest.Pytester, task_tree) -> None:
    """``prlimit --as=16G`` (the golden worker's 80%-of-RAM budget used to exceed it) and ``ulimit -n 256``."""
    from inner import make_wheel

    task_tree("basic")
    make_wheel(pytester.path / "sub" / "dist", {"cann_bench/__init__.py": AXPY})
    free, _ = _grade_under(pytester.path, [], "free")
    assert free and set(free.values()) == {"passed"}, free
    for name, limits in (("as16g", ["--as=17179869184"]), ("nofile256", ["--nofile=256"])):
        graded, text = _grade_under(pytester.path, limits, name)
        assert graded == free, (name, text[-3000:])
        if name == "as16g":
            assert "budgets: golden worker address space 16.0 GiB" in text, text[:3000]

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
    # pytest's "plugins: cannbench-..." (and pytest-metadata's) header line lists every installed plugin; nothing else may mention us
    ours = [line for line in result.outlines if re.search(r"cann", line, re.I) and not line.startswith(("plugins:", "metadata:"))]
    assert ours == []
    page = (pytester.path / "page.html").read_text()
    assert not re.search(r"CANN[- ]Bench|cannbench:|[Ll]eaderboard", page)

"""Kernel coverage under KernelBench's default rule, end to end with real extensions compiled at import.

``tests/fixtures/kernelbench/coverage``: one softmax problem (512 x 4096: a few ms of work a forward), an honest
ModelNew whose C++ kernel computes the whole softmax (a reshape around it), and a decoy that compiles the same
kernel, runs it on one element in every forward (KernelBench's own rule holds) and returns ``torch.softmax``.
Under the default rule the decoy fails every item as ``low_kernel_coverage`` (also under ``-n 2``) and the honest
kernel passes; KernelBench's own rule, kept by name, passes the decoy with its coverage as a flag.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from inner import InnerRun, run_inner

COVERAGE = Path(__file__).parents[1] / "fixtures" / "kernelbench" / "coverage"
BASE = ("-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-guard=block", "--cann-kb-trials=2")


@pytest.fixture
def problems(pytester: pytest.Pytester) -> Path:
    shutil.copytree(COVERAGE / "problems", pytester.path / "problems")
    return pytester.path / "problems"


def items_of(run: InnerRun, candidate: str = "") -> dict[str, dict]:
    suffix = f"[cand={candidate}]" if candidate else ""
    return {name: c.cann for name, c in run.cases.items() if name.endswith(suffix) and c.cann}


def test_a_decoy_fails_every_item_and_the_honest_kernel_passes(pytester, capsys, problems):
    run = run_inner(pytester, capsys, problems, str(problems), *BASE, f"--cann-source={COVERAGE / 'honest'}",
                    f"--cann-source={COVERAGE / 'decoy'}", "-n", "2", "--cann-warmup=1", "--cann-repeat=3",
                    "--junitxml=junit.xml")
    honest, decoy = items_of(run, "honest"), items_of(run, "decoy")
    assert len(honest) == len(decoy) == 3, run.text[-3000:]
    assert {c["status"] for c in honest.values()} == {"passed"}, [c["message"] for c in honest.values()]
    assert {(c["status"], c["failure_type"]) for c in decoy.values()} == {("failed", "low_kernel_coverage")}, \
        [c["message"] for c in decoy.values()]
    for name, case in {**honest, **decoy}.items():  # trials and timed alike carry the coverage and the flags
        share = case["kernel_coverage"]["share"]
        assert (share >= 0.6) if name in honest else (share < 0.2), (name, case["kernel_coverage"])
        assert any(f.startswith("guard: kernel_coverage: ") for f in case["flags"]), (name, case["flags"])
    assert all(any(f.startswith("guard: builtin_compute: ") for f in c["flags"]) for c in decoy.values())
    assert all("under the 50% a KernelBench forward must do in its own kernels" in c["message"]
               for c in decoy.values())
    board = json.loads((run.root / "reports" / "leaderboard.json").read_text())
    sections = {name: sub["kernelbench"]["problems"][0] for name, sub in board["candidates"].items()}
    assert sections["honest"]["correct"] and sections["honest"]["kernel_coverage"] >= 0.6
    assert not sections["decoy"]["correct"] and sections["decoy"]["kernel_coverage"] < 0.2
    scores = {op["rel_path"]: op["score"] for op in board["candidates"]["decoy"]["operators"]}
    assert scores == {"level1/3_Softmax.py": 0.0}
    props = {p.get("name") for p in ET.parse(run.root / "junit.xml").iter("property")}
    assert "cann_kb_coverage" in props


def test_kernelbench_s_own_rule_kept_by_name_passes_the_decoy_with_its_coverage_flagged(pytester, capsys, problems):
    run = run_inner(pytester, capsys, problems, str(problems), *BASE, f"--cann-source={COVERAGE / 'decoy'}",
                    "--cann-guard=kernelbench", "--cann-no-perf", "--cann-kb-trials=1")
    cases = items_of(run)
    assert {c["status"] for c in cases.values()} == {"passed"}, run.text[-3000:]
    for case in cases.values():
        assert case["kernel_coverage"]["share"] < 0.2
        assert any("no floor (--cann-guard kernelbench)" in f for f in case["flags"]), case["flags"]

"""A judge's spare worker: started before its candidate exists (what the service does between requests), then
given the candidate built into the directory it shows. It must grade exactly as a worker started afterwards:
same sandbox, same guard, same failures, and nothing left behind when it is not used."""

from __future__ import annotations

from pathlib import Path

import pytest
from inner import make_wheel

from pytest_cannbench import outcome as oc
from pytest_cannbench.core import Grader
from pytest_cannbench.options import settings_for

ROOT = Path(__file__).resolve().parents[2]
HONEST_SELECT = "gelu and 01"
# computes gelu with torch's own kernel: refused under the block guard whichever worker imports it
BUILTIN = 'import torch\n\n\ndef gelu(x, approximate="none"):\n    return torch.nn.functional.gelu(x)\n'
RAISES_AT_IMPORT = 'raise RuntimeError("broken at import")\n'


def _wheel(tmp_path: Path, name: str, module: str) -> Path:
    make_wheel(tmp_path / name / "dist", {"cann_bench/__init__.py": module})
    return tmp_path / name


@pytest.fixture(scope="module")
def grader(tmp_path_factory: pytest.TempPathFactory):
    reports = tmp_path_factory.mktemp("spare-reports")
    with Grader(settings_for(tasks=str(ROOT / "tasks"), perf=False, report_dir=str(reports), seed=0)) as made:
        yield made


def test_the_spare_is_the_worker_that_grades_and_it_is_sandboxed_and_guarded(
    grader: Grader, prebuilt, tmp_path: Path
) -> None:
    case = grader.cases(select=HONEST_SELECT)[0]
    grader.start_spare()
    spare = grader.judge.spare
    assert spare is not None and spare.proc is not None
    state = grader.prepare(prebuilt("cpp_cpu"), name="honest")
    assert state.ok, state.message
    assert state.session_dir == str(Path(spare.site_dir).parent)  # built into the directory the spare shows
    assert grader.judge.worker("candidate", "honest") is spare and grader.judge.spare is None
    assert spare.sandboxed == grader.controller.box().choice.on
    assert grader.grade(case, candidate="honest").status == oc.PASSED
    grader.drop("honest")
    assert not Path(state.session_dir).exists()

    grader.start_spare()
    state = grader.prepare(_wheel(tmp_path, "builtin", BUILTIN), name="builtin")
    assert state.ok, state.message
    got = grader.grade(case, candidate="builtin")
    assert got.status != oc.PASSED and got.failure_type == oc.BUILTIN_COMPUTE, (got.status, got.message)
    grader.drop("builtin")


def test_a_candidate_the_spare_cannot_import_fails_at_import(grader: Grader, tmp_path: Path) -> None:
    grader.start_spare()
    state = grader.prepare(_wheel(tmp_path, "raises", RAISES_AT_IMPORT), name="raises")
    assert not state.ok and state.status == "import_failed", (state.status, state.message)
    assert "broken at import" in state.message
    grader.drop("raises")


def test_a_spare_whose_candidate_does_not_build_goes_with_it(grader: Grader, prebuilt) -> None:
    grader.start_spare()
    spare = grader.judge.spare
    assert spare is not None and spare.proc is not None
    proc = spare.proc
    state = grader.prepare(ROOT / "examples" / "broken" / "build_error", name="no-build")
    assert not state.ok and state.status == "compile_failed", (state.status, state.message)
    session = Path(state.session_dir)
    grader.drop("no-build")
    assert grader.judge.spare is None and proc.poll() is not None  # killed, not left waiting
    assert not session.exists()
    # the next candidate starts its own worker (no spare waits) and grades as usual
    state = grader.prepare(prebuilt("cpp_cpu"), name="after")
    assert state.ok, state.message
    assert grader.grade(grader.cases(select=HONEST_SELECT)[0], candidate="after").status == oc.PASSED
    grader.drop("after")


def test_a_candidate_s_worker_is_shown_its_own_install_and_no_other(grader: Grader, prebuilt, tmp_path: Path) -> None:
    first = grader.prepare(prebuilt("cpp_cpu"), name="first")
    second = grader.prepare(_wheel(tmp_path, "second", 'def gelu(x, approximate="none"):\n    return x\n'),
                            name="second")
    assert first.ok and second.ok, (first.message, second.message)
    shown = grader.judge.worker("candidate", "second").readable
    assert second.session_dir in shown and first.session_dir not in shown, shown
    grader.drop("first")
    grader.drop("second")
    assert not Path(first.session_dir).exists() and not Path(second.session_dir).exists()

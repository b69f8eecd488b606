"""The JIT build stage split over several build children (``submission.jit_build.run_jit_build``): every module
is imported by exactly one child, the children's manifests and logs are merged, and a module that did not
import is named with its own message or its child's fate. Real children (``jit_main`` through the build
stage's own runner, without the sandbox); the modules compile nothing, so the test is about the split."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from pytest_cannbench.submission import jit_build
from pytest_cannbench.submission.build import _build_env, _run


@pytest.mark.parametrize("children", [1, 3])
def test_every_module_is_imported_once_and_the_records_are_merged(children, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jit_build, "jobs", lambda items, cores=None: min(items, children))
    sources = tmp_path / "gen"
    sources.mkdir()
    modules = {}
    for i in range(5):
        path = sources / f"m{i}.py"
        path.write_text(f"print('imported m{i}')\n" if i != 3 else "raise RuntimeError('m3 does not build')\n")
        modules[f"m{i}.py"] = path
    site, work, logs = tmp_path / "site", tmp_path / "work", tmp_path / "logs"
    site.mkdir()
    work.mkdir()
    done = jit_build.run_jit_build(site, work, logs, 120, runner=functools.partial(_run), env=_build_env(work),
                                   modules=modules)
    record = json.loads(done.manifest.read_text())
    assert set(record["modules"]) == set(modules)
    assert set(done.failures) == {"m3.py"} and "m3 does not build" in done.failures["m3.py"]
    log = (logs / "jit_build.log").read_text()
    assert all(log.count(f"imported m{i}") == 1 for i in (0, 1, 2, 4)), log
    assert sorted(p.name for p in logs.iterdir()) == ["jit_build.log"]  # the children's logs are folded in
    assert sorted(p.name for p in done.manifest.parent.iterdir()) == ["manifest.json"]


def test_a_child_that_runs_out_of_time_names_only_its_own_modules(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jit_build, "jobs", lambda items, cores=None: 2)
    sources = tmp_path / "gen"
    sources.mkdir()
    (sources / "slow.py").write_text("import time\ntime.sleep(60)\n")
    (sources / "quick.py").write_text("x = 1\n")
    site, work, logs = tmp_path / "site", tmp_path / "work", tmp_path / "logs"
    site.mkdir()
    work.mkdir()
    done = jit_build.run_jit_build(site, work, logs, 8, runner=functools.partial(_run), env=_build_env(work),
                                   modules={"slow.py": sources / "slow.py", "quick.py": sources / "quick.py"})
    assert set(done.failures) == {"slow.py"} and "did not finish within 8 s" in done.failures["slow.py"]

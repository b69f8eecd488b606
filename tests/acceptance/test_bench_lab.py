"""The official repository's bench_lab trees, as variants of our own (tests/fixtures/bench_lab):

* ``lab/``: a bench root not named ``tasks`` with ``metadata/`` and level directories (kernel_bench,
  pypto_cann_bench), the tree's own ``test_baseline_perf.py`` (one basename in several directories) and a
  ``verify_*.py`` script beside each operator;
* ``flat/``: operators straight under a root with ``metadata/`` (cv_agent_fa_bench, omni-ops_bench), cases whose
  attrs describe the shapes without being declared or taken by the golden, a ``cases.csv`` with ``case_id``
  first and Python-literal columns.

A cannbench run grades the tree and nothing else of it; every way of naming the tree gives a case the same key,
run or unrun; warnings are one per operator and say what to do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_cannbench.nodes.items import CannTaskWarning, case_key
from pytest_cannbench.nodes.keys import key_from_nodeid

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bench_lab"
BASE = ("-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-no-perf")
LAB_KEYS = [f"level1/affine_lab_{i}" for i in (1, 2, 3, 4)] + [f"level5/affine_deep_{i}" for i in (1, 2, 3)]
CONFTEST = "raise RuntimeError('a conftest.py inside the task tree was loaded')\n"


@pytest.fixture
def bench(pytester: pytest.Pytester) -> Path:
    shutil.copytree(FIXTURE, pytester.path / "bench")
    return pytester.path / "bench"


def _task_warnings(reprec: pytest.HookRecorder) -> list[str]:
    return [str(call.warning_message.message) for call in reprec.getcalls("pytest_warning_recorded")
            if issubclass(call.warning_message.category, CannTaskWarning)]


def _keys(items: list[pytest.Item]) -> list[str | None]:
    return [case_key(item) for item in items]


def test_a_task_tree_yields_task_items_only(pytester, bench) -> None:
    """The tree's own test modules, scripts and conftest.py files are never collected or loaded, whichever
    directory --cann-tasks names (without the fix: 'import file mismatch' and the modules' own errors)."""
    for where in ("lab", "lab/level1", "lab/level1/affine_lab"):
        (bench / where / "conftest.py").write_text(CONFTEST)
    for target, expected in (("lab", LAB_KEYS), ("lab/level5", LAB_KEYS[4:]),
                             ("lab/level1/affine_lab", LAB_KEYS[:4])):
        items, reprec = pytester.inline_genitems(f"--cann-tasks=bench/{target}", "-p", "no:cacheprovider")
        failed = [str(r.longrepr) for r in reprec.getreports("pytest_collectreport") if r.failed]
        assert not failed, (target, failed)
        assert _keys(items) == expected, target
        assert all(item.path.name == "cases.yaml" for item in items)


def test_a_test_module_named_as_a_path_is_collected_as_pytest_would(pytester, bench) -> None:
    """pytest never asks a plugin whether to collect a path on its command line: naming the tree's own test
    module runs it (here it raises at import, so collection fails naming it)."""
    module = bench / "lab" / "level1" / "affine_lab" / "test_baseline_perf.py"
    _, reprec = pytester.inline_genitems("--cann-source=@golden", str(module), "-p", "no:cacheprovider")
    failed = [str(r.longrepr) for r in reprec.getreports("pytest_collectreport") if r.failed]
    assert failed and "the task tree's own test module was imported" in failed[0]


def test_warnings_are_one_per_operator_and_actionable(pytester, bench) -> None:
    """Descriptive attrs (neither declared nor taken by the golden: the official harness passes them to no one)
    are no warning; an attr the golden takes but proto.yaml does not declare, a misspelt one and dtypes off
    proto.yaml's list are, folded into one warning for the operator with the cases they concern. A cases.csv
    with another column order and Python-literal columns agrees with its cases.yaml. A value_range entry that is
    a mapping (kernel_bench's {name: nd, mean, std}) is read as no range, as the official generator reads it."""
    _, reprec = pytester.inline_genitems("--cann-tasks=bench", "-p", "no:cacheprovider")
    mapping, message = sorted(_task_warnings(reprec), key=lambda w: "attn_like" in w)
    assert mapping == (f"{bench / 'lab' / 'level1' / 'affine_lab' / 'cases.yaml'}: case_id 4: value_range entries "
                       "that are mappings (such as {name: nd, mean: ..., std: ...}) are no range: the official "
                       "generator draws those inputs from its default range ([0, 1) for floats, [0, 100] for "
                       "integers), and so does this one; write [lo, hi] to mean one")
    assert message.startswith(f"{bench / 'flat' / 'attn_like'}: 4 task warnings:"), message
    lines = message.splitlines()[1:]
    cases = bench / "flat" / "attn_like" / "cases.yaml"
    assert lines == [
        f"  - {cases}: case_id 2: attrs 'scale' are not declared in proto.yaml, yet the golden takes them and the "
        "candidate is called with them: declare them under operator.attrs",
        f"  - {cases}: case_id 2-3 (2 cases): input 'k' has dtype 'float16', not among proto's ['float32']",
        f"  - {cases}: case_id 3: attr 'scael' is neither declared in proto.yaml nor a golden parameter, so it "
        "reaches neither the golden nor the candidate: did you mean 'scale'?",
        f"  - {cases}: case_id 4: value_range is a mapping by input name: read as one entry per input (the official "
        "generator fails on it, KeyError 0); a list in proto.yaml's input order works in both",
    ], message
    assert "batch_size" not in message and "cases.csv" not in message


def test_two_trees_with_one_rel_path_do_not_share_keys(pytester, bench) -> None:
    """bench_lab holds cv_agent_fa_bench/flash_attention and tilelang_ascend_bench/flash_attention, each
    `flash_attention` under its own bench root: named together (bench_lab itself), their case keys collided and the
    board kept one of each pair. The second tree's operator is now a task error saying so."""
    shutil.copytree(bench / "flat", bench / "flat2")
    items, _ = pytester.inline_genitems("--cann-tasks=bench", "-p", "no:cacheprovider")
    names = [item.name for item in items if "attn_like" in item.name]
    assert names == [f"attn_like[0{i}]" for i in (1, 2, 3, 4)] + ["attn_like[task]"]
    (broken,) = [item for item in items if item.name == "attn_like[task]"]
    assert "are those of" in broken.error and "grade each tree in a session of its own" in broken.error
    assert case_key(broken) == "flat2/attn_like_task"


def test_the_golden_and_the_candidate_get_the_golden_parameters_only(pytester, bench) -> None:
    """Self-check of both trees: the goldens take no **kwargs, so a descriptive attr passed on would fail them;
    every case passes, filed under its level."""
    reprec = pytester.inline_run("--cann-tasks=bench", "--cann-source=@golden", *BASE)
    outcomes = {r.cann["key"]: r.cann["status"] for r in reprec.getreports("pytest_runtest_logreport")
                if getattr(r, "cann", None) is not None}
    assert outcomes == {**{k: "passed" for k in LAB_KEYS}, **{f"attn_like_{i}": "passed" for i in (1, 2, 3, 4)}}


def test_every_way_of_naming_the_tree_gives_the_same_keys(pytester, bench) -> None:
    """A bench root, a level directory, an operator directory, a cases.yaml, as --cann-tasks or as paths, from
    a directory inside or outside the tree: each case's key is the same, and the controller of an interrupted
    session (which collects nothing) reads the same key back from the node id."""
    deep = [k for k in LAB_KEYS if k.startswith("level5/")]
    namings = {"bench/lab": LAB_KEYS, "bench/lab/level5": deep, "bench/lab/level5/affine_deep": deep,
               "bench/lab/level5/affine_deep/cases.yaml": deep}
    outside = pytester.path / "elsewhere"
    outside.mkdir()
    for target, expected in namings.items():
        for args, cwd in (((f"--cann-tasks={target}",), pytester.path), ((target,), pytester.path),
                          ((f"--cann-tasks={pytester.path / target}",), outside),
                          ((str(pytester.path / target),), outside)):
            os.chdir(cwd)
            items, _ = pytester.inline_genitems(*args, "-p", "no:cacheprovider", "--rootdir", str(cwd))
            assert _keys(items) == expected, (args, cwd)
            config = items[0].config
            from pytest_cannbench.nodes.keys import initial_paths

            read_back = [key_from_nodeid(item.nodeid, config.rootpath, 5, initial_paths(config)) for item in items]
            assert read_back == expected, (args, cwd, [item.nodeid for item in items])
    os.chdir(pytester.path)


def test_an_interrupted_session_on_a_level_directory_files_unrun_cases_under_their_level(pytester, bench) -> None:
    """SIGTERM to a -n 2 session started on a level directory from a directory outside the tree: node ids are
    relative to the level directory, and the controller, reading keys back from them, filed the unrun cases
    under 'affine_deep' beside 'level5/affine_deep' (an operator per name, a level called 'other')."""
    cases_yaml = bench / "lab" / "level5" / "affine_deep" / "cases.yaml"
    cases_yaml.write_text(cases_yaml.read_text().replace("attrs: {", "attrs: {delay_s: 600.0, "))
    run = pytester.path / "run"
    run.mkdir()
    cmd = [sys.executable, "-m", "pytest", *BASE, f"--cann-tasks={bench / 'lab' / 'level5'}", "--cann-source=@golden",
           "-n", "2"]
    proc = subprocess.Popen(cmd, cwd=run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    logs = run / "reports" / "logs"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if logs.is_dir() and len(list(logs.glob("golden-worker-gw*.log"))) >= 2:
            break
        time.sleep(0.2)
    time.sleep(3)  # each xdist worker sleeps in a case's golden
    os.killpg(proc.pid, signal.SIGTERM)
    out = proc.communicate(timeout=120)[0].decode(errors="replace")
    board = json.loads((run / "reports" / "leaderboard.json").read_text())
    assert [op["rel_path"] for op in board["operators"]] == ["level5/affine_deep"], out[-3000:]
    cases = {c["key"]: c["status"] for op in board["operators"] for c in op["cases"]}
    assert cases == {k: "interrupted" for k in LAB_KEYS[4:]}, (cases, out[-3000:])

"""The plugin as a whole: cheap import, options, header, golden cache, checkers, thread budget."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_cannbench.workers import limits as session


def test_importing_the_plugin_loads_no_heavy_module() -> None:
    code = ("import sys, pytest_cannbench.plugin; "
            "print(sorted(m for m in ('torch', 'numpy', 'yaml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_xdist_controller_never_imports_torch(pytester: pytest.Pytester, task_tree) -> None:
    """The controller runs no case: torch imported there delayed the start of every worker (1.4 s, before them)
    and the end of the session (1.9 s, detecting the device for the board, which the workers report now)."""
    from importlib.metadata import version

    task_tree("basic")
    probe = pytester.path / "probe.txt"
    pytester.makeconftest(f"""
        import sys

        def _probe(when):
            with open({str(probe)!r}, "a") as fh:
                fh.write(when + str(sorted(m for m in ("torch", "numpy") if m in sys.modules)) + ";")

        def pytest_xdist_setupnodes(config, specs):
            _probe("start")

        def pytest_unconfigure(config):
            if not hasattr(config, "workerinput"):
                _probe("end")
    """)
    result = pytester.runpytest_subprocess("--cann-tasks=tasks", "--cann-source=@golden", "--cann-no-perf",
                                           "--cann-golden-cache=off", "-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=3)
    assert probe.read_text() == "start[];end[];"
    env = json.loads((pytester.path / "reports" / "leaderboard.json").read_text())["environment"]
    assert env["device"] == "cpu" and env["torch"] == version("torch")


def test_entry_point_is_declared() -> None:
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert eps.get("cannbench") == "pytest_cannbench.plugin"


def test_header_and_help(pytester: pytest.Pytester, task_tree) -> None:
    task_tree("basic")
    result = pytester.runpytest("--cann-tasks=tasks", "--cann-seed=7", "--collect-only", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["cannbench: tasks tasks", "cannbench: no candidate; seed 7, inputs uniform/fixed, "
                                 "golden fp64_cpu, checker relative_error", "*3 tests collected*"])
    help_text = pytester.runpytest("--help").stdout.str()
    for option in ("--cann-tasks", "--cann-source", "--cann-seed", "cann_input_dist", "cann_input_compat",
                   "cann_golden_precision", "--cann-golden-cache", "cann_golden_timeout", "cann_golden_memory",
                   "--cann-checker"):
        assert option in help_text
    assert "--cann-self-check" not in help_text  # a spelling of the previous release: accepted, not shown


@pytest.mark.parametrize("args, message", [
    (["-o", "cann_golden_timeout=0"], "-o cann_golden_timeout=0: expected a number > 0 seconds"),
    (["-o", "cann_golden_memory=-1"], "-o cann_golden_memory=-1: expected a number >= 1 GiB*"),
    (["-o", "cann_golden_memory=0.5"], "-o cann_golden_memory=0.5: expected a number >= 1 GiB*"),
    (["--cann-seed=-1"], "--cann-seed -1: expected a whole number >= 0"),
    (["-o", "cann_checker=exact"], "-o cann_checker=exact: expected one of relative_error, allclose, kernelbench"),
    (["-o", "cann_timing_threads=0"], "-o cann_timing_threads=0: expected a positive count of threads or 'all'"),
    (["-o", "cann_timing_threads=many"], "-o cann_timing_threads=many: expected a positive count of threads or*"),
])
def test_bad_option_values_are_usage_errors(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    result = pytester.runpytest(*args, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_ini_keys_configure_the_run(pytester: pytest.Pytester, task_tree) -> None:
    task_tree("basic")
    pytester.makeini("[pytest]\ncann_tasks = tasks\ncann_source = @golden\ncann_golden_cache = off\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["cannbench: golden cache off; logs *", "1 operators, 3 cases: 3 passed"])
    assert not (pytester.path / ".cannbench-cache").exists()


def test_golden_cache_second_run_computes_no_golden(pytester: pytest.Pytester, task_tree) -> None:
    tasks = task_tree("basic")
    cache = pytester.path / "gcache"
    # the floor at 0: the test must not depend on how full the disk of the machine running it is
    args = ("--cann-tasks=tasks", "--cann-source=@golden", f"--cann-golden-cache={cache}", "-p", "no:cacheprovider",
            "--cann-no-perf", "-o", "cann_golden_cache_min_free=0")
    first = pytester.runpytest(*args)
    first.assert_outcomes(passed=3)
    first.stdout.no_fnmatch_line("golden outputs from cache*")
    assert len(list(cache.rglob("*.pt"))) == 3
    second = pytester.runpytest(*args)
    second.assert_outcomes(passed=3)
    second.stdout.fnmatch_lines(["golden outputs from cache: 3/3 cases"])

    # A changed golden invalidates its entries; a damaged entry is a miss, rewritten.
    golden = tasks / "level1" / "axpy" / "golden.py"
    golden.write_text(golden.read_text() + "\n# edited\n")
    victim = sorted(cache.rglob("*.pt"))[0]
    third = pytester.runpytest(*args)
    third.assert_outcomes(passed=3)
    third.stdout.no_fnmatch_line("golden outputs from cache*")
    victim.write_bytes(b"not a torch file")
    fourth = pytester.runpytest(*args)
    fourth.assert_outcomes(passed=3)
    assert len(list(cache.rglob("*.pt"))) == 6

    # a floor above what the disk has: the cache stops writing with a warning naming the option, cases pass
    floor = pytester.runpytest(*args[:-2], "-o", "cann_golden_cache_min_free=1e9", f"--cann-golden-cache={cache}2")
    floor.assert_outcomes(passed=3, warnings=1)
    floor.stdout.fnmatch_lines(["*GoldenCacheWarning: golden cache stopped writing: * GiB free on *, under the "
                                "1e+09 GiB floor (cann_golden_cache_min_free)*"])
    assert not list((pytester.path / "gcache2").rglob("*.pt"))
    bad = pytester.runpytest(*args[:-2], "-o", "cann_golden_cache_min_free=-1")
    bad.stderr.fnmatch_lines(["*-o cann_golden_cache_min_free=-1: expected a number >= 0 GiB*"])


@pytest.mark.parametrize("extra", [["-o", "cann_golden_precision=native_cpu"], ["--cann-checker=allclose"],
                                   ["-o", "cann_input_dist=normal"], ["-o", "cann_input_compat=official"]])
def test_alternative_modes_grade_the_goldens(pytester: pytest.Pytester, task_tree, extra: list[str]) -> None:
    task_tree("basic")
    reprec = pytester.inline_run("--cann-tasks=tasks", "--cann-source=@golden", "--cann-golden-cache=off",
                                 "-p", "no:cacheprovider", *extra)
    reprec.assertoutcome(passed=3)
    checkers = {v["checker"] for rep in reprec.getreports("pytest_runtest_logreport")
                if rep.when == "call" for v in rep.cann["accuracy"]}
    assert checkers == {"allclose" if "--cann-checker=allclose" in extra else "relative_error"}


def test_outcome_reaches_junit_properties(pytester: pytest.Pytester, task_tree) -> None:
    task_tree("basic")
    result = pytester.runpytest("--cann-tasks=tasks", "--cann-source=@golden", "--cann-golden-cache=off",
                                "-p", "no:cacheprovider", "--junitxml=out.xml", "-k", "01")
    result.assert_outcomes(passed=1)
    xml = (pytester.path / "out.xml").read_text()
    assert 'name="cann_case" value="level1/axpy_1"' in xml
    assert 'name="cann_status" value="passed"' in xml


def test_seed_changes_inputs_but_not_case_keys(pytester: pytest.Pytester, task_tree) -> None:
    task_tree("basic")
    results = {}
    for seed in ("0", "5"):
        reprec = pytester.inline_run("--cann-tasks=tasks", "--cann-source=@golden", "--cann-golden-cache=off",
                                     f"--cann-seed={seed}", "-p", "no:cacheprovider", "-k", "01")
        (rep,) = [r for r in reprec.getreports("pytest_runtest_logreport") if r.when == "call"]
        results[seed] = (rep.cann["key"], rep.cann["accuracy"][0]["max_abs_err"], rep.cann["accuracy"][0]["mere"])
    assert results["0"][0] == results["5"][0] == "level1/axpy_1"
    assert json.dumps(results["0"][1:]) != json.dumps(results["5"][1:]) or results["0"][1] == 0.0


def test_thread_budget_divides_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "64")
    assert session.cpu_threads() == 1
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
    assert session.cpu_threads() >= 1
    assert session.processes() == 1

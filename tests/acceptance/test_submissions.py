"""Submissions end to end: real wheels, real builds, a real candidate worker, inner pytest sessions.

The broken examples in ``examples/broken`` misbehave on case 2 of softplus (beta 2.0) of the
``tests/fixtures/submission`` tree; every other case must come out exactly as if nothing happened.
Example wheels are built once per machine and source version (``prebuilt`` in conftest).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from inner import InnerRun, make_wheel, run_inner

BASE = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-no-perf")
ALL = ("softplus[01]", "softplus[02]", "softplus[03]", "softplus[04]", "rms_scale[01]", "rms_scale[02]")
SOFTPLUS_OK = '''import torch


def softplus(x, beta=1.0, threshold=20.0):
    return torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold).to(x.dtype).contiguous()
'''


def grade(pytester, capsys, task_tree, source, *args: str) -> InnerRun:
    tasks = task_tree("submission")
    return run_inner(pytester, capsys, tasks, *BASE, f"--cann-source={source}", *args)


def status(run: InnerRun, name: str) -> tuple:
    case = run.cases[name]
    return case.outcome, case.cann["status"], case.cann["failure_type"]


def assert_intact(run: InnerRun, broken: dict[str, tuple], missing: tuple[str, ...] = ()) -> None:
    """Every case not listed passed (or is missing, as listed)."""
    assert set(run.cases) == set(ALL), sorted(run.cases)
    for name in ALL:
        if name in broken:
            assert status(run, name) == broken[name], (name, run.cases[name].longrepr)
        elif name in missing:
            assert status(run, name) == ("skipped", "missing", "not_provided"), name
        else:
            assert status(run, name) == ("passed", "passed", None), (name, run.cases[name].longrepr)


# --------------------------------------------------------------------------------------------
# the C++ example on the bundled tasks


def example_operators(example: str = "cpp_cpu") -> set[str]:
    """The operators an example exports (its ``__all__``), read without importing it."""
    import ast

    init = Path(__file__).resolve().parents[2] / "examples" / example / "cann_bench" / "__init__.py"
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("no __all__ in the example")


def test_cpp_example_passes_what_it_implements_and_misses_the_rest(pytester, capsys, prebuilt):
    """The bundled suite, two cases of every operator (accuracy only: the README's main job times them all)."""
    tasks = Path(__file__).resolve().parents[2] / "tasks"
    run = run_inner(pytester, capsys, tasks, f"--cann-tasks={tasks}", "-p", "no:cacheprovider",
                    "--cann-golden-cache=off", f"--cann-source={prebuilt('cpp_cpu')}", "-n", "2",
                    "--cann-guard=block", "--cann-no-perf", "-k", "01 or 02")
    implemented = example_operators()
    bundled = {p.parent.name for p in tasks.glob("level*/*/cases.yaml")}
    assert run.cases, run.text
    assert {n.split("[")[0] for n in run.cases} == bundled
    for name, case in run.cases.items():
        op = name.split("[")[0]
        if op in implemented:
            assert (case.outcome, case.cann["status"]) == ("passed", "passed"), (name, case.cann.get("message"))
        else:
            assert (case.outcome, case.cann["status"], case.cann["failure_type"]) == \
                ("skipped", "missing", "not_provided"), name
            assert "is not provided by the submission" in case.cann["message"]
    assert run.ret == 0
    header = f"cannbench: {len(implemented)} interfaces discovered: {', '.join(sorted(implemented))}"
    assert run.text.count("interfaces discovered") == 1 and header in run.text, run.text


def _triton_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="the GPU examples need a CUDA GPU; none here")
@pytest.mark.parametrize("example", ["cuda", pytest.param("triton", marks=pytest.mark.skipif(
    not _triton_importable(), reason="Triton is not installed"))])
def test_gpu_example_passes_under_the_guard_and_is_timed_on_the_card(example, pytester, capsys, prebuilt):
    """The CUDA C++ example (its own kernels, ``TORCH_LIBRARY_IMPL(..., CUDA, ...)``) and the Triton one (kernels
    compiled at their first launch, through the worker's compiler helper) under ``--cann-guard block``: the first
    case of every operator each implements passes and is timed on the card against the baseline."""
    tasks = Path(__file__).resolve().parents[2] / "tasks"
    implemented = example_operators(example)
    run = run_inner(pytester, capsys, tasks, f"--cann-tasks={tasks}", "-p", "no:cacheprovider",
                    "--cann-golden-cache=off", f"--cann-source={prebuilt(example)}", "-n", "2", "--cann-device=cuda",
                    "--cann-guard=block", "--cann-repeat=3", "-k", f"01 and ({' or '.join(sorted(implemented))})")
    assert {n.split("[")[0] for n in run.cases} == implemented, sorted(run.cases)
    for name, case in run.cases.items():
        assert (case.outcome, case.cann["status"]) == ("passed", "passed"), (name, case.cann.get("message"))
        t = case.cann["timing"]
        assert t["device"] == "cuda:0" and t["timer"] in ("cuda_profiler", "cuda_events"), (name, t)
        assert t["t_cand_us"] > 0 and t["t_baseline_us"] > 0, (name, t)


# --------------------------------------------------------------------------------------------
# broken at run time: one case breaks, every other case is intact

CRASH = ("failed", "crashed", "candidate_crashed")
RUNTIME_BROKEN = {
    # example: (extra options, {case: expected}, fragments of softplus[02]'s message)
    "segfault": (("-n", "2"), {"softplus[02]": CRASH}, ("SIGSEGV", "softplus_2.log", "in softplus")),
    "exit": ((), {"softplus[02]": CRASH}, ("exited with code 0", "giving up")),
    "exception": ((), {"softplus[02]": ("failed", "failed", "compile_runtime_error")},
                  ("candidate raised RuntimeError: tiling failed for shape (1000,)",)),
    "hang": (("--cann-case-timeout=3",), {"softplus[02]": ("failed", "timeout", "candidate_timeout")},
             ("no answer within 3 s", "process group was killed")),
    "memory_blowup": (("-o", "cann_worker_memory=1.5"), {"softplus[02]": ("failed", "oom_killed", "out_of_memory")},
                      ("over its limit of 1.5 GiB",)),
    "wrong_dtype": ((), {"softplus[02]": ("failed", "failed", "compile_runtime_error"),
                         "softplus[03]": ("failed", "failed", "compile_runtime_error")},
                    ("dtype float32 != expected float16",)),
    "wrong_shape": ((), {"softplus[01]": ("failed", "failed", "compile_runtime_error"),
                         "softplus[03]": ("failed", "failed", "compile_runtime_error")}, ()),
}


@pytest.mark.parametrize("example", sorted(RUNTIME_BROKEN))
def test_a_broken_case_costs_only_itself(example, pytester, capsys, task_tree, prebuilt):
    args, broken, fragments = RUNTIME_BROKEN[example]
    run = grade(pytester, capsys, task_tree, prebuilt(f"broken/{example}"), *args)
    assert_intact(run, broken)
    assert run.ret == 1
    message = run.cases["softplus[02]"].cann["message"]
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    if example == "wrong_shape":
        assert "shape (2112,) != golden shape (64, 33)" in run.cases["softplus[01]"].cann["message"]
    for name in broken:  # a one-line verdict, not a traceback of the plugin's internals
        assert "pytest_cannbench" not in run.cases[name].longrepr.split("--- end of its output")[0]


def test_missing_operator_is_skipped_and_counted_missing(pytester, capsys, task_tree, prebuilt):
    run = grade(pytester, capsys, task_tree, prebuilt("broken/missing_op"))
    assert_intact(run, {}, missing=("rms_scale[01]", "rms_scale[02]"))
    assert run.cases["rms_scale[01]"].cann["message"] == "RmsScale is not provided by the submission"
    assert run.ret == 0


def test_pytest_timeout_still_interrupts_a_hung_candidate(pytester, capsys, task_tree, prebuilt):
    # the limit must fit an honest case on a loaded machine (golden, two correctness calls: up to ~15 s seen
    # under load) while the hung one waits for --cann-case-timeout's 300 s, so only pytest-timeout can end it
    run = grade(pytester, capsys, task_tree, prebuilt("broken/hang"), "--cann-case-timeout=300", "--timeout=45")
    assert_intact(run, {"softplus[02]": ("failed", "timeout", "pytest_timeout")})
    assert "Timeout" in run.cases["softplus[02]"].longrepr


# --------------------------------------------------------------------------------------------
# broken before any case runs: build, install, import


def test_build_failure_fails_every_case_with_the_log(pytester, capsys, task_tree):
    source = Path(__file__).resolve().parents[2] / "examples" / "broken" / "build_error"
    run = grade(pytester, capsys, task_tree, source)
    log = Path(pytester.path) / "reports" / "logs" / "build.log"
    for name in ALL:
        assert status(run, name) == ("failed", "compile_failed", "compile_failed")
        message = run.cases[name].cann["message"]
        assert "build.sh exited with code 1" in message and str(log) in message
        assert "'vec_exp' was not declared" in message
    assert "'vec_exp' was not declared" in log.read_text()
    assert run.ret == 1
    assert "SUBMISSION COMPILE_FAILED" in run.text
    assert sorted(p.name for p in source.iterdir()) == ["build.sh"]  # the user's tree is untouched


def submission_dir(root: Path, build_sh: str, package: str = SOFTPLUS_OK) -> Path:
    (root / "cann_bench").mkdir(parents=True)
    (root / "cann_bench" / "__init__.py").write_text(package)
    (root / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=70.1"]\n'
                                         'build-backend = "setuptools.build_meta"\n[project]\nname = "cann_bench"\n'
                                         'version = "0.0.1"\n[tool.setuptools]\npackages = ["cann_bench"]\n')
    (root / "build.sh").write_text(build_sh)
    return root


PIP_WHEEL = "python -m pip wheel . --no-deps --no-build-isolation --disable-pip-version-check -q -w dist\n"


def test_build_runs_once_per_session_under_xdist(pytester, capsys, task_tree):
    # build.sh can write nothing outside its sandbox: the build log counts the builds
    source = submission_dir(Path(pytester.path) / "sub", f"set -e\necho build-marker-line\n{PIP_WHEEL}")
    before = sorted(p.name for p in source.rglob("*"))
    run = grade(pytester, capsys, task_tree, source, "-n", "2")
    log = (Path(pytester.path) / "reports" / "logs" / "build.log").read_text()
    assert log.count("build-marker-line") == 1 and log.count("$ bash build.sh") == 1, log
    assert_intact(run, {}, missing=("rms_scale[01]", "rms_scale[02]"))
    assert sorted(p.name for p in source.rglob("*")) == before  # no build/, dist/ or egg-info in the user's tree
    assert "wheel cann_bench-0.0.1-py3-none-any.whl (built in" in run.text


@pytest.mark.parametrize("build_sh, fragments", [
    ("sleep 60\n", ("build.sh did not finish within 2 s (cann_build_timeout)",)),
    ("echo ok\n", ("build.sh succeeded but left nothing in dist/",)),
    (f"{PIP_WHEEL}cp dist/*.whl dist/cann_bench-0.0.2-py3-none-any.whl\n",
     ("left cann_bench-0.0.1-py3-none-any.whl, cann_bench-0.0.2-py3-none-any.whl in dist/",)),
], ids=["timeout", "no-wheel", "two-wheels"])
def test_bad_builds_are_compile_failures(build_sh, fragments, pytester, capsys, task_tree):
    source = submission_dir(Path(pytester.path) / "sub", build_sh)
    # only the hanging build gets the short limit: a real `pip wheel` takes ~2 s on a loaded 2-core machine
    limit = ("-o", "cann_build_timeout=2") if "sleep" in build_sh else ()
    run = grade(pytester, capsys, task_tree, source, *limit)
    for name in ALL:
        assert status(run, name) == ("failed", "compile_failed", "compile_failed")
    for fragment in fragments:
        assert fragment in run.cases["softplus[01]"].cann["message"]


def test_no_wheel_and_no_build_sh(pytester, capsys, task_tree):
    source = Path(pytester.path) / "empty"
    source.mkdir()
    run = grade(pytester, capsys, task_tree, source)
    assert status(run, "softplus[01]") == ("failed", "compile_failed", "compile_failed")
    assert "has neither dist/cann_bench*.whl nor build.sh" in run.cases["softplus[01]"].cann["message"]


def test_import_failure_fails_every_case(pytester, capsys, task_tree, prebuilt):
    run = grade(pytester, capsys, task_tree, prebuilt("broken/import_error"))
    for name in ALL:
        assert status(run, name) == ("failed", "import_failed", "import_failed")
    message = run.cases["rms_scale[02]"].cann["message"]
    assert "ImportError: libcust_opapi.so: cannot open shared object file" in message
    assert "discovery.log" in message


def test_install_failure_fails_every_case(pytester, capsys, task_tree):
    source = Path(pytester.path) / "sub"
    (source / "dist").mkdir(parents=True)
    (source / "dist" / "cann_bench-0.0.1-py3-none-any.whl").write_bytes(b"not a zip file")
    run = grade(pytester, capsys, task_tree, source)
    for name in ALL:
        assert status(run, name) == ("failed", "install_failed", "install_failed")
    assert "cann_bench-0.0.1-py3-none-any.whl is not a readable zip archive" in \
        run.cases["softplus[01]"].cann["message"]


# --------------------------------------------------------------------------------------------
# nothing of the submission reaches the judge


def test_submission_code_never_loads_into_pytest(pytester, capsys, task_tree, tmp_path):
    """A wheel with a .pth file and a pytest11 entry point: neither may run, in the judge or anywhere."""
    marker = tmp_path / "loaded.txt"
    source = Path(pytester.path) / "sub"
    make_wheel(source / "dist", {
        "cann_bench/__init__.py": SOFTPLUS_OK,
        "cann_bench/evil_plugin.py": f"open({str(marker)!r}, 'a').write('pytest11 plugin\\n')\n",
        "zz_cann_bench_evil.pth": f"import os; open({str(marker)!r}, 'a').write('pth\\n')\n",
        "cann_bench-0.0.1.dist-info/entry_points.txt": "[pytest11]\nevil = cann_bench.evil_plugin\n",
    })
    run = grade(pytester, capsys, task_tree, source, "-n", "2")
    assert_intact(run, {}, missing=("rms_scale[01]", "rms_scale[02]"))
    assert not marker.exists(), marker.read_text()
    assert "cann_bench" not in sys.modules
    assert not any("cannbench-session-" in p for p in sys.path)


def fake_opp_package(path: Path, code: int = 0) -> None:
    """A makeself-like .run: installs set_env.bash under --install-path, as a custom-OPP package does."""
    path.write_text(f'''#!/usr/bin/env bash
for arg in "$@"; do case "$arg" in --install-path=*) prefix="${{arg#--install-path=}}";; esac; done
[ {code} -eq 0 ] || {{ echo "install of custom OPP failed" >&2; exit {code}; }}
mkdir -p "$prefix/vendors/custom_ops/bin" "$prefix/vendors/custom_ops/op_api/lib"
echo 'export CANN_TEST_OPP_MARK="installed"' > "$prefix/vendors/custom_ops/bin/set_env.bash"
''')


SIGNATURE = "def softplus(x, beta=1.0, threshold=20.0):\n"
OPP_SOFTPLUS = SOFTPLUS_OK.replace(SIGNATURE, SIGNATURE + '''    import os
    assert os.environ.get("CANN_TEST_OPP_MARK") == "installed", "set_env.bash was not applied"
    assert "vendors/custom_ops" in os.environ.get("ASCEND_CUSTOM_OPP_PATH", "")
    assert "op_api/lib" in os.environ.get("LD_LIBRARY_PATH", "")
''')


def test_run_package_environment_reaches_the_worker_only(pytester, capsys, task_tree):
    source = Path(pytester.path) / "sub"
    make_wheel(source / "dist", {"cann_bench/__init__.py": OPP_SOFTPLUS})
    fake_opp_package(source / "dist" / "cann_bench_opp.run")
    run = grade(pytester, capsys, task_tree, source)
    assert_intact(run, {}, missing=("rms_scale[01]", "rms_scale[02]"))
    assert "CANN_TEST_OPP_MARK" not in os.environ
    assert "OPP package cann_bench_opp.run" in run.text


def test_failing_run_package_is_an_install_failure(pytester, capsys, task_tree):
    source = Path(pytester.path) / "sub"
    make_wheel(source / "dist", {"cann_bench/__init__.py": OPP_SOFTPLUS})
    fake_opp_package(source / "dist" / "cann_bench_opp.run", code=3)
    run = grade(pytester, capsys, task_tree, source)
    assert status(run, "softplus[01]") == ("failed", "install_failed", "install_failed")
    message = run.cases["softplus[01]"].cann["message"]
    assert "installing cann_bench_opp.run exited with code 3" in message and "install of custom OPP failed" in message


def test_no_install_grades_the_installed_package(pytester, capsys, task_tree, monkeypatch, tmp_path):
    wheel = make_wheel(tmp_path / "dist", {"cann_bench/__init__.py": SOFTPLUS_OK})
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True)
    monkeypatch.setenv("PYTHONPATH", str(site))  # "installed" for the worker; the judge never imports it
    tasks = task_tree("submission")
    run = run_inner(pytester, capsys, tasks, *BASE, "--cann-source=@installed")
    assert_intact(run, {}, missing=("rms_scale[01]", "rms_scale[02]"))
    assert "cann_bench" not in sys.modules


@pytest.mark.parametrize("args, message", [
    (("--cann-source=nowhere",), "not a directory"),
    (("--cann-source=.", "--cann-source=@golden"), "cannot be combined"),
    (("--cann-source=@installed", "--cann-source=."), "cannot be combined"),
    (("--cann-case-timeout=0",), "--cann-case-timeout 0: expected a number > 0 seconds"),
])
def test_usage_errors(args, message, pytester):
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_collect_only_builds_nothing(pytester, capsys, task_tree):
    counter = Path(pytester.path) / "builds.txt"
    source = submission_dir(Path(pytester.path) / "sub", f"echo built >> {counter}\nexit 1\n")
    task_tree("submission")
    pytester.inline_run(*BASE, f"--cann-source={source}", "--collect-only")
    assert not counter.exists()


def test_worker_dies_with_its_judge_even_while_frozen(tmp_path):
    """A judge killed between calls (its worker SIGSTOP-frozen) leaves no worker behind."""
    script = f'''
import os, sys
from pathlib import Path
from pytest_cannbench.workers.candidate_client import CandidateWorker
w = CandidateWorker(log_path=Path({str(tmp_path / "w.log")!r}), workdir=Path({str(tmp_path / "work")!r}),
                    mode="golden")
w.start()
assert w.frozen
print(w.proc.pid, flush=True)
os._exit(0)
'''
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    pid = int(done.stdout.split()[-1])
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with open(f"/proc/{pid}/stat") as fh:  # a zombie awaiting its reaper counts as gone
            if fh.read().split(")")[-1].split()[0] == "Z":
                return
        import time

        time.sleep(0.1)
    pytest.fail(f"worker {pid} outlived its judge")


def test_the_worker_sees_no_harness_environment(pytester, capsys, task_tree, monkeypatch):
    """PYTEST_CURRENT_TEST, xdist's variables and any secret of the judge's environment stay out of the worker."""
    monkeypatch.setenv("CI_DEPLOY_TOKEN", "s3cret")
    probe = SOFTPLUS_OK.replace(SIGNATURE, SIGNATURE + '''    import os, tempfile
    leaked = sorted(k for k in os.environ if k.startswith(("PYTEST", "CI_")) or "CANNBENCH" in k)
    assert not leaked, f"harness environment visible: {leaked}"
    assert "cannbench-worker-" in tempfile.gettempdir(), tempfile.gettempdir()
''')
    source = Path(pytester.path) / "sub"
    make_wheel(source / "dist", {"cann_bench/__init__.py": probe})
    run = grade(pytester, capsys, task_tree, source, "-n", "2")
    assert_intact(run, {}, missing=("rms_scale[01]", "rms_scale[02]"))

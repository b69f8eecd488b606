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
            # the memory plan divides what ulimit -v leaves (less 10%) among the workers: every budget fits under it
            plan = re.search(r"memory plan: ([\d.]+) GiB usable \(ulimit -v, 10% kept free\)", text)
            assert plan and float(plan.group(1)) <= 16.0, text[:3000]
            golden = re.search(r"budgets: golden worker address space ([\d.]+) GiB", text)
            assert golden and float(golden.group(1)) <= 16.0, text[:3000]


def test_progress_people_can_read_and_the_fail_under_gate(pytester, capsys, task_tree, monkeypatch) -> None:
    """-v words with the speed-up and HAP, M for a missing operator, the first calibration announced, and
    --cann-fail-under failing a session whose cases all passed or were skipped."""
    from inner import make_wheel, run_inner

    task_tree("basic")
    tasks = task_tree("submission")  # softplus and rms_scale: not in the wheel, so missing
    make_wheel(pytester.path / "sub" / "dist", {"cann_bench/__init__.py": AXPY})
    monkeypatch.setenv("CANNBENCH_CACHE_DIR", str(pytester.path / "machine-cache"))  # a first run on this machine
    run = run_inner(pytester, capsys, tasks, "-p", "no:cacheprovider", "--cann-tasks=tasks", "--cann-golden-cache=off",
                    f"--cann-source={pytester.path / 'sub'}", "--cann-warmup=0", "--cann-repeat=2", "-v",
                    "--cann-fail-under=101")
    assert "cannbench: calibrating the roofline (T_HW) of this machine" in run.text
    passed = [line for line in run.text.splitlines() if "axpy[01]" in line and "PASSED" in line]
    assert passed and re.search(r"PASSED ×\d+\.\d\d( HAP \d+\.\d\d)?", passed[0]), run.text[-3000:]
    assert any("softplus[01]" in line and "MISSING" in line for line in run.text.splitlines())
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    assert re.search(r"FAILED: total score \d+\.\d\d is below --cann-fail-under 101", run.text)
    quiet = pytester.runpytest("-p", "no:cacheprovider", "--cann-tasks=tasks", "--cann-golden-cache=off",
                               f"--cann-source={pytester.path / 'sub'}", "--cann-no-perf", "--cann-guard=off", "-q",
                               "--cann-fail-under=0")
    assert quiet.ret == 0
    assert re.search(r"^\.\.\.M+", quiet.stdout.str(), re.M), quiet.stdout.str()


def test_a_stale_prebuilt_wheel_is_reported_and_rebuild_builds(pytester, capsys, task_tree) -> None:
    import os
    import time

    from inner import make_wheel, run_inner

    tasks = task_tree("basic")
    source = pytester.path / "sub"
    good = make_wheel(source / "wheels", {"cann_bench/__init__.py": AXPY})  # build.sh sees only its own tree
    stale = make_wheel(source / "dist", {"cann_bench/__init__.py": AXPY.replace("alpha * x", "-alpha * x")})
    (source / "build.sh").write_text(f"set -e\nsleep 1\nmkdir -p dist\ncp wheels/{good.name} dist/\n")
    (source / "cann_bench").mkdir()
    (source / "cann_bench" / "__init__.py").write_text(AXPY)
    old = time.time() - 3600
    for wheel in (stale, good):
        os.utime(wheel, (old, old))
    args = ("-p", "no:cacheprovider", "--cann-tasks=tasks", "--cann-golden-cache=off", "--cann-no-perf",
            f"--cann-source={source}")
    run = run_inner(pytester, capsys, tasks, *args)
    assert "cannbench: WARNING: build.sh, cann_bench/__init__.py changed after" in run.text
    assert "set cann_rebuild (-o cann_rebuild=true) to build from build.sh" in run.text
    assert run.ret == pytest.ExitCode.TESTS_FAILED  # the stale wheel is wrong
    run = run_inner(pytester, capsys, tasks, *args, "-o", "cann_rebuild=true")
    assert run.ret == pytest.ExitCode.OK, run.text[-3000:]
    assert re.search(r"cannbench: build.sh finished in \d+\.\d s", run.text)
    assert "WARNING" not in run.text


def test_a_wrong_tasks_path_is_reported_before_any_build(pytester: pytest.Pytester) -> None:
    (pytester.path / "sub").mkdir()
    (pytester.path / "sub" / "build.sh").write_text(f"touch {pytester.path / 'built'}\n")
    result = pytester.runpytest("--cann-tasks=nowhere", f"--cann-source={pytester.path / 'sub'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--cann-tasks */nowhere: no such directory; pass a bench root*"])
    assert not (pytester.path / "built").exists()


def test_no_home_and_the_c_locale_grade_as_usual(pytester: pytest.Pytester, task_tree) -> None:
    """$HOME unset and LC_ALL=C: the cache dir comes from the passwd entry (else $TMPDIR), and cases pass."""
    import os
    import subprocess
    import sys

    task_tree("basic")
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME", "CANNBENCH_CACHE_DIR")}
    env.update(LC_ALL="C", LANG="C", TMPDIR=str(pytester.path / "tmp"))
    (pytester.path / "tmp").mkdir()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--cann-tasks=tasks",
                           "--cann-source=@golden", "--cann-golden-cache=off", "--cann-warmup=0", "--cann-repeat=2"],
                          cwd=pytester.path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout


def test_a_killed_sessions_scratch_is_reaped_and_a_finished_one_leaves_none(pytester: pytest.Pytester,
                                                                            task_tree) -> None:
    """Scratch directories carry their maker's pid (scratch.py): a session killed outright leaves its own behind,
    the next session removes them; a session that ends leaves nothing in the temporary directory."""
    import os
    import signal
    import subprocess
    import sys
    import time

    task_tree("basic")
    tmp = pytester.path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp))
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--cann-tasks=tasks", "--cann-source=@golden",
            "--cann-golden-cache=off", "--cann-no-perf"]
    killed = subprocess.Popen(args, cwd=pytester.path, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(p.name.startswith("cannbench-worker-") for p in tmp.iterdir()):
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    left = sorted(p.name for p in tmp.iterdir() if p.name.startswith("cannbench-"))
    assert any(name.startswith(f"cannbench-worker-p{killed.pid}n") for name in left), left
    done = subprocess.run(args, cwd=pytester.path, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith("cannbench-")) == []


def test_the_golden_cache_is_bounded_between_sessions(pytester: pytest.Pytester, task_tree) -> None:
    """The cache keeps what a session wrote under its bound; at the end of a session over the bound its least
    recently used entries go, and the summary says so; a bound that is not a size is a usage error."""
    task_tree("basic")
    args = ("-p", "no:cacheprovider", "--cann-tasks=tasks", "--cann-source=@golden", "--cann-no-perf",
            "--cann-golden-cache=cache", "-o", "cann_golden_cache_min_free=0")
    kept = pytester.runpytest(*args)
    kept.assert_outcomes(passed=3)
    entries = sorted((pytester.path / "cache").rglob("*.pt"))
    assert len(entries) == 3 and "least recently used" not in kept.stdout.str()
    emptied = pytester.runpytest(*args, "-o", "cann_golden_cache_max=0")
    emptied.assert_outcomes(passed=3)
    emptied.stdout.fnmatch_lines(["golden cache: removed 3 least recently used files (0.0 GiB); it holds "
                                  "0 entries, 0.0 GiB, under its 0 GiB bound (cann_golden_cache_max)"])
    assert not list((pytester.path / "cache").rglob("*.pt"))
    bad = pytester.runpytest(*args, "-o", "cann_golden_cache_max=lots")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*-o cann_golden_cache_max=lots: expected a number >= 0 GiB, or off (no bound)*"])

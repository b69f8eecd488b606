"""The OS sandbox is really there: what a submission can reach with it on, and without it.

A probe submission looks for the judge's world from inside its call (the task tree, the judge's working
directory, the judge's ``/proc`` entry, an abstract unix socket the test listens on, which only a network
namespace hides) and fails the case when it finds any of it. From the judge's side of the boundary every one
of them is reachable, which the test checks first, so the probe cannot pass for want of a target.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path

import pytest
from inner import make_wheel, run_inner

from pytest_cannbench.guard import sandbox

BASE = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-no-perf", "-k",
        "softplus")

needs_bwrap = pytest.mark.skipif(not sandbox.choose("auto").on, reason="bubblewrap does not work on this machine "
                                 "(.ci/run installs it: apt-get install bubblewrap)")

PROBE = '''import os
import torch

TARGETS = {targets!r}
ABSTRACT = {abstract!r}
JUDGE = {judge}


def reachable():
    seen = [p for p in TARGETS if os.path.exists(p)]
    if os.path.exists(f"/proc/{{JUDGE}}/cmdline"):  # a stat: the audit hook refuses an open of it anyway
        seen.append(f"/proc/{{JUDGE}}")
    with open("/proc/net/unix") as fh:  # the sockets of this network namespace (connect() is audited)
        if ABSTRACT in fh.read():
            seen.append("an abstract unix socket of the judge's network namespace")
    return seen


def softplus(x, beta=1.0, threshold=20.0):
    seen = reachable()
    assert not seen, f"REACHABLE from the worker: {{seen}}"
    return torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold).to(x.dtype).contiguous()
'''


@pytest.fixture
def listener():
    """An abstract unix socket in the judge's network namespace; its name."""
    name = f"cannbench-sandbox-test-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(8)
    yield name
    server.close()


def probe_submission(pytester: pytest.Pytester, tasks: Path, abstract: str) -> Path:
    targets = [str(tasks.resolve()), str(Path(pytester.path).resolve() / "reports"), str(Path.home() / ".cache")]
    for path in targets[:2]:
        Path(path).mkdir(parents=True, exist_ok=True)
    assert all(os.path.exists(p) for p in targets[:2])  # reachable from out here
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.connect("\0" + abstract)
    probe.close()
    source = Path(pytester.path) / "sub"
    make_wheel(source / "dist", {"cann_bench/__init__.py": PROBE.format(targets=targets[:2], abstract=abstract,
                                                                          judge=os.getpid())})
    return source


@needs_bwrap
def test_inside_the_sandbox_the_judge_does_not_exist(pytester, capsys, task_tree, listener):
    tasks = task_tree("submission")
    source = probe_submission(pytester, tasks, listener)
    run = run_inner(pytester, capsys, tasks, *BASE, f"--cann-source={source}", "--cann-sandbox=bwrap")
    assert run.cases, run.text
    for name, case in run.cases.items():
        assert case.cann["status"] == "passed", (name, case.longrepr)
    assert "cannbench: sandbox bubblewrap" in run.text
    board = json.loads((Path(pytester.path) / "reports" / "leaderboard.json").read_text())
    assert board["config"]["sandbox"]["mode"] == "bwrap"
    assert not any("sandbox_off" in c["flags"] for op in board["operators"] for c in op["cases"])


def test_without_the_sandbox_the_same_probe_sees_the_judge(pytester, capsys, task_tree, listener):
    """The control: --cann-sandbox off is weaker, and says so everywhere."""
    tasks = task_tree("submission")
    source = probe_submission(pytester, tasks, listener)
    run = run_inner(pytester, capsys, tasks, *BASE, f"--cann-source={source}", "--cann-sandbox=off")
    assert run.cases, run.text
    for name, case in run.cases.items():
        assert case.cann["status"] != "passed", name
        assert "REACHABLE" in case.cann["message"] or "forbidden" in case.cann["message"], case.cann["message"]
    assert "SANDBOX OFF (--cann-sandbox off)" in run.text
    board = json.loads((Path(pytester.path) / "reports" / "leaderboard.json").read_text())
    assert board["config"]["sandbox"]["mode"] == "off"
    assert all("sandbox_off" in c["flags"] for op in board["operators"] for c in op["cases"])


BUILD_PROBE = '''set -e
for p in {targets}; do
  if [ -e "$p" ]; then echo "build.sh can see $p" >&2; exit 3; fi
done
if grep -qs -- "--cann-tasks" /proc/[0-9]*/cmdline; then echo "build.sh found the judge's command line" >&2; exit 4; fi
python - <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\\0{abstract}")
except OSError:
    sys.exit(0)
print("build.sh reached the judge's network namespace", file=sys.stderr)
sys.exit(5)
EOF
mkdir -p dist pkg/cann_bench
cat > pkg/cann_bench/__init__.py <<'EOF'
import torch


def softplus(x, beta=1.0, threshold=20.0):
    return torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold).to(x.dtype).contiguous()
EOF
cat > pkg/setup.py <<'EOF'
from setuptools import setup
setup(name="cann_bench", version="0.0.1", packages=["cann_bench"])
EOF
cd pkg && python -m pip wheel -q --no-deps --no-build-isolation --no-index -w ../dist . >/dev/null
'''


@needs_bwrap
def test_build_sh_runs_in_the_sandbox(pytester, capsys, task_tree, listener):
    """build.sh sees neither the task tree nor the judge's processes nor its network, and still builds."""
    tasks = task_tree("submission")
    source = Path(pytester.path) / "sub"
    source.mkdir()
    targets = " ".join(f'"{p}"' for p in (tasks.resolve(), Path(pytester.path).resolve()))
    (source / "build.sh").write_text(BUILD_PROBE.format(targets=targets, abstract=listener))
    run = run_inner(pytester, capsys, tasks, *BASE, f"--cann-source={source}", "--cann-sandbox=bwrap")
    log = (Path(pytester.path) / "reports" / "logs" / "build.log").read_text()
    for name, case in run.cases.items():
        assert case.cann["status"] == "passed", (name, case.cann["message"], log)
    assert "sandboxed" in log


def test_sandbox_bwrap_is_an_error_where_bubblewrap_is_missing(pytester, monkeypatch, tmp_path):
    """Asking for the sandbox where there is none stops the session before any build, naming the fix."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap"):
        sandbox.choose("bwrap")
    choice = sandbox.choose("auto")
    assert not choice.on and "not on PATH" in choice.reason and "SANDBOX OFF" in choice.describe()


def test_command_hides_protected_paths_inside_bound_directories(tmp_path):
    """A task tree inside a directory the sandbox must show (say, under /opt) is masked, not shown."""
    shown = tmp_path / "toolchain"
    secret = shown / "tasks"
    secret.mkdir(parents=True)
    argv = sandbox.command("bwrap", ["true"], workdir=None, readable=[str(shown)], hidden=[str(secret)])
    ro = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"]
    masked = [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]
    assert str(shown) in ro and str(secret) in masked
    assert argv.index("--tmpfs", argv.index(str(shown))) > argv.index(str(shown))  # the mask goes on top
    # a protected directory that holds a bound one (the judge's cwd holding the venv) is simply not bound
    argv = sandbox.command("bwrap", ["true"], workdir=None, readable=[str(secret)], hidden=[str(shown)])
    assert str(shown) not in [argv[i + 1] for i, a in enumerate(argv) if a in ("--tmpfs", "--ro-bind", "--bind")]

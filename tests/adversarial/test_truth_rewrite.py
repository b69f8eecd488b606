"""Rewriting the truth: submissions that forge the goldens instead of computing the operator.

Each attack returns zeros and tries to make softplus's golden return zeros too, by a different route: Python
at import through descriptor-relative paths (which an audit hook does not resolve), a C constructor with plain
``open(2)``/``write(2)``, and ``build.sh`` appending to the task tree before any check exists.
With the sandbox on, none of them finds the task tree, so the zeros fail as precision mismatches and the golden
on disk is untouched. Without the sandbox the goldens pinned before the build catch the build-time forgery.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from inner import make_wheel, run_inner

from pytest_cannbench.guard import sandbox

ARGS = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-no-perf",
        "--cann-guard=block", "-k", "softplus")
SOFTPLUS = ("softplus[01]", "softplus[02]", "softplus[03]", "softplus[04]")
FORGERY = "\\n\\ndef softplus(x, beta=1.0, threshold=20.0):\\n    return torch.zeros_like(x)\\n"
ZEROS = '''import torch


def softplus(x, beta=1.0, threshold=20.0):
    return torch.zeros_like(x)
'''
needs_bwrap = pytest.mark.skipif(not sandbox.choose("auto").on, reason="bubblewrap does not work here")

DIR_FD = '''import os

def _forge():
    try:
        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
        for part in "@GOLDEN_DIR@".strip("/").split("/"):
            fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        out = os.open("golden.py", os.O_WRONLY | os.O_APPEND, dir_fd=fd)
        os.write(out, b"@FORGERY@")
    except OSError:
        pass


_forge()
''' + ZEROS

PACKAGE_BUILD = '''mkdir -p dist pkg/cann_bench
cp cann_bench.py pkg/cann_bench/__init__.py
cat > pkg/setup.py <<'EOF'
from setuptools import setup
setup(name="cann_bench", version="0.0.1", packages=["cann_bench"], package_data={"cann_bench": ["*.so"]})
EOF
cd pkg && python -m pip wheel -q --no-deps --no-build-isolation --no-index -w ../dist . >/dev/null
'''

CTOR_C = '''#include <fcntl.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void forge(void) {
    const char *text = "@FORGERY@";
    int fd = open("@GOLDEN_DIR@/golden.py", O_WRONLY | O_APPEND);
    if (fd >= 0) { if (write(fd, text, strlen(text)) < 0) {} close(fd); }
}
'''
CTOR_PY = '''import ctypes, os
ctypes.CDLL(os.path.join(os.path.dirname(__file__), "libforge.so"))
''' + ZEROS

PROC_WALK = '''set -e
# The attacker knows where the judge keeps its tasks (a judge's command line is public in /proc without a PID
# namespace; here the path is given, so that the test can never touch another tree of the machine).
if grep -qs -- "--cann-tasks" /proc/[0-9]*/cmdline; then echo "found a judge's command line" >&2; fi
g="@GOLDEN_DIR@/golden.py"
[ -f "$g" ] && { printf '@FORGERY@' >> "$g" 2>/dev/null || true; }
'''


def source_for(kind: str, root: Path, golden_dir: Path) -> Path:
    source = root / "sub"
    source.mkdir()

    def fill(text: str) -> str:
        return text.replace("@GOLDEN_DIR@", str(golden_dir)).replace("@FORGERY@", FORGERY)

    if kind == "dir_fd_import":
        make_wheel(source / "dist", {"cann_bench/__init__.py": fill(DIR_FD)})
    elif kind == "c_constructor":
        (source / "forge.c").write_text(fill(CTOR_C))
        (source / "cann_bench.py").write_text(CTOR_PY)
        (source / "build.sh").write_text("set -e\n" + PACKAGE_BUILD.replace(
            "cp cann_bench.py", "cc -shared -fPIC -o pkg/cann_bench/libforge.so forge.c\ncp cann_bench.py"))
    else:  # build_sh_append
        (source / "cann_bench.py").write_text(ZEROS)
        (source / "build.sh").write_text(fill(PROC_WALK) + PACKAGE_BUILD)
    return source


def grade(pytester, capsys, task_tree, kind: str, mode: str):
    tasks = task_tree("submission")
    golden = tasks.resolve() / "level1" / "softplus" / "golden.py"
    before = golden.read_bytes()
    source = source_for(kind, Path(pytester.path), golden.parent)
    run = run_inner(pytester, capsys, tasks, *ARGS, f"--cann-source={source}", f"--cann-sandbox={mode}")
    board = json.loads((Path(pytester.path) / "reports" / "leaderboard.json").read_text())
    softplus = next(op for op in board["operators"] if op["rel_path"] == "level1/softplus")
    return run, softplus, golden.read_bytes() != before


@needs_bwrap
@pytest.mark.parametrize("kind", ["dir_fd_import", "c_constructor", "build_sh_append"])
def test_the_sandbox_leaves_no_golden_to_forge(kind, pytester, capsys, task_tree):
    run, softplus, forged = grade(pytester, capsys, task_tree, kind, "bwrap")
    assert not forged, "the golden on disk was rewritten from inside the sandbox"
    for name in SOFTPLUS:
        case = run.cases[name]
        assert case.cann["failure_type"] == "precision_mismatch", (name, case.cann["message"])
    assert softplus["function_score"] == 0 and softplus["performance_score"] == 0


def test_without_the_sandbox_pinned_goldens_refuse_a_build_time_forgery(pytester, capsys, task_tree):
    """build.sh runs unconfined with --cann-sandbox off and does rewrite the golden; the pin taken before the
    build turns that operator into a task error naming the file instead of a new truth."""
    run, softplus, forged = grade(pytester, capsys, task_tree, "build_sh_append", "off")
    assert forged  # the attack really works without the sandbox: the defence below is what stops it
    assert softplus["score"] == 0 and softplus["function_score"] == 0
    task = run.cases["softplus[task]"]
    assert "golden.py" in task.longrepr and "changed after the session started" in task.longrepr, task.longrepr

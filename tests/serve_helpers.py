"""The grading service in the tests: a real ``cannbench serve`` process on a free port, and the candidates a
group holds (built from the bundled C++ example, or hand-made wheels of a few lines)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from inner import make_wheel

from pytest_cannbench.serve.client import archive_of

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TASKS = ROOT / "tasks"

# a gelu that runs under the guard but answers wrong (a copy is allowed: it computes nothing)
WRONG = 'def gelu(x, approximate="none"):\n    return x.clone()\n'
HANG = 'import time\n\n\ndef gelu(x, approximate="none"):\n    while True:\n        time.sleep(1)\n'
CRASH = 'import os\n\n\ndef gelu(x, approximate="none"):\n    os._exit(3)\n'
NO_COMPILE = {
    "build.sh": "#!/usr/bin/env bash\nset -euo pipefail\nmkdir -p build\nc++ -fsyntax-only csrc/gelu.cpp\n",
    "csrc/gelu.cpp": "// a kernel with a syntax error\nint gelu(float* x {\n  return 0;\n}\n",
}


def wheel_submission(directory: Path, module: str) -> dict:
    """A prebuilt pure-Python ``cann_bench`` wheel whose ``__init__`` is ``module``, as an archive."""
    make_wheel(directory / "dist", {"cann_bench/__init__.py": module})
    return archive_of(directory)


class Server:
    """``cannbench serve --port 0 ARGS`` in its own process group; ``url`` once it says it listens."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, start_timeout: float = 300.0) -> None:
        self.log = Path(tempfile.mkstemp(prefix="cannbench-serve-test-", suffix=".log")[1])
        self.stderr = open(self.log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_cannbench.cli", "serve", "--port", "0", *args], cwd=ROOT,
            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
            start_new_session=True)
        self.url = ""
        self.final: str | None = None
        self.lines: list[str] = []
        found = threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line)
                if "listening on " in line and not self.url:
                    self.url = line.split("listening on ", 1)[1].strip()
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(start_timeout) or not self.url:
            self.stop(timeout=30)
            raise RuntimeError(f"cannbench serve did not start:\n{self.text()[-5000:]}")

    def text(self) -> str:
        """What the server printed (stdout, then stderr); kept in memory once it stopped."""
        if self.final is not None:
            return self.final
        self.stderr.flush()
        return "".join(self.lines) + self.log.read_text(errors="replace")

    def stop(self, timeout: float = 180.0) -> int:
        """SIGTERM (the drain), then wait; the whole group is killed if it does not end in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        self.final = self.text()
        self.stderr.close()
        self.log.unlink(missing_ok=True)
        return int(self.proc.returncode)


def wait_for(predicate, timeout: float, poll: float = 0.2):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"not within {timeout} s")

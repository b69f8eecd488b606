"""Triton inside a contained candidate worker: its compilers run in a helper process started before containment.

Triton compiles a kernel at its first launch, and each step is a child process: ``ptxas --version`` (part of the
cache key, so even a warm cache asks), ``ptxas`` itself, a C compiler for its launcher modules and, to find
libcuda, ``ldconfig -p``. The contained worker may start no process (the seccomp filter, the audit hook), so a
Triton submission failed every case. Before containment the worker now starts this module as a helper (a fresh
interpreter, not a fork) and points the ``subprocess`` name of Triton's compiler modules at a :class:`Proxy`
that hands each command to the helper. The helper runs Triton's toolchain only (:func:`refusal`): executables
shipped inside the triton package, the C compiler Triton builds launchers with (with no option that loads code
into it: plugins, wrappers, spec or response files), and ``ldconfig -p``. It answers with the exit status and the
output. What the compilers write lands in the worker's private Triton cache, whose shared objects the guard
accepts as the submission's own after checking what they import (:meth:`guard.runtime.Guard.own_dir`).

Run as ``python -m pytest_cannbench.workers.triton_helper TRITON_DIR COMPILER...``: JSON lines in, JSON lines out.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import IO, Any

# options that make a C compiler run code of the caller's choosing (or read more options from a file)
REFUSED_PREFIXES = ("-fplugin", "-wrapper", "-B", "-specs", "--specs", "-Xclang", "-load", "--sysroot", "-iwithprefix",
                    "-fuse-ld", "-Wl,--plugin", "-Wl,-plugin", "--param=plugin", "@")
TOOL_TIMEOUT_S = 600.0
CACHE_NAME = "triton-cache"  # the private cache, in the worker's work directory (the judge checks what maps it)
TRITON_MODULES = ("triton.knobs", "triton.runtime.build", "triton.backends.nvidia.compiler",
                  "triton.backends.nvidia.driver")


@dataclass(frozen=True)
class Toolchain:
    """What the helper may run, as it was when the helper started (before the submission was imported): each
    executable under Triton's package (ptxas, cuobjdump, ... ship there), the C compilers and ``ldconfig``, by real
    path, with the identity of the file then. A file added or replaced since (a writable install, no sandbox) is
    not Triton's toolchain any more."""

    triton_dir: str
    compilers: tuple[str, ...]
    ldconfig: str = ""
    files: tuple[tuple[str, tuple[int, int, int, int]], ...] = ()

    @classmethod
    def of(cls, triton_dir: str, compilers: tuple[str, ...]) -> Toolchain:
        triton_dir = os.path.realpath(triton_dir)
        found = [os.path.join(root, name) for root, _dirs, names in os.walk(triton_dir) for name in names]
        ldconfig = next((os.path.realpath(p) for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "/usr/bin/ldconfig")
                         if os.path.isfile(p)), "")
        files = {os.path.realpath(p): _identity(p) for p in [*found, *compilers, ldconfig]
                 if p and os.path.isfile(p) and os.access(p, os.X_OK)}
        return cls(triton_dir, tuple(os.path.realpath(c) for c in compilers), ldconfig,
                   tuple(sorted((k, v) for k, v in files.items() if v is not None)))


def _identity(path: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _resolved(program: str) -> str:
    found = program if os.sep in program else (shutil.which(program) or program)
    return os.path.realpath(found)


def refusal(argv: Any, tools: Toolchain) -> str | None:
    """Why the helper will not run ``argv``, or None."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return "not a command line"
    exe = _resolved(argv[0])
    known = dict(tools.files).get(exe)
    if known is None or _identity(exe) != known:
        return (f"{argv[0][:120]} is not part of Triton's toolchain" if known is None else
                f"{argv[0][:120]} changed since the worker started")
    if exe == tools.ldconfig:
        return None if argv[1:] == ["-p"] else "ldconfig only lists (-p)"
    if exe.startswith(tools.triton_dir.rstrip(os.sep) + os.sep):
        return None if not any(a.startswith("@") for a in argv[1:]) else "a response file"
    if exe in tools.compilers:
        bad = next((a for a in argv[1:] if a.startswith(REFUSED_PREFIXES)), None)
        return None if bad is None else f"the compiler option {bad[:60]} loads code or options"
    return f"{argv[0][:120]} is not part of Triton's toolchain"


def compilers() -> tuple[str, ...]:
    """The C compilers Triton's launcher build may pick: $CC, else gcc, else clang (``triton.runtime.build``)."""
    names = [os.environ["CC"]] if os.environ.get("CC") else ["gcc", "clang", "cc"]
    return tuple(sorted({_resolved(n) for n in names if shutil.which(n) or os.sep in n}))


def serve(tools: Toolchain, inp: IO[str], out: IO[str]) -> None:
    """Answer commands until the worker closes the pipe."""
    for line in inp:
        try:
            argv = json.loads(line).get("argv")
        except (ValueError, AttributeError):
            argv = None
        reply: dict[str, Any]
        # a missing tool is answered as subprocess says it: Triton probes for optional tools and catches that
        if isinstance(argv, list) and argv and isinstance(argv[0], str) and not os.path.exists(_resolved(argv[0])):
            reply = {"missing": f"No such file or directory: {argv[0][:200]!r}"}
        elif (why := refusal(argv, tools)) is not None:
            reply = {"refused": why}
        else:
            try:
                done = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=TOOL_TIMEOUT_S,
                                      check=False)
                reply = {"rc": done.returncode, "stdout": base64.b64encode(done.stdout).decode(),
                         "stderr": base64.b64encode(done.stderr).decode()}
            except FileNotFoundError as exc:
                reply = {"missing": str(exc)}
            except subprocess.TimeoutExpired:
                reply = {"rc": -9, "stdout": "", "stderr": base64.b64encode(b"timed out").decode()}
        out.write(json.dumps(reply) + "\n")
        out.flush()


class Proxy:
    """The part of :mod:`subprocess` Triton's compiler modules use, each command run by the helper."""

    PIPE, STDOUT, DEVNULL = subprocess.PIPE, subprocess.STDOUT, subprocess.DEVNULL
    CalledProcessError, TimeoutExpired = subprocess.CalledProcessError, subprocess.TimeoutExpired
    CompletedProcess, SubprocessError = subprocess.CompletedProcess, subprocess.SubprocessError

    def __init__(self, helper: subprocess.Popen[bytes]) -> None:
        self._helper = helper
        self._lock = threading.Lock()

    def _ask(self, args: Any) -> tuple[int, bytes, bytes]:
        argv = [os.fspath(a) for a in args] if isinstance(args, (list, tuple)) else [os.fspath(args)]
        with self._lock:
            stdin, stdout = self._helper.stdin, self._helper.stdout
            assert stdin is not None and stdout is not None
            stdin.write((json.dumps({"argv": argv}) + "\n").encode())
            stdin.flush()
            line = stdout.readline()
        if not line:
            raise OSError("pytest-cannbench: the Triton compiler helper is gone")
        reply = json.loads(line)
        if "refused" in reply:
            raise PermissionError(f"pytest-cannbench: a submission may not run {argv[0]!r} ({reply['refused']})")
        if "missing" in reply:
            raise FileNotFoundError(reply["missing"])
        return int(reply["rc"]), base64.b64decode(reply["stdout"]), base64.b64decode(reply["stderr"])

    @staticmethod
    def _deliver(target: Any, data: bytes) -> bytes | None:
        """Where the caller asked a stream to go: captured (returned), dropped, or appended to its file."""
        if target is subprocess.PIPE:
            return data
        if target is None or target is subprocess.DEVNULL or not data:
            return None
        name = getattr(target, "name", None)
        if isinstance(name, str):  # Triton hands a file opened for reading ("r") as ptxas's stderr
            with open(name, "ab") as fh:
                fh.write(data)
        elif isinstance(target, int):
            os.write(target, data)
        return None

    def run(self, args: Any, *, check: bool = False, stdout: Any = None, stderr: Any = None,
            capture_output: bool = False, text: bool = False, **_: Any) -> subprocess.CompletedProcess[Any]:
        rc, out, err = self._ask(args)
        if capture_output:
            stdout = stderr = subprocess.PIPE
        if stderr is subprocess.STDOUT:
            out, err, stderr = out + err, b"", None
        got_out, got_err = self._deliver(stdout, out), self._deliver(stderr, err)
        if text:
            got_out = got_out.decode() if got_out is not None else None  # type: ignore[assignment]
            got_err = got_err.decode() if got_err is not None else None  # type: ignore[assignment]
        if check and rc:
            raise subprocess.CalledProcessError(rc, args, got_out, got_err)
        return subprocess.CompletedProcess(args, rc, got_out, got_err)

    def check_output(self, args: Any, **kwargs: Any) -> Any:
        return self.run(args, check=True, stdout=subprocess.PIPE, **kwargs).stdout

    def check_call(self, args: Any, **kwargs: Any) -> int:
        self.run(args, check=True, **kwargs)
        return 0


def uses_triton(site: str) -> bool:
    """Whether the submission's Python sources import Triton (a cheap text test, before anything runs)."""
    for root, _dirs, files in os.walk(site):
        for name in files:
            if name.endswith(".py"):
                try:
                    with open(os.path.join(root, name), errors="replace") as fh:
                        text = fh.read(1 << 20)
                except OSError:
                    continue
                if "import triton" in text or "from triton" in text:
                    return True
    return False


def start(workdir: str) -> tuple[str, str]:
    """In the worker, before containment: a private Triton cache, the helper, the proxy in Triton's compiler
    modules, and the driver's own launcher built now (so what it maps is there before the guard's first look).
    Returns ``(cache directory, status line)``."""
    import importlib

    cache = os.path.join(workdir, CACHE_NAME)
    os.makedirs(cache, exist_ok=True)
    os.environ["TRITON_CACHE_DIR"] = cache
    import triton  # type: ignore[import-not-found,unused-ignore]

    triton_dir = os.path.realpath(os.path.dirname(triton.__file__))
    helper = subprocess.Popen([sys.executable, "-m", __name__, triton_dir, *compilers()],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=workdir)
    proxy = Proxy(helper)
    patched = []
    for name in TRITON_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if getattr(module, "subprocess", None) is subprocess:
            module.subprocess = proxy  # type: ignore[attr-defined]
            patched.append(name)
    try:
        target = triton.runtime.driver.active.get_current_target()
        warm = f"target {target.backend} {target.arch}"
    except Exception as exc:  # noqa: BLE001 - said in the log; the first launch will fail with it too
        warm = f"driver not ready: {type(exc).__name__}: {exc}"[:200]
    return cache, (f"Triton {triton.__version__}: compilers through helper pid {helper.pid} "
                   f"({', '.join(patched)}); {warm}; cache {cache}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    serve(Toolchain.of(args[0], tuple(args[1:])), sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

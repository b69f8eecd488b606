"""The OS sandbox around every piece of submission code: bubblewrap namespaces and a whitelisted view.

In-process checks cannot hold against code that runs in the same process and as the same user as the checks
that watch it. ``build.sh``, the OPP installer, the interface-discovery import and the candidate worker
therefore run under bubblewrap (``bwrap``, the sandbox Flatpak is built on):

* a user namespace with an unprivileged uid, a PID namespace (the judge's ``/proc`` does not exist inside),
  a network namespace with no interfaces, IPC/UTS/cgroup namespaces, a session of its own and
  ``--die-with-parent``;
* a mount namespace that holds only a read-only view of the system (``/usr``, ``/etc``, the interpreter and
  its ``sys.path``, this package) plus the few paths a stage needs: nothing else of the machine exists
  inside, so the task trees, the golden cache, the reports, the judge's working directory and the user's
  home are absent, not merely forbidden. Paths to keep hidden that fall inside a bound directory are masked.

The judge keeps owning the shared-memory region (a memfd passed by descriptor) and still freezes the worker,
whose pid in the judge's namespace bwrap reports on ``--info-fd``. seccomp stays inside as a second layer.
``--cann-sandbox auto`` uses bubblewrap where a trial run works and otherwise says loudly that it runs
without one (header, every case's flags, ``config.sandbox`` on the board).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BWRAP = "bwrap"
OFF = "off"
SANDBOX_OFF_FLAG = "sandbox_off"  # on every case graded without the OS sandbox
SANDBOX_UID = 65534  # "nobody" inside the user namespace
PROBE_TIMEOUT_S = 60.0
SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/sys")
MERGED_USR_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
DEVICE_GLOBS = ("nvidia*", "nvidia-caps", "dri", "kfd", "davinci*", "devmm_svm", "hisi_hdc", "svm0")
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) or pass --cann-sandbox off"


class SandboxUnavailable(RuntimeError):
    """``--cann-sandbox bwrap`` was asked for and bubblewrap does not work here."""


@dataclass(frozen=True)
class SandboxChoice:
    """What the session runs submission code under (builtins only: it travels to xdist workers)."""

    mode: str  # BWRAP or OFF
    requested: str
    reason: str = ""
    bwrap: str | None = None
    version: str = ""

    @property
    def on(self) -> bool:
        return self.mode == BWRAP

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SandboxChoice:
        if not data:
            return cls(mode=OFF, requested=OFF, reason="no sandbox recorded")
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def describe(self) -> str:
        if self.on:
            return (f"sandbox bubblewrap {self.version}".rstrip() + ": own user, pid, network and mount namespaces; "
                    "the task trees, golden cache, reports and home are absent inside")
        return (f"SANDBOX OFF ({self.reason}): submission code runs with in-process containment only "
                "(seccomp, audit hook); every case is flagged sandbox_off")


def sandbox_of(submission: Any) -> SandboxChoice:
    """The sandbox a prepared submission's code runs under (its state's record; none recorded: off)."""
    return SandboxChoice.from_dict(getattr(submission, "sandbox", None))


def choose(requested: str) -> SandboxChoice:
    """Resolve ``--cann-sandbox``: ``off`` as asked; ``bwrap`` or raise; ``auto`` = bwrap when a trial works."""
    if requested == OFF:
        return SandboxChoice(mode=OFF, requested=OFF, reason="--cann-sandbox off")
    path = shutil.which("bwrap")
    problem = f"bubblewrap (bwrap) is not on PATH; {INSTALL_HINT}" if path is None else _trial(path)
    if problem is None:
        assert path is not None
        return SandboxChoice(mode=BWRAP, requested=requested, bwrap=path, version=_version(path))
    if requested == BWRAP:
        raise SandboxUnavailable(f"--cann-sandbox bwrap: {problem}")
    return SandboxChoice(mode=OFF, requested=requested, reason=problem)


def _version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().removeprefix("bubblewrap").strip()


def _trial(path: str) -> str | None:
    """None when bwrap can start this interpreter in the worker's namespaces; else why not."""
    argv = command(path, [sys.executable, "-c", "import sys; sys.exit(0)"], workdir=None)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap could not be started ({exc}); {INSTALL_HINT}"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return (f"bubblewrap does not work here ({why}; unprivileged user namespaces may be disabled: "
                f"sysctl kernel.unprivileged_userns_clone=1); {INSTALL_HINT}")
    return None


def package_dir() -> str:
    """This package's directory: the worker's own code, bound read-only (never the repository around it)."""
    return str(Path(__file__).resolve().parents[1])


def python_paths() -> list[str]:
    """The interpreter and every directory of its ``sys.path`` that holds libraries (never the current
    directory or a PYTHONPATH entry of the judge's, which may be a project holding task trees)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(sys.executable)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib", "include", "platinclude", "data"):
        try:
            paths.add(sysconfig.get_path(key))
        except KeyError:
            continue
    for entry in sys.path:
        if entry and ("site-packages" in entry or "dist-packages" in entry or entry.endswith(".zip")):
            paths.add(entry)
    return sorted(p for p in paths if p and os.path.exists(p))


def user_python_path() -> list[str]:
    """The judge's absolute PYTHONPATH entries: where ``--cann-no-install`` finds the user's own cann_bench."""
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isabs(p)]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _collapse(paths: Iterable[str]) -> list[str]:
    """Existing absolute paths, real and as named, without those inside another one of the list."""
    found: set[str] = set()
    for p in paths:
        if p and os.path.exists(p):
            found.add(os.path.abspath(p))
            found.add(os.path.realpath(p))
    ordered = sorted(found, key=len)
    kept: list[str] = []
    for p in ordered:
        if not any(_inside(p, k) for k in kept):
            kept.append(p)
    return sorted(kept)


def command(bwrap: str, argv: Sequence[str], *, workdir: str | None, writable: Sequence[str] = (),
            readable: Sequence[str] = (), hidden: Sequence[str] = (), info_fd: int | None = None,
            pid1: bool = True, devices: bool = True) -> list[str]:
    """The bwrap command line that runs ``argv`` in a fresh sandbox.

    ``writable`` and ``readable`` are bound at their own paths (read-write / read-only) on top of the system
    view; ``hidden`` paths that fall inside a bound directory are masked by an empty tmpfs (or /dev/null for
    a file). ``pid1``: the command is the namespace's pid 1 (a worker, which forks nothing), so ``info_fd``'s
    ``child-pid`` is the worker itself; a build keeps bwrap's own init to reap its compilers.
    """
    args = [bwrap, "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--unshare-pid",
            "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
            "--new-session", "--hostname", "cannbench-sandbox", "--proc", "/proc", "--dev", "/dev",
            "--tmpfs", "/tmp"]
    if pid1:
        args.append("--as-pid-1")
    for link in MERGED_USR_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    system = _collapse([*SYSTEM_DIRS, *python_paths(), package_dir()])
    rw = _collapse(writable)
    ro = [p for p in _collapse([*system, *readable]) if not any(_inside(p, w) for w in rw)]
    for p in ro:
        args += ["--ro-bind", p, p]
    for p in rw:
        args += ["--bind", p, p]
    bound = ro + rw
    for p in _collapse(hidden):
        if any(_inside(p, b) and p != b for b in bound) and not any(_inside(b, p) for b in bound):
            args += ["--tmpfs", p] if os.path.isdir(p) else ["--ro-bind", "/dev/null", p]
    if devices:
        for pattern in DEVICE_GLOBS:
            for dev in sorted(Path("/dev").glob(pattern)):
                args += ["--dev-bind-try", str(dev), str(dev)]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    if workdir:
        args += ["--chdir", workdir]
    return [*args, "--", *argv]


def read_child_pid(fd: int) -> int | None:
    """The sandboxed command's pid in the judge's namespace, from bwrap's ``--info-fd`` (None when bwrap
    failed before writing it). Reads until the closing brace: bwrap keeps the descriptor open."""
    data = b""
    while not data.rstrip().endswith(b"}"):
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            return None
        if not chunk:
            break
        data += chunk
    try:
        pid = json.loads(data.decode()).get("child-pid")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return None
    return pid if isinstance(pid, int) and pid > 0 else None


def exit_code(bwrap_rc: int) -> int:
    """bwrap reports a command killed by signal N as 128 + N; the judge's vocabulary wants -N."""
    return -(bwrap_rc - 128) if 128 < bwrap_rc < 128 + 65 else bwrap_rc

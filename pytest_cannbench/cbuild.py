"""Our own small C kernels (the comparison's scan, the input draw): built by the system's C compiler into a
private scratch directory that is removed once the library is loaded, so nothing is cached on disk and nothing a
later process could replace. Every user checks its kernel against the torch path before trusting it."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from pytest_cannbench.scratch import make_dir

FLAGS = ["-O3", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math"]  # no contraction: same roundings
TUNED = ["-march=native"]  # tried first (the library runs where it is built); without it where unsupported


def switched_off(env_switch: str) -> bool:
    """Whether the user turned a kernel off (its variable set to ``0``): its torch path does the work."""
    return os.environ.get(env_switch, "").strip() == "0"


def compiler() -> list[str] | None:
    """The C compiler's command: ``$CC`` (split as a shell would), else ``cc`` or ``gcc`` on the PATH."""
    cc = os.environ.get("CC", "").strip()
    if cc:
        return shlex.split(cc)
    found = shutil.which("cc") or shutil.which("gcc")
    return [found] if found else None


def build(directory: Path, source: Path) -> tuple[Path | None, str]:
    """Compile ``source`` into a shared library in ``directory``; its path and how it was built, or None and why
    not."""
    cc = compiler()
    if cc is None:
        return None, "no C compiler (cc, gcc or $CC)"
    out = directory / f"{source.stem}.so"
    problem = ""
    for flags in ([*FLAGS, *TUNED], FLAGS):
        try:
            done = subprocess.run([*cc, *flags, "-o", str(out), str(source), "-lm"], capture_output=True,
                                  text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{cc[0]} could not build it: {exc}"
        if done.returncode == 0 and out.exists():
            return out, " ".join([*cc, *flags[:1], *flags[len(FLAGS):]])
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        problem = f"{cc[0]} failed to build it: {tail[0]}"
    return None, problem


@contextlib.contextmanager
def built(source: Path) -> Iterator[tuple[Path | None, str]]:
    """:func:`build` in a private scratch directory, removed on leaving (a library loaded by then stays mapped, and
    nothing is left on disk); ``(None, why)`` where no such directory can be made."""
    try:
        directory = make_dir("kernel")
    except OSError as exc:  # an unwritable temporary directory
        yield None, f"no scratch directory to build it in: {exc}"
        return
    try:
        yield build(directory, source)
    finally:
        shutil.rmtree(directory, ignore_errors=True)

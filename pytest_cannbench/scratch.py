"""Where the plugin writes outside the report directory: the per-machine cache (:func:`cache_dir`) and the
session's private temporary directories, named by the process that made them, and their reaping.

Every temporary directory the plugin makes (worker working directories, the private install, golden scratch,
KernelBench state) is ``<tmp>/cannbench-<kind>-p<pid>n<pid namespace>-<random>``, removed by its maker when it
closes. A session killed outright (SIGKILL, the OOM killer, a CI timeout) cannot remove them; the next session
removes those whose maker is gone (:func:`reap`), so an interrupted run leaves nothing behind for long. The pid
namespace is in the name because a pid means nothing outside its namespace: containers sharing one /tmp never
reap each other's directories.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

PREFIX = "cannbench-"
_NAME = re.compile(r"^cannbench-[a-z][a-z-]*?-p(\d+)n(\d+)-[A-Za-z0-9_]+$")


def cache_dir() -> Path:
    """Per-machine data the plugin keeps between runs and projects (the roofline calibration):
    ``$CANNBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/pytest-cannbench``, else ``~/.cache/pytest-cannbench``."""
    explicit = os.environ.get("CANNBENCH_CACHE_DIR")
    if explicit:
        return Path(explicit)
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "pytest-cannbench"
    try:
        home = Path.home()
    except (RuntimeError, KeyError):  # $HOME unset and no passwd entry (a bare container user)
        home = Path("~")
    if not home.is_absolute():
        return Path(tempfile.gettempdir()) / f"pytest-cannbench-{os.getuid()}"
    return home / ".cache" / "pytest-cannbench"


def _namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def make_dir(kind: str) -> Path:
    """A fresh private directory ``cannbench-<kind>-p<pid>n<namespace>-*`` under the temporary directory."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-p{os.getpid()}n{_namespace()}-"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def reap(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove this user's scratch directories whose making process no longer exists; returns what was removed.

    Only names this module makes, in this pid namespace, only directories owned by the current user, never one
    whose pid is alive (a reused pid keeps its directory: conservative)."""
    base = Path(root or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    uid, namespace = os.getuid(), _namespace()
    for entry in entries:
        match = _NAME.match(entry.name)
        if not match or int(match.group(2)) != namespace:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_dir(follow_symlinks=False) or st.st_uid != uid or _alive(int(match.group(1))):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.exists(entry.path):
            removed.append(Path(entry.path))
    return removed

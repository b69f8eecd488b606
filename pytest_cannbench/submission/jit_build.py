"""The build stage for code that compiles at import (``load_inline``, ``load``; Triton's cache on CUDA).

Judge side: decides whether a submission needs it (a cheap text test of its sources), runs :mod:`jit_main`
through :func:`build._run` (the runner, and the sandbox, of ``build.sh``) with ``--cann-build-timeout`` and a
private ``TORCH_EXTENSIONS_DIR``/``TRITON_CACHE_DIR`` under the session directory, and keeps its log as
``logs/jit_build.log``. The artefacts go under the submission's private install (``<site>/_cannbench_jit``),
the one place the candidate worker's guard treats as the submission's own libraries; the manifest's path
reaches the worker as ``$CANNBENCH_JIT_MANIFEST``, and the worker's router loads exactly what it lists.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cannbench.submission.jit_load import ARTEFACTS, MANIFEST_ENV, MANIFEST_NAME, Manifest, uses_jit

LOG_NAME = "jit_build.log"
# build._run and build._build_env, passed in by the caller (build imports this module, not the reverse)
Runner = Callable[[list[str], Path, Path, float, dict[str, str]], tuple[int | None, float]]


@dataclass
class JitBuild:
    """What the JIT build stage did: every module label with "" (imported, compiled) or why it failed."""

    manifest: Path
    failures: dict[str, str] = field(default_factory=dict)
    extensions: int = 0
    seconds: float = 0.0
    log: Path | None = None

    def env(self) -> dict[str, str]:
        return {MANIFEST_ENV: str(self.manifest)}


def needs_jit(paths: list[Path]) -> bool:
    """Whether any of these Python files may compile at import."""
    for path in paths:
        try:
            if uses_jit(path.read_text(errors="replace")):
                return True
        except OSError:
            continue
    return False


def package_sources(site: Path, package: str = "cann_bench") -> list[Path]:
    return sorted((site / package).rglob("*.py")) if (site / package).is_dir() else []


def _tail(log: Path, chars: int = 3000) -> str:
    try:
        return log.read_bytes()[-chars:].decode("utf-8", errors="replace")
    except OSError:
        return ""


def run_jit_build(site: Path, work: Path, log_dir: Path, timeout: float, *, runner: Runner,
                  env: dict[str, str], packages: tuple[str, ...] = (),
                  modules: dict[str, Path] | None = None) -> JitBuild:
    """Import ``packages`` (from ``site``) and ``modules`` (label -> file) in the build child; the returned
    record names each one that did not import, with the child's message (the compiler's output) or the
    timeout, and the log's path."""
    modules = modules or {}
    artefacts = site / ARTEFACTS
    manifest = artefacts / MANIFEST_NAME
    cache = work / "jit-cache"
    for sub in ("torch_extensions", "triton"):
        (cache / sub).mkdir(parents=True, exist_ok=True)
    log = log_dir / LOG_NAME
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"")
    env = dict(env)
    env.update(TORCH_EXTENSIONS_DIR=str(cache / "torch_extensions"), TRITON_CACHE_DIR=str(cache / "triton"))
    cmd = [sys.executable, "-m", "pytest_cannbench.submission.jit_main", "--manifest", str(manifest),
           "--artefacts", str(artefacts), "--site", str(site)]
    cmd += [f"--package={p}" for p in packages] + [f"--module={label}={path}" for label, path in modules.items()]
    rc, seconds = runner(cmd, work, log, timeout, env)
    record = Manifest.read(manifest) if manifest.is_file() else Manifest()
    if not manifest.is_file():
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(record.to_json())
    why = (f"the JIT build did not finish within {timeout:g} s (--cann-build-timeout) and was killed" if rc is None
           else f"the JIT build exited with code {rc}")
    failures = {label: message for label, message in record.modules.items() if message}
    for label in [*packages, *modules]:
        if label not in record.modules:
            failures[label] = f"{why}; log {log}\n{_tail(log)}"
    for label, message in failures.items():
        failures[label] = f"compiling at import failed: {message}\n(log {log})"
    return JitBuild(manifest=manifest, failures=failures, extensions=len(record.extensions),
                    seconds=round(seconds, 3), log=log)

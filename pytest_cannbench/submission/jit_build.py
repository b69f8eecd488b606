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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cannbench.workers.jit_load import ARTEFACTS, MANIFEST_ENV, MANIFEST_NAME, Manifest, uses_jit
from pytest_cannbench.workers.limits import usable_cores

LOG_NAME = "jit_build.log"
MAX_JOBS = 8
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


def jobs(items: int, cores: int | None = None) -> int:
    """How many build children run side by side: each compiles with one compiler process at a time for the most
    part (nvcc, then the host compiler), so one child per two cores, at most 8; a 2-core machine keeps one."""
    return max(1, min(items, (usable_cores() if cores is None else cores) // 2, MAX_JOBS))


def run_jit_build(site: Path, work: Path, log_dir: Path, timeout: float, *, runner: Runner,
                  env: dict[str, str], packages: tuple[str, ...] = (),
                  modules: dict[str, Path] | None = None) -> JitBuild:
    """Import ``packages`` (from ``site``) and ``modules`` (label -> file) in build children (:func:`jobs` of
    them, each given every k-th module, all under the same time limit); the returned record names each one that
    did not import, with the child's message (the compiler's output) or the timeout, and the log's path."""
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
    items = [(p, f"--package={p}") for p in packages] + [(label, f"--module={label}={path}")
                                                         for label, path in modules.items()]
    k = jobs(len(items))
    shards = [(items[i::k], manifest if k == 1 else artefacts / f"manifest.{i}.json",
               log if k == 1 else log_dir / f"jit_build.{i}.log") for i in range(k)]

    def build(shard: tuple[list[tuple[str, str]], Path, Path]) -> tuple[int | None, float]:
        labelled, shard_manifest, shard_log = shard
        cmd = [sys.executable, "-m", "pytest_cannbench.submission.jit_main", "--manifest", str(shard_manifest),
               "--artefacts", str(artefacts), "--site", str(site), *(arg for _, arg in labelled)]
        return runner(cmd, work, shard_log, timeout, env)

    with ThreadPoolExecutor(max_workers=k) as pool:
        results = list(pool.map(build, shards))
    record = Manifest()
    for _, shard_manifest, shard_log in shards:
        part = Manifest.read(shard_manifest) if shard_manifest.is_file() else Manifest()
        record.extensions += part.extensions
        record.modules.update(part.modules)
        if k > 1:
            with open(log, "ab") as out:
                out.write(shard_log.read_bytes() if shard_log.is_file() else b"")
            shard_log.unlink(missing_ok=True)
            shard_manifest.unlink(missing_ok=True)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(record.to_json())
    failures = {label: message for label, message in record.modules.items() if message}
    for (labelled, _, _), (rc, _) in zip(shards, results):
        why = (f"the JIT build did not finish within {timeout:g} s (cann_build_timeout) and was killed"
               if rc is None else f"the JIT build exited with code {rc}")
        for label, _ in labelled:
            if label not in record.modules:
                failures[label] = f"{why}; log {log}\n{_tail(log)}"
    for label, message in failures.items():
        failures[label] = f"compiling at import failed: {message}\n(log {log})"
    return JitBuild(manifest=manifest, failures=failures, extensions=len(record.extensions),
                    seconds=round(max(seconds for _, seconds in results), 3), log=log)

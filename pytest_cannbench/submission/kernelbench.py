"""KernelBench submissions: a directory of ``ModelNew`` modules, one per problem. Judge side, no imports of them.

Accepted layouts for the problem ``level1/19_ReLU.py`` (first match wins):
``19_ReLU/ai_op.py``, ``level1/19_ReLU/ai_op.py``, ``19_ReLU.py``, ``level1/19_ReLU.py``, and the seeds'
example form without the number, ``ReLU/ai_op.py`` / ``ReLU.py``. Nothing is built or installed: the
directory is copied once into a private session directory, and only candidate workers import from the copy.
Modules that compile at import (``load_inline``) are compiled once here, in the build stage (:mod:`jit_build`);
the artefacts form the submission's private install (``site_dir``), and a module whose compile failed is
recorded in ``jit_failures`` (its problems fail as ``compile_failed``, the others are graded).
"""

from __future__ import annotations

import functools
import re
import shutil
import time
from pathlib import Path
from typing import Any

from pytest_cannbench.outcome import BUILD_OK, IMPORT_FAILED
from pytest_cannbench.scratch import make_dir
from pytest_cannbench.submission.build import NO_BOX, Box, SubmissionState, _build_env, _run, check_symbols
from pytest_cannbench.submission.generations import generation_files, sample_module
from pytest_cannbench.submission.jit_build import needs_jit, run_jit_build

MODEL_NEW = re.compile(r"^class\s+ModelNew\b", re.MULTILINE)
MAX_SOURCE_BYTES = 4 << 20
KIND = "kernelbench"


def _defines_model_new(path: Path) -> bool:
    try:
        return path.stat().st_size <= MAX_SOURCE_BYTES and bool(MODEL_NEW.search(path.read_text(errors="replace")))
    except OSError:
        return False


def modules(source: Path) -> list[Path]:
    """Every file of the directory that defines ``class ModelNew`` (at most three levels deep)."""
    found = []
    for pattern in ("*.py", "*/*.py", "*/*/*.py"):
        found += [p for p in sorted(source.glob(pattern)) if p.is_file() and _defines_model_new(p)]
    return found


def looks_like(source: str | None) -> bool:
    """A KernelBench submission: ModelNew modules and neither a build.sh nor a prebuilt wheel."""
    if not source:
        return False
    root = Path(source)
    if (root / "build.sh").is_file() or any(root.glob("dist/*.whl")):
        return False
    return bool(modules(root))


def wanted(settings: Any) -> bool:
    """Whether the session's submission is of this kind: ``--cann-bench stanford``, or auto and it looks so."""
    bench = getattr(settings, "bench", "auto")
    return bool(settings.source) and (bench == "stanford" or (bench == "auto" and looks_like(settings.source)))


def prepare(source: str, log_dir: Path | None = None, build_timeout: float = 600.0,
            sample: int | None = None, box: Box = NO_BOX) -> SubmissionState:
    """Copy the directory privately, list its modules (only ``sample``'s, for a generation directory) and compile
    those that compile at import; a directory without any module is ``import_failed``."""
    t0 = time.perf_counter()
    session_dir = make_dir("kb-submission")
    copy = session_dir / "src"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".venv", "venv"))
    found = modules(copy)
    if sample is not None:
        own = set(generation_files(copy).get(sample, {}).values())
        found = [p for p in found if p in own]
    names = [[p.relative_to(copy).as_posix(), KIND] for p in found]
    if not found:
        return SubmissionState(status=IMPORT_FAILED, message=f"{source}: no module defines class ModelNew",
                               source=source, session_dir=str(session_dir), sandbox=box.choice.to_dict(),
                               protect=list(box.hidden))
    state = SubmissionState(status=BUILD_OK, source=source, site_dir=None, interfaces=names,
                            session_dir=str(session_dir), seconds={"copy": time.perf_counter() - t0}, sample=sample,
                            sandbox=box.choice.to_dict(), protect=list(box.hidden))
    jit_modules = {p.relative_to(copy).as_posix(): p for p in found if needs_jit([p])}
    if jit_modules and log_dir is not None:
        site = session_dir / "site"
        jit = run_jit_build(site, session_dir, log_dir, build_timeout, runner=functools.partial(_run, box=box),
                            env=_build_env(session_dir), modules=jit_modules)
        state.site_dir, state.jit_failures = str(site), jit.failures
        state.env.update(jit.env())
        state.build_log = str(jit.log)
        state.seconds["jit_build"] = jit.seconds
        check_symbols(state)
    return state


def build_failure(state: SubmissionState, module: str | None) -> str | None:
    """Why the module (a path from :func:`module_for`) could not be compiled at build time, or None."""
    if not module or not state.session_dir or not state.jit_failures:
        return None
    try:
        rel = Path(module).relative_to(Path(state.session_dir) / "src").as_posix()
    except ValueError:
        return None
    return state.jit_failures.get(rel)


def module_for(state: SubmissionState, rel_path: str) -> str | None:
    """The submission module implementing the problem ``rel_path`` (e.g. ``level1/19_ReLU.py``), or None."""
    if not state.session_dir:
        return None
    root = Path(state.session_dir) / "src"
    if state.sample is not None:
        found = sample_module(root, state.sample, rel_path)
        return str(found) if found is not None and _defines_model_new(found) else None
    parts = rel_path.split("/")
    stem = Path(parts[-1]).stem
    levels = parts[:-1]
    bare = re.sub(r"^\d+_", "", stem)
    candidates = [f"{stem}/ai_op.py", *[f"{lv}/{stem}/ai_op.py" for lv in levels], f"{stem}.py",
                  *[f"{lv}/{stem}.py" for lv in levels], f"{bare}/ai_op.py", f"{bare}.py"]
    for name in candidates:
        path = root / name
        if path.is_file() and _defines_model_new(path):
            return str(path)
    return None

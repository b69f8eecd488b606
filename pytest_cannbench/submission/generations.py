"""Many submissions in one session: the candidates behind ``--cann-source`` (several directories, and
KernelBench's generation layout, one candidate per sample). Judge side, names and paths only.

KernelBench's ``runs/<run>/`` holds ``level_<L>_problem_<P>_sample_<S>_kernel.py`` files (one ModelNew per
problem and sample, as ``eval_from_generations.py`` reads them). A directory holding such files expands to one
candidate per sample ``S``, named ``<dir>_s<S>``; any other directory is one candidate named after it. The
problem ``level<L>/<P>_<Name>.py`` of the bench is graded with the sample's file for ``(L, P)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

GENERATION = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
LEVEL = re.compile(r"^level(\d+)$")
NUMBER = re.compile(r"^(\d+)_")
SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Candidate:
    """One submission of a multi-candidate session: its name (in node ids and boards), directory and sample."""

    name: str
    source: str
    sample: int | None = None  # a generation directory's sample; None: a whole directory


def generation_files(root: Path) -> dict[int, dict[tuple[int, int], Path]]:
    """sample -> (level, problem) -> file, for the generation files directly in ``root``."""
    found: dict[int, dict[tuple[int, int], Path]] = {}
    for path in sorted(root.glob("level_*_problem_*_sample_*_kernel.py")):
        m = GENERATION.match(path.name)
        if m and path.is_file():
            level, problem, sample = (int(g) for g in m.groups())
            found.setdefault(sample, {})[(level, problem)] = path
    return found


def is_generation(source: str | Path) -> bool:
    return bool(generation_files(Path(source)))


def expand(sources: list[str]) -> list[Candidate]:
    """The candidates of the given directories, in order, with unique names."""
    out: list[Candidate] = []
    seen: set[str] = set()
    for source in sources:
        base = SAFE.sub("_", Path(source).name) or "source"
        samples: list[int | None] = [*sorted(generation_files(Path(source)))] or [None]
        for sample in samples:
            name = base if sample is None else f"{base}_s{sample}"
            unique, n = name, 2
            while unique in seen:
                unique, n = f"{name}_{n}", n + 1
            seen.add(unique)
            out.append(Candidate(unique, source, sample))
    return out


def problem_number(rel_path: str) -> tuple[int | None, int | None]:
    """``(level, problem)`` of a bench problem such as ``level1/19_ReLU.py``: (1, 19)."""
    parts = rel_path.split("/")
    level = next((int(m.group(1)) for p in parts[:-1] if (m := LEVEL.match(p))), None)
    number = NUMBER.match(parts[-1])
    return level, int(number.group(1)) if number else None


def sample_module(root: Path, sample: int, rel_path: str) -> Path | None:
    """The sample's file for the problem, or None (a problem without a level is level 1, as in KernelBench)."""
    level, problem = problem_number(rel_path)
    if problem is None:
        return None
    path = root / f"level_{level or 1}_problem_{problem}_sample_{sample}_kernel.py"
    return path if path.is_file() else None

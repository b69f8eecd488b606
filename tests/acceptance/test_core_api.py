"""The grading core from plain Python, with no pytest in the process: the manual's example is run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _example() -> str:
    text = (ROOT / "docs" / "core.md").read_text()
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_the_manuals_example_grades_without_pytest(tmp_path: Path) -> None:
    script = _example().replace('report_dir="reports/core-example"', f'report_dir={str(tmp_path / "r")!r}')
    script += ("\nimport sys\nleaked = sorted(m for m in sys.modules if m == 'pytest' or m.startswith('_pytest'))"
               "\nprint('pytest modules:', leaked)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "build: ok ", done.stdout
    graded = [line.split() for line in lines if line.startswith("level1/gelu_")]
    assert len(graded) >= 3 and all(parts[1] == "passed" for parts in graded), done.stdout
    assert lines[-1] == "pytest modules: []", "the core imported pytest"

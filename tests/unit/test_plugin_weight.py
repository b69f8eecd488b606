"""The plugin in other people's runs: a pytest run that is not a cannbench run imports at most three of the
package's modules (the package, its entry point, nothing else), and registers its options all the same."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = '''
import sys
def pytest_sessionfinish(session):
    mods = sorted(m for m in sys.modules if m == "pytest_cannbench" or m.startswith("pytest_cannbench."))
    print("\\nCANNBENCH-MODULES " + " ".join(mods))
'''


def _modules(tmp_path: Path, *args: str) -> list[str]:
    (tmp_path / "conftest.py").write_text(PROBE)
    (tmp_path / "test_unrelated.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("CANNBENCH-MODULES"))
    return line.split()[1:]


def test_an_unrelated_run_imports_at_most_three_modules(tmp_path: Path) -> None:
    modules = _modules(tmp_path)
    assert len(modules) <= 3, modules
    assert modules == ["pytest_cannbench", "pytest_cannbench.plugin"]


def test_an_unrelated_run_pointed_at_its_own_tests_stays_light(tmp_path: Path) -> None:
    assert len(_modules(tmp_path, "test_unrelated.py")) <= 3


def test_the_options_are_registered_in_an_unrelated_run(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert "--cann-source=DIR|@golden|@installed" in done.stdout and "cann_golden_memory" in done.stdout

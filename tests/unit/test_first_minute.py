"""Issue 19, the first minute: every option in the README's tables (generated from the options' declarations),
README examples that select something, no unused or needlessly required dependency, a setup script that asks before
pulling torch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import options_table  # noqa: E402


def test_the_readme_lists_every_option_as_options_py_has_it() -> None:
    readme = (ROOT / "README.md").read_text()
    assert options_table.in_readme(readme) == options_table.table(), \
        "README.md's options table is stale: run `python scripts/options_table.py --write`"
    from pytest_cannbench.plugin import DECLARED

    assert DECLARED.read_text() == options_table.registration_json(), \
        "the options plugin.py registers are stale: run `python scripts/options_table.py --write`"
    import argparse

    import pytest

    from pytest_cannbench import plugin

    parser = pytest.Parser(_ispytest=True)
    plugin.pytest_addoption(parser)
    options = parser.getgroup("cannbench").options
    shown = [o.names()[0] for o in options if o.attrs().get("help") != argparse.SUPPRESS]
    assert 10 < len(shown) <= 25 and all(f"`{name} " in readme or f"`{name}`" in readme for name in shown)
    hidden = [o.names()[0] for o in options if o.attrs().get("help") == argparse.SUPPRESS]  # previous spellings
    assert hidden and all(f"`{name}`" in readme for name in hidden)
    assert all(f"`{key}" in readme for key in parser._inidict if key.startswith("cann_"))
    assert "KernelBench" in readme and "--cann-bench stanford" in readme


def test_readme_k_examples_select_bundled_cases() -> None:
    """Each ``-k`` example of the README run against the bundled tasks/ selects at least one case."""
    readme = (ROOT / "README.md").read_text()
    examples = re.findall(r"^pytest --cann-tasks=tasks (.*?-k (?:\"[^\"]+\"|\S+).*?)\s+#", readme, re.M)
    assert len(examples) >= 3, examples
    for example in examples:
        args = [a.strip('"') for a in re.findall(r'"[^"]+"|\S+', example)]
        args = [a for a in args if not a.startswith("--cann-source")]
        done = subprocess.run([sys.executable, "-m", "pytest", "--cann-tasks=tasks", "--collect-only", "-q",
                               "-p", "no:cacheprovider", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, check=False)
        assert done.returncode == 0, (example, done.stdout[-2000:], done.stderr[-2000:])


def test_dependencies_are_what_the_code_needs() -> None:
    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~ \[]", dep, maxsplit=1)[0].lower() for dep in project["dependencies"]}
    assert "pandas" not in names  # never imported (and on the guard's own blocked list)
    assert not names & {"pytest-html", "pytest-timeout"}  # optional integrations: extras
    extras = project["optional-dependencies"]
    assert any(d.startswith("pytest-html") for d in extras["html"])
    assert any(d.startswith("pytest-timeout") for d in extras["timeout"])
    used = subprocess.run(["git", "grep", "-l", "-E", r"^\s*(import|from) pandas", "--", "pytest_cannbench"],
                          cwd=ROOT, capture_output=True, text=True, check=False).stdout
    assert used == ""


def test_setup_takes_torch_from_variables_and_documents_them() -> None:
    script = (ROOT / "scripts" / "setup.sh").read_text()
    assert "TORCH_SPEC" in script and "TORCH_INDEX_URL" in script
    assert re.search(r'install[^\n]*"\$TORCH_SPEC"', script)
    readme = (ROOT / "README.md").read_text()
    assert "TORCH_SPEC" in readme and "TORCH_INDEX_URL" in readme
    done = subprocess.run(["bash", "-n", str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr

"""A task's YAML files read as the official harness means them: ``yaml.safe_load`` semantics, YAML 1.2 floats,
the C loader where PyYAML has one, and every failure a :class:`TaskFormatError` naming the file and the line.
yaml is imported on first use: collection needs it, the plugin's start does not."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pytest_cannbench.taskformat.errors import TaskFormatError

_LOADER: Any = None

# YAML 1.1 (PyYAML) reads `1e-06` as a *string* because it has no dot; task authors mean a float
# (add_rms_norm_dynamic_quant's epsilon). Resolving YAML 1.2 floats at load time fixes this at the
# source, instead of the official harness's "convert any numeric-looking attr string" (docs/task-format.md).
_FLOAT_12 = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


def _yaml_loader() -> Any:
    global _LOADER
    if _LOADER is None:
        import yaml

        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        loader: Any = type("CannTaskLoader", (base,), {})  # a yaml Loader subclass; yaml has no stubs here
        loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789"))
        _LOADER = loader
    return _LOADER


def load_yaml(path: Path) -> Any:
    """``yaml.safe_load`` semantics (anchors resolved, ``.inf``/``.nan`` as floats), C loader when present."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TaskFormatError(path, "", f"cannot read file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise TaskFormatError(path, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return yaml.load(text, Loader=_yaml_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TaskFormatError(path, where, f"YAML syntax error: {problem}", "fix the YAML syntax") from None

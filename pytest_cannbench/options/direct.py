"""Settings without pytest, for the grading core's other front-ends (a Python program, the service)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from pytest_cannbench.options.settings import Settings


def settings_for(**overrides: Any) -> Settings:
    """A bare cannbench run's settings, then ``overrides`` by field name. Paths are made absolute from the current
    directory; the leaderboard goes into the report directory; no golden cache unless one is named; a submission
    graded without a ``seed`` mixes in a fresh secret, as a pytest run does. The values are taken as given: a
    front-end that reads them from users checks them itself."""
    names = {f.name for f in dataclasses.fields(Settings)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise TypeError(f"settings_for: unknown setting(s) {', '.join(unknown)} (the fields of options.Settings)")
    values = dict(overrides)
    seeded = values.get("seed") is not None
    if not seeded:
        values.pop("seed", None)
    report_dir = os.path.abspath(str(values.get("report_dir") or "reports"))
    values["report_dir"] = report_dir
    values["leaderboard"] = os.path.abspath(str(values.get("leaderboard") or os.path.join(report_dir,
                                                                                         "leaderboard.json")))
    values.setdefault("golden_cache", None)
    for name in ("tasks", "source", "hidden_cases"):
        if values.get(name):
            values[name] = os.path.abspath(str(values[name]))
    source = values.get("source")
    values["sources"] = tuple(os.path.abspath(str(s)) for s in values.get("sources") or ((source,) if source else ()))
    if values["sources"] and not source:
        values["source"] = values["sources"][0]
    graded = bool(values.get("source") or values.get("no_install"))
    if "secret" not in values and not seeded and graded:
        values["secret"] = os.urandom(16).hex()
    return Settings(**values)

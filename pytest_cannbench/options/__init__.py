"""Settings of a run: every option and ini key declared once, on the field of :class:`Settings` it sets
(``settings``, with the metadata of ``declare``), and everything else derived from those declarations: pytest's
options and ini keys, parsing and single-value checks (``parse``, ``values``, ``specs``), the spellings of the
previous release (``aliases``), and the lists other rooms need (``table``: the ``--cann-resume`` identity, what
``cannbench merge`` compares, the README's options table).

Only ``parse`` imports pytest (loaded when one of its names is first asked for): ``cannbench merge`` reads the
declarations without it. The words of options whose meaning lives in a room (the sandbox modes, the input
draws, the dispatch and pool modes) are the vocabulary's, so the declarations import no room that acts on them.

May import: vocab (the registries' names, the option words rooms own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_cannbench.options.defaults import (
    BENCHES,
    CHECKERS,
    CUDA_GRAPH_MODES,
    DEFAULT_KB_TRIALS,
    DEFAULT_MIN_FREE_GIB,
    GOLDEN_PRECISIONS,
    GUARD_MODES,
    ISOLATION_MODES,
    KB_ACCURACY,
    KB_GUARDS,
    PROFILER_LEVELS,
    SECRET_WORKERINPUT_KEY,
)
from pytest_cannbench.options.direct import settings_for
from pytest_cannbench.options.settings import Settings

if TYPE_CHECKING:
    from pytest_cannbench.options.parse import (
        SETTINGS_KEY,
        CannOptionDeprecationWarning,
        asked,
        registration,
        settings_from_config,
    )

_PYTEST_SIDE = ("SETTINGS_KEY", "CannOptionDeprecationWarning", "asked", "registration",
                "settings_from_config")

__all__ = ["BENCHES", "CHECKERS", "CUDA_GRAPH_MODES", "DEFAULT_KB_TRIALS", "DEFAULT_MIN_FREE_GIB", "GOLDEN_PRECISIONS",
           "GUARD_MODES", "ISOLATION_MODES", "KB_ACCURACY", "KB_GUARDS", "PROFILER_LEVELS", "SECRET_WORKERINPUT_KEY",
           "SETTINGS_KEY", "CannOptionDeprecationWarning", "Settings", "asked", "registration", "settings_for",
           "settings_from_config"]


def __getattr__(name: str) -> Any:
    if name in _PYTEST_SIDE:
        # brings pytest: only the pytest side's names load it (cannbench merge reads the declarations without it)
        from pytest_cannbench.options import parse

        return getattr(parse, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

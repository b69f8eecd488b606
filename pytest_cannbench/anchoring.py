"""T_baseline and T_HW for a case: official metadata where it covers the hardware, live anchors otherwise.

Placeholder wiring until metadata and roofline land (next commit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .devices import DevicePlan
from .options import Settings


def make_anchor_source(settings: Settings, device: DevicePlan, cache_dir: Path,
                       threads: int) -> Callable[..., dict[str, Any]]:
    def anchors(task: Any, case: Any, data: Any) -> dict[str, Any]:
        return {}

    return anchors

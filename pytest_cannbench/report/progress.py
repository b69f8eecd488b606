"""What a person watching the run reads per case (letters and ``-v`` words) and the CI gate on the total score.

``pytest_report_teststatus`` keeps pytest's own categories (passed, failed, error, skipped), so counts, exit codes
and other plugins see what they always saw; only the letter and the verbose word say what happened: ``M`` missing
(not provided), ``T`` timeout, ``G`` a guard finding, ``C`` a crash, ``I`` interrupted, and a pass reads
``PASSED ×1.83 HAP 0.62`` (speed-up over T_baseline, the case's HAP score).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_cannbench import outcome as oc
from pytest_cannbench.figures import hap
from pytest_cannbench.vocab.records import times_of

LETTERS = {oc.MISSING: "M", oc.TIMEOUT: "T", oc.CRASHED: "C", oc.INTERRUPTED: "I", oc.OOM_KILLED: "O"}
WORDS = {oc.MISSING: "MISSING", oc.TIMEOUT: "TIMEOUT", oc.CRASHED: "CRASHED", oc.INTERRUPTED: "INTERRUPTED",
         oc.OOM_KILLED: "OOM"}


def _category(report: Any) -> str:
    if report.failed and report.when != "call":
        return "error"
    return str(report.outcome)


def passed_word(timing: Mapping[str, Any]) -> str:
    """``PASSED ×1.83 HAP 0.62`` when the case was timed, else ``PASSED``."""
    if not timing.get("measured"):
        return "PASSED"
    t_cand, t_base, t_hw = times_of(timing)
    word = "PASSED"
    if t_cand and t_base:
        word += f" ×{t_base / t_cand:.2f}"
    score, _ = hap(t_base, t_cand, t_hw)
    if score is not None:
        word += f" HAP {score:.2f}"
    return word


def teststatus(report: Any) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
    """(category, letter, (word, markup)) for a report that carries a case outcome, else None (pytest decides)."""
    data = getattr(report, "cann", None)
    if not isinstance(data, dict):
        return None
    status, failure = data.get("status"), data.get("failure_type") or ""
    category = _category(report)
    if status == oc.PASSED:
        return category, ".", (passed_word(data.get("timing") or {}), {"green": True})
    if failure in oc.GUARD_FAILURES:
        return category, "G", (f"GUARD {failure}", {"red": True})
    if status in LETTERS:
        colour = {"yellow": True} if status in (oc.MISSING, oc.INTERRUPTED) else {"red": True}
        return category, LETTERS[status], (WORDS[status], colour)
    if category == "skipped":
        return None
    word = {"failed": "FAILED", "error": "ERROR"}.get(category, category.upper())
    return category, "F" if category == "failed" else "E", (f"{word} {failure}".rstrip(), {"red": True})


def below_gate(board: Mapping[str, Any] | None, fail_under: float | None) -> str | None:
    """The message when ``--cann-fail-under`` fails the session (total score below it), else None."""
    if fail_under is None or board is None:
        return None
    total = float(board.get("total_score") or 0.0)
    if total < fail_under:
        return f"total score {total:.2f} is below --cann-fail-under {fail_under:g}"
    return None

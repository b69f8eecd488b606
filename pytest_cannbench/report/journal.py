"""The run's identity and the files it writes: results.jsonl as cases finish, the leaderboard at the end.

``results.jsonl`` gets one line per case outcome as it reaches the controller, each tagged with the run's
identity (a hash of the submission and of every option that changes a result) and the commitment of the session
secret it was graded under (:mod:`.secret`), so a session killed halfway keeps what it finished and
``--cann-resume`` can skip exactly the cases a previous identical run recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_cannbench import __version__
from pytest_cannbench.atomic import write_bytes_atomic
from pytest_cannbench.options import Settings
from pytest_cannbench.options.table import identity_fields
from pytest_cannbench.outcome import TOO_LARGE, CaseOutcome
from pytest_cannbench.report import leaderboard
from pytest_cannbench.report.eval_report import to_eval_report
from pytest_cannbench.report.leaderboard import dumps
from pytest_cannbench.report.markdown import render
from pytest_cannbench.report.secret import commitment, reveal
from pytest_cannbench.report.splits import junit_properties

# Settings a case's recorded outcome depends on (declared with results=True): a resumed case must have been
# graded under the same.
IDENTITY_OPTIONS = identity_fields()


def submission_summary(state: Any, settings: Settings) -> dict[str, Any]:
    if state is None:
        return {"kind": "self-check" if settings.self_check else "none"}
    return {"kind": "installed" if not state.installed else "source", "source": state.source,
            "status": state.status, "message": (state.message or "").splitlines()[0][:500] if state.message else "",
            "wheel": state.wheel, "wheel_sha256": state.wheel_sha256, "prebuilt": state.prebuilt,
            "run_package": state.run_package, "interfaces": [name for name, _ in state.interfaces],
            "build_log": state.build_log, "seconds": state.seconds, "scan": state.scan}


def run_identity(submission: dict[str, Any], settings: Settings) -> str:
    what = {"submission": submission.get("wheel_sha256") or submission.get("kind"),
            "options": {name: getattr(settings, name) for name in IDENTITY_OPTIONS}}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def environment(device_label: str, hardware: str | None, cpu: str) -> dict[str, Any]:
    import pytest

    env: dict[str, Any] = {"python": platform.python_version(), "pytest": pytest.__version__,
                           "pytest_cannbench": __version__, "platform": platform.platform(), "device": device_label,
                           "hardware_key": hardware, "cpu": cpu, "cpus": os.cpu_count()}
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = torch.__version__
    else:  # an xdist controller never imports it (State.prepare_judge_process): the installed distribution's
        from importlib.metadata import PackageNotFoundError, version

        try:
            env["torch"] = version("torch")
        except PackageNotFoundError:
            pass
    npu = sys.modules.get("torch_npu")
    if npu is not None:
        env["torch_npu"] = getattr(npu, "__version__", "?")
    return env


class Journal:
    """Append-only results.jsonl; every line is flushed and fsynced, so a kill loses at most the line in flight.

    The judge remembers what the file held when it opened it and every line it appended since; at the end it
    reads the file back, and if anyone else changed it (a submission's C++ writing into the report directory,
    say) it rewrites the file from that record and says so.
    """

    def __init__(self, path: Path, identity: str, secret_commitment: str = "") -> None:
        self.path, self.identity, self.secret_commitment = path, identity, secret_commitment
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "ab")
        self._fh.seek(0, os.SEEK_END)
        with open(path, "rb") as fh:
            self._before = fh.read(self._fh.tell())
        self._lines: list[bytes] = []
        self.tampered = False

    def append(self, outcome: dict[str, Any]) -> None:
        entry = {"run": self.identity, "secret_commitment": self.secret_commitment, "outcome": outcome}
        if not self.secret_commitment:
            del entry["secret_commitment"]  # a seeded run: nothing to commit to
        line = (dumps(entry) + "\n").encode("utf-8")
        self._lines.append(line)
        self._fh.write(line)
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()
        expected = self._before + b"".join(self._lines)
        try:
            now = self.path.read_bytes()
        except OSError:
            now = None
        if now != expected:
            self.tampered = True

            write_bytes_atomic(self.path, expected)


def recorded(path: Path, identity: str) -> dict[str, dict[str, Any]]:
    """Outcomes a previous run with this identity recorded (the last line per case wins); a ``too_large`` case
    is never kept: the next run may have the memory to grade it."""
    found: dict[str, dict[str, Any]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return found
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill
            continue
        outcome = entry.get("outcome") if isinstance(entry, dict) else None
        if entry.get("run") == identity and isinstance(outcome, dict) and "key" in outcome:
            if outcome.get("status") == TOO_LARGE:
                found.pop(outcome["key"], None)
                continue
            found[outcome["key"]] = outcome
    return found


@dataclass(frozen=True)
class RunFacts:
    """What the board records of how the run was set up (the front-end's controller knows them)."""

    device_label: str
    hardware: str | None  # the metadata key an NPU run anchors with (None: live anchors)
    memory_plan: dict[str, Any]
    cpu_budget: dict[str, Any]
    cpu: str  # the machine's CPU model
    sandbox: dict[str, Any]  # what submission code ran under (guard.sandbox.SandboxChoice), or why none


def start(config: Any, collector: Any, settings: Settings, submission: Any) -> frozenset[str]:
    """Controller, after the submission is ready: open results.jsonl and load what --cann-resume may skip; the
    resumed case keys."""
    s = settings
    if config.option.collectonly:
        return frozenset()
    identity = run_identity(submission_summary(submission, s), s)
    path = Path(s.leaderboard).with_name("results.jsonl")
    if s.resume:
        for key, data in recorded(path, identity).items():
            try:
                collector.outcomes[key] = CaseOutcome.from_dict(data)
            except (TypeError, ValueError):  # a record this version cannot read: the case is graded again
                continue
            collector.resumed.add(key)
    collector.journal = Journal(path, identity, commitment(s.secret))
    return frozenset(collector.resumed)


def finish(config: Any, collector: Any, settings: Settings, submission: Any, facts: RunFacts) -> None:
    """Controller, at session end: score everything and write the leaderboard (and the optional reports)."""
    s = settings
    if collector.journal is None:
        return
    collector.journal.close()
    board = leaderboard.build((o.to_dict() for o in collector.outcomes.values()),
                              submission=submission_summary(submission, s),
                              environment=environment(facts.device_label, s.hardware or facts.hardware, facts.cpu),
                              config={**s.as_dict(), "secret_commitment": commitment(s.secret),
                                      "run_identity": collector.journal.identity,
                                      "sandbox": facts.sandbox,
                                      "memory_plan": facts.memory_plan,
                                      "cpu_budget": facts.cpu_budget,
                                      "memory_pool": collector.memory_pool,  # None: one judge, no pool
                                      "dispatch_order": collector.dispatch,  # None: not --dist load's
                                      "resumed_cases": len(collector.resumed),
                                      "journal_rewritten": collector.journal.tampered,
                                      "selection": collector.selection},
                              cap=s.hap_cap)
    collector.board = board
    leaderboard.write(Path(s.leaderboard), board)
    collector.written = [s.leaderboard, str(collector.journal.path)]
    from pytest_cannbench.report.page import write_beside  # brings jinja2: the standalone HTML report, every run

    collector.written.append(write_beside(Path(s.leaderboard), board, getattr(config.option, "htmlpath", None)))
    _junit_suite_properties(config, board)
    if s.markdown:
        leaderboard.write_atomic(Path(s.markdown), render(board))
        collector.written.append(s.markdown)
    if s.eval_report:
        leaderboard.write_atomic(Path(s.eval_report), leaderboard.dumps(to_eval_report(board), indent=1) + "\n")
        collector.written.append(s.eval_report)
    collector.notes += secret_lines(s)


def secret_lines(settings: Settings) -> list[str]:
    """The terminal's word on the session secret: its commitment, and where it will be revealed."""
    if not settings.secret:
        return ["no session secret (--cann-seed given, or nothing graded): nothing to reveal"] \
            if settings.reveal_secret else []
    where = (f"; revealed in {settings.reveal_secret} (mode 0600) once the workers have stopped"
             if settings.reveal_secret else "; not revealed (--cann-reveal-secret PATH keeps it)")
    return [f"session secret: commitment sha256 {commitment(settings.secret)}{where}"]


def reveal_secret(settings: Settings) -> None:
    """Controller, at the very end (every worker closed): ``--cann-reveal-secret``'s file."""

    s = settings
    if not (s.active and s.secret and s.reveal_secret):
        return
    try:
        reveal(s.reveal_secret, s.secret)
    except OSError as exc:
        print(f"cannbench: could not write the session secret to {s.reveal_secret}: {exc}; it is lost (only its "
              "commitment was recorded)", file=sys.stderr)


def _junit_suite_properties(config: Any, board: Mapping[str, Any]) -> None:
    """The scores (public, hidden, combined) as junit-xml suite properties, when junit-xml is on."""
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    if xml is not None:
        for name, value in junit_properties(board):
            xml.add_global_property(name, value)

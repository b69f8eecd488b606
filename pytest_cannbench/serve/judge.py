"""One judge of the service: a Ray actor holding warm graders (``pytest_cannbench.core.Grader``) between requests.

A grader is opened per grading identity (the profile's settings, the seed and the secret epoch): its golden and
baseline workers, torch and the goldens it computed stay up across candidates, so the second candidate of a
group pays neither the start-up nor the goldens. At most :data:`MAX_GRADERS` stay open; the least recently used
one with no open job is closed first (an old secret epoch's, typically).

A job is opened (its files written into a fresh private directory on this node, built and installed by the
grader in its sandbox), graded one case per call (the front checks its deadline between calls) and closed (the
candidate's workers stopped, its install and directory removed): the front drives it, so a request cut short by
its deadline leaves nothing behind. A candidate's crash or hang is its case's outcome, never the judge's; a judge
that dies anyway (its node lost, a bug) is restarted by Ray and its request retried once elsewhere
(``dispatch``).

This module runs inside Ray's worker process; the actor class is made in ``server`` with the resources asked.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cannbench.serve.intake import Payload, materialize
from pytest_cannbench.serve.profiles import settings_hash

MAX_GRADERS = 3


@dataclass
class _Open:
    key: str  # the grading identity of its grader
    directory: Path | None  # the private directory its files were written to (None: a server-side path)
    ok: bool = False
    jobs: set[str] = field(default_factory=set)


class JudgeCore:
    """The actor's body (``ray.remote(JudgeCore)`` in ``server``): plain Python, constructed in the worker."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config  # tasks, guard, sandbox, device, work_dir, golden_cache, name
        self.name = str(config["name"])
        self.work = Path(config["work_dir"]) / f"{self.name}-{os.getpid()}"
        self.work.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.graders: OrderedDict[str, Any] = OrderedDict()  # identity -> an entered Grader
        self.settings: dict[str, dict[str, Any]] = {}  # identity -> its Settings.as_dict()
        self.case_refs: dict[str, dict[tuple[str, int | None], Any]] = {}
        self.jobs: dict[str, _Open] = {}
        self.started = time.time()
        self.graded = 0
        self.spare_error = ""  # why the last spare worker could not start (health shows it)
        self.closing = False
        # this judge's index on its host, so its candidate workers get CPUs of their own (the core, in the actor's
        # process only, as in _grader); held until the actor's process ends
        from pytest_cannbench.core import claim_cpu_slot

        self.cpu_slot, self._slot_claim = claim_cpu_slot()

    # ------------------------------------------------------------------------------------------ facts

    def info(self) -> dict[str, Any]:
        """Who this judge is: for health, provenance and the tests (its process id)."""
        torch_version, device = None, self.config.get("device")
        try:
            import torch

            torch_version = torch.__version__
            if not device:  # auto: what the grader's device plan will pick (an NPU host sets it explicitly)
                device = "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:  # the judge could not even import torch: say so in health, grade nothing
            pass
        node = None
        try:
            import ray

            node = ray.get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 - outside Ray (a plain-Python use): no node id
            node = None
        return {
            "name": self.name,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "node": node,
            "torch": torch_version,
            "device": device,
            "graded": self.graded,
            "cpu_slot": self.cpu_slot,
            "graders": len(self.graders),
            "jobs": len(self.jobs),
            **({"spare_error": self.spare_error} if self.spare_error else {}),
        }

    def warm(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """Open a grader now (its judge made) with a spare candidate worker, so the first request pays for
        neither."""
        key, _ = self._grader(overrides)
        self._spare(key)
        return self.info()

    def _spare(self, key: str) -> None:
        """The next candidate's worker, started while this judge waits (``Grader.start_spare``): a request then
        pays its build and its cases, not torch's import. Best effort: without one the request starts its own."""
        grader = self.graders.get(key)
        if grader is None:
            return
        try:
            grader.start_spare()
        except Exception as exc:  # noqa: BLE001 - an optimisation; the request's own start says what is wrong
            self.spare_error = f"{type(exc).__name__}: {exc}"

    # ------------------------------------------------------------------------------------------ graders

    def _settings(self, overrides: dict[str, Any]) -> Any:
        # in the judge actor's process only: the server's process (serve.server imports this module) routes and
        # never loads the grading core or its settings
        from pytest_cannbench.options import settings_for

        fixed = {
            "tasks": self.config["tasks"],
            "report_dir": str(self.work / "reports"),
            "guard": self.config["guard"],
            "sandbox": self.config["sandbox"],
        }
        if self.config.get("device"):
            fixed["device"] = self.config["device"]
        if self.config.get("golden_cache"):
            fixed["golden_cache"] = self.config["golden_cache"]
        return settings_for(**{**fixed, **overrides})

    def _grader(self, overrides: dict[str, Any]) -> tuple[str, Any]:
        key = json.dumps(overrides, sort_keys=True, default=str)
        if key in self.graders:
            self.graders.move_to_end(key)
            return key, self.graders[key]
        busy = {o.key for o in self.jobs.values()}
        while len(self.graders) >= MAX_GRADERS:
            idle = next((k for k in self.graders if k not in busy), None)
            if idle is None:
                break
            self._close_grader(idle)
        # the grading core, in the judge actor's process only (as above)
        from pytest_cannbench.core import Grader

        settings = self._settings(overrides)
        grader = Grader(settings, cpu_slot=self.cpu_slot)
        grader.__enter__()
        if hasattr(grader.judge, "reference_slots"):  # candidates come whole, one after another: keep a case set
            grader.judge.reference_slots = max(grader.judge.reference_slots, int(self.config.get("golden_memo", 0)))
        self.graders[key] = grader
        self.settings[key] = settings.as_dict()
        self.case_refs[key] = {(ref.rel_path, ref.case_id): ref for ref in grader.cases()}
        return key, grader

    def _close_grader(self, key: str) -> None:
        grader = self.graders.pop(key)
        self.settings.pop(key, None)
        self.case_refs.pop(key, None)
        grader.__exit__(None, None, None)

    # ------------------------------------------------------------------------------------------ jobs

    def open(self, job_id: str, payload: Payload, overrides: dict[str, Any], queued: bool = False) -> dict[str, Any]:
        """Write, build and install a job's submission; what happened, and the facts its provenance needs.
        ``queued``: more jobs wait (the next candidate's worker then starts beside this one's cases)."""
        self.close(job_id)  # a retried job opens afresh
        key, grader = self._grader(overrides)
        directory = None if payload.files is None else self.work / f"job-{job_id}"
        if directory is not None:
            directory.mkdir(mode=0o700)
        record = _Open(key, directory)
        self.jobs[job_id] = record
        source = materialize(payload, directory) if directory is not None else Path(str(payload.path))
        state = grader.prepare(str(source), name=job_id)
        record.ok = bool(getattr(state, "ok", False))
        settings = self.settings[key]
        if queued and not settings.get("perf"):  # the next candidate's worker starts beside this one's cases
            self._spare(key)  # (a group back to back); a lone or timed job leaves it to the judge's idle time
        flags = []
        if settings.get("sandbox") == "off":
            flags.append("sandbox_off")
        if settings.get("guard") != "block":
            flags.append(f"guard_{settings.get('guard')}")
        return {
            **self.info(),
            "ok": record.ok,
            "status": str(getattr(state, "status", "")),
            "message": str(getattr(state, "message", "") or ""),
            "settings_hash": settings_hash(settings),
            "guard": settings.get("guard"),
            "sandbox": settings.get("sandbox"),
            "flags": flags,
        }

    def grade(self, job_id: str, rel_path: str, case_id: int | None) -> dict[str, Any]:
        """One case of an open job: its outcome as plain data (``CaseOutcome.to_dict``)."""
        record = self.jobs[job_id]
        grader = self.graders[record.key]
        ref = self.case_refs[record.key].get((rel_path, case_id))
        if ref is None:
            raise KeyError(f"{rel_path} case {case_id}: not a case of this judge's tree")
        outcome = grader.grade(ref, candidate=job_id)
        self.graded += 1
        data: dict[str, Any] = outcome.to_dict() if hasattr(outcome, "to_dict") else dict(outcome)
        return data

    def close(self, job_id: str) -> None:
        """Stop a job's candidate workers, remove its install and its files (nothing if it was never opened)."""
        record = self.jobs.pop(job_id, None)
        if record is None:
            return
        grader = self.graders.get(record.key)
        try:
            if grader is not None:
                grader.drop(job_id)
        finally:
            if record.directory is not None:
                shutil.rmtree(record.directory, ignore_errors=True)
        if not self.jobs and not self.closing:  # idle: the next request's worker starts now (one job at a time)
            self._spare(record.key)

    def shutdown(self) -> None:
        self.closing = True
        for job_id in list(self.jobs):
            self.close(job_id)
        for key in list(self.graders):
            self._close_grader(key)
        shutil.rmtree(self.work, ignore_errors=True)

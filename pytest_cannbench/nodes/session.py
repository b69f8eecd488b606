"""The pytest front-end's two roles, decided once at configure time, as xdist splits its controller from its
workers:

- :class:`RunController` on the controller or the only process: the core :class:`Controller` (build, pins,
  memory plan, fence, resume) and what it hands each xdist worker;
- a core :class:`Judge` where cases run (an xdist worker, or the only process), made at session start from the
  controller's setup or from ``workerinput``.

Items reach the judge through :func:`judge_of`; nothing on the case path asks which process it is in.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_cannbench.core import Controller, Judge, JudgeSetup
from pytest_cannbench.core.controller import SetupError
from pytest_cannbench.options import SECRET_WORKERINPUT_KEY, SETTINGS_KEY, Settings
from pytest_cannbench.scratch import reap
from pytest_cannbench.workers.huge_pages import latch_in_judge
from pytest_cannbench.workers.limits import processes as env_processes

SETUP_WORKERINPUT_KEY = "cannbench_judge_setup"
CONTROLLER_KEY = pytest.StashKey["RunController"]()
JUDGE_KEY = pytest.StashKey[Judge]()
SIGTERM_KEY = pytest.StashKey[Any]()


def worker_id(config: pytest.Config) -> str:
    workerinput = getattr(config, "workerinput", None)
    return str(workerinput["workerid"]) if workerinput else "main"


def runs_cases(config: pytest.Config) -> bool:
    """Whether this pytest process runs cases itself: an xdist worker, or a session without xdist."""
    if getattr(config, "workerinput", None) is not None:
        return True
    distributed = config.getoption("dist", "no") != "no" and bool(getattr(config.option, "tx", None))
    return not distributed  # xdist's own test for a controller (``--dist load`` without ``-n`` runs inline)


def run_processes(config: pytest.Config) -> int:
    """The run's judges, from this session's own config: an xdist worker's ``workercount``, the controller's
    ``tx`` count, 1 without xdist. Not the environment: an inline session (pytester) inside an xdist worker
    inherits ``PYTEST_XDIST_WORKER_COUNT`` without being one of its workers."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return max(1, int(workerinput.get("workercount") or env_processes()))
    if runs_cases(config):
        return 1
    return len(config.option.tx)


def task_roots(config: pytest.Config, settings: Settings) -> list[Path]:
    """The task trees this run collects (``--cann-tasks`` and path arguments that exist)."""
    roots = []
    for arg in [settings.tasks, *config.args]:
        if arg:
            path = Path(str(arg).split("::", 1)[0]).resolve()
            if path.exists():
                roots.append(path if path.is_dir() else path.parent)
    return roots


def settings_of(config: pytest.Config) -> Settings:
    return config.stash[SETTINGS_KEY]


def controller_of(config: pytest.Config) -> RunController | None:
    """The run's controller where this process is it (None on an xdist worker)."""
    return config.stash.get(CONTROLLER_KEY, None)


def judge_of(config: pytest.Config) -> Judge:
    """This process's judge (made at session start where cases run)."""
    judge = config.stash.get(JUDGE_KEY, None)
    if judge is None:
        judge = config.stash[JUDGE_KEY] = Judge(settings_of(config), _setup(config))
    return judge


def _setup(config: pytest.Config) -> JudgeSetup:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return JudgeSetup.from_dict(workerinput[SETUP_WORKERINPUT_KEY], worker_id=worker_id(config))
    controller = controller_of(config)
    assert controller is not None, "a process without workerinput is its run's controller"
    return controller.core.judge_setup(worker_id(config))


class RunController:
    """The controller side of a pytest run: the core controller and its pytest wiring."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.core = Controller(settings, run_processes(config), task_roots(config, settings))

    def start(self, announce: Callable[[str], None] | None) -> None:
        """Remove what killed sessions left behind, then build the submission once (before xdist starts
        workers); not for ``--collect-only``."""
        reap()
        if self.config.option.collectonly:
            return
        try:
            self.core.start_submission(announce)
        except SetupError as exc:
            raise pytest.UsageError(str(exc)) from None

    def workerinput(self, worker: str) -> dict[str, Any]:
        """What an xdist worker is given: its judge's setup, the secret and the plan's files."""
        return {
            SETUP_WORKERINPUT_KEY: self.core.judge_setup(worker).to_dict(),
            SECRET_WORKERINPUT_KEY: self.settings.secret,
        }

    def close(self) -> None:
        self.core.close()


def configure(config: pytest.Config, settings: Settings) -> None:
    """On the controller (or the only process) of a cannbench run, its controller."""
    if settings.active and getattr(config, "workerinput", None) is None:
        config.stash[CONTROLLER_KEY] = RunController(config, settings)


def start_judge(config: pytest.Config) -> None:
    """Where cases run: the judge, and before any case or submission code, huge pages for its tensors and the
    comparison's kernel (both import torch, so never on an xdist controller)."""
    if not (settings_of(config).active and runs_cases(config)):
        return
    from pytest_cannbench.judge.error_scan import compiled  # brings torch

    latch_in_judge()
    compiled()
    judge_of(config)


def close(config: pytest.Config) -> None:
    judge = config.stash.get(JUDGE_KEY, None)
    if judge is not None:
        judge.close()
        del config.stash[JUDGE_KEY]
    controller = controller_of(config)
    if controller is not None:
        controller.close()
    previous = config.stash.get(SIGTERM_KEY, None)
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
        del config.stash[SIGTERM_KEY]


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt("SIGTERM")


def trap_sigterm(config: pytest.Config) -> None:
    """``kill PID`` ends a cannbench session as Ctrl-C does: pytest unwinds, the board records the cases left as
    interrupted, and :func:`close` kills every worker group (otherwise they are orphaned mid-golden)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        config.stash[SIGTERM_KEY] = signal.signal(signal.SIGTERM, _sigterm)

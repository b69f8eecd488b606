"""The hooks of a cannbench run, registered by ``plugin.pytest_configure`` only when a run asks for one.

Each hook calls into the module that does the work: collection (``nodes.items``, ``nodes.tree``,
``nodes.problems``), the run's two roles (``nodes.session``), the reports (``report``).
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_cannbench.core import memory
from pytest_cannbench.guard.sandbox import SANDBOX_OFF_FLAG, sandbox_of
from pytest_cannbench.judge.goldens import tidy_cache
from pytest_cannbench.nodes import header, items, keys, multi_rank, tree
from pytest_cannbench.nodes import session as roles
from pytest_cannbench.nodes.problems import ProblemItem
from pytest_cannbench.nodes.problems import collect_file as collect_problem
from pytest_cannbench.options import Settings
from pytest_cannbench.report import collector as results
from pytest_cannbench.report import journal, progress
from pytest_cannbench.report.html import HtmlHooks
from pytest_cannbench.timing.anchors import hardware_key
from pytest_cannbench.timing.machine import cpu_model
from pytest_cannbench.workers.cpu_watch import board_config
from pytest_cannbench.workers.dispatch import CaseNeeds, write_needs
from pytest_cannbench.workers.xdist_dispatch import MemoryScheduling


class CannBenchRun:
    """One cannbench run's hooks (controller and judges alike; each hook asks only what it needs)."""

    NAME = "cannbench-run"

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.collector: results.ResultCollector | None = None
        if settings.tasks and config.args_source != pytest.Config.ArgsSource.ARGS:
            config.args = [settings.tasks]  # before the controller reads the task roots it protects from submissions
        roles.configure(config, settings)
        roles.trap_sigterm(config)
        config.addinivalue_line("markers", "cannbench: a CANN Bench case collected by pytest-cannbench")
        for level in range(1, 6):
            config.addinivalue_line("markers", f"level{level}: CANN Bench level {level} operators")
        if getattr(config, "workerinput", None) is None:
            collector = results.ResultCollector(
                key_of=lambda nodeid: keys.key_from_nodeid(
                    nodeid, config.rootpath, settings.kb_trials, keys.initial_paths(config)
                )
            )
            self.collector = collector
            config.pluginmanager.register(collector, "cannbench-results")
            if config.pluginmanager.hasplugin("xdist"):
                config.pluginmanager.register(XdistHooks(), "cannbench-xdist")
            if config.pluginmanager.hasplugin("html"):
                config.pluginmanager.register(
                    HtmlHooks(lambda: collector.board, cap=settings.hap_cap), "cannbench-html"
                )

    # ------------------------------------------------------------ session

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # tryfirst: xdist starts its workers in a trylast sessionstart, so the build happens once, before them
        config = session.config
        controller = roles.controller_of(config)
        if controller is not None:
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            controller.start(reporter.write_line if reporter is not None else None)
            if self.collector is not None:
                controller.core.resumed = journal.start(
                    config, self.collector, self.settings, controller.core.submission
                )
                if controller.core.submission is not None and not sandbox_of(controller.core.submission).on:
                    self.collector.run_flags.append(SANDBOX_OFF_FLAG)  # a weaker mode: on every case
        roles.start_judge(config)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        # tryfirst: before junit-xml writes its file (its suite properties carry the scores), pytest-html its page
        # (trylast) and the terminal summary
        config = session.config
        workeroutput = getattr(config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: which device it planned with, for the controller's board
            judge = config.stash.get(roles.JUDGE_KEY, None)
            workeroutput[results.WORKEROUTPUT_DEVICE] = judge.detected_device() if judge is not None else None
        collector = self.collector
        if collector is None or config.option.collectonly:
            return
        interrupted = collector.account_for_unrun(results.interruption_reason(session, exitstatus))
        collector.selection = results.selection(config, collector, interrupted)
        controller = roles.controller_of(config)
        assert controller is not None
        journal.finish(config, collector, self.settings, controller.core.submission, run_facts(controller, collector))
        collector.gate = progress.below_gate(collector.board, self.settings.fail_under) or ""
        if collector.gate and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

        collector.notes += tidy_cache(self.settings)  # the controller, once the workers stopped writing

    @pytest.hookimpl(tryfirst=True)  # before xdist's worker tells the controller (whose scheduler reads the needs)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        config = session.config
        workeroutput = getattr(config, "workeroutput", None)
        if workeroutput is not None:  # for the controller's account
            workeroutput[results.WORKEROUTPUT_KEYS] = results.expected_cases(session.items)
        if roles.runs_cases(config):
            size_pool(config, session.items)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:
            key = results.WORKEROUTPUT_DESELECTED
            workeroutput[key] = workeroutput.get(key, 0) + len(items)

    def unconfigure(self) -> None:
        config = self.config
        roles.close(config)
        if getattr(config, "workerinput", None) is None:
            journal.reveal_secret(self.settings)  # after close: no worker, hence no submission code, is left
        for name in ("cannbench-results", "cannbench-xdist", "cannbench-html"):
            hooks = config.pluginmanager.get_plugin(name)
            if hooks is not None:
                config.pluginmanager.unregister(hooks)

    # ------------------------------------------------------------ collection

    def pytest_collect_file(self, file_path: Any, parent: pytest.Collector) -> pytest.Collector | None:
        if file_path.suffix == ".py":  # a KernelBench problem file (nodes.problems decides)
            return collect_problem(file_path, parent)
        if self.settings.bench == "stanford":
            return None
        return items.collect_file(file_path, parent, multi_rank.OperatorWithRanks)

    def pytest_ignore_collect(self, collection_path: Any, config: pytest.Config) -> bool | None:
        return tree.ignore(collection_path, True)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collect_directory(self, path: Any, parent: pytest.Collector) -> pytest.Collector | None:
        return tree.directory(path, parent, True)

    @pytest.hookimpl(tryfirst=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> pytest.CollectReport | None:
        return tree.collect_report(collector)

    # ------------------------------------------------------------ reports

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if isinstance(item, (items.CaseItem, items.InvalidTaskItem, ProblemItem)):
            if call.when == "setup" and call.excinfo is not None and isinstance(call.excinfo.value, items.CaseFailed):
                # pytest renders setup errors without Item.repr_failure: a golden_error would print
                # pytest's own runner frames instead of its one-line verdict.
                report.longrepr = item.repr_failure(call.excinfo)
            outcome = item.stash.get(items.OUTCOME_KEY, None)
            if outcome is None and report.failed and call.excinfo is not None:
                outcome = items.fallback_outcome(item, call.excinfo)
            results.attach(item, report, outcome)
        return report

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        controller = roles.controller_of(config)
        return header.lines(config, controller) if controller is not None else []

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        return progress.teststatus(report)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.collector is not None:
            results.render_summary(terminalreporter, self.collector)


class XdistHooks:
    """Registered only when pytest-xdist is present (its hooks fail validation otherwise)."""

    @pytest.hookimpl
    def pytest_configure_node(self, node: Any) -> None:
        controller = roles.controller_of(node.config)
        assert controller is not None
        node.workerinput.update(controller.workerinput(str(node.workerinput["workerid"])))

    @pytest.hookimpl
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        controller = roles.controller_of(config)
        if controller is None or controller.settings.dispatch != "memory" or config.getoption("dist", "no") != "load":
            return None  # xdist's own scheduler (and any other --dist mode stays the user's)

        return MemoryScheduling(config, log, controller.core.memory_plan().pool_file)


def run_facts(controller: roles.RunController, collector: results.ResultCollector) -> journal.RunFacts:
    """What the board records of the run's setup, from the controller (the device a judge detected)."""
    core, s = controller.core, controller.settings
    plan = core.device(collector.device_kind)
    return journal.RunFacts(
        device_label=plan.label,
        hardware=hardware_key(s, plan) if plan.kind == "npu" else None,
        memory_plan=core.memory_plan().to_dict(),
        cpu_budget=board_config(core.timed_threads(), core.processes, plan.worker_device),
        cpu=cpu_model(),
        sandbox=(
            sandbox_of(core.submission).to_dict()
            if core.submission is not None
            else {"mode": "none", "reason": "no submission code runs"}
        ),
    )


def size_pool(config: pytest.Config, collected: list[pytest.Item]) -> None:
    """Size the judge's memory pool from the estimated needs of the cases collected (too_large ones will not run);
    where this process reports to an xdist controller, say the size and write each case's claim for the
    controller's scheduler."""
    judge = roles.judge_of(config)
    plan = judge.memory_plan
    peaks: dict[str, int] = {}
    for item in collected:
        need = getattr(item, "memory_need", None)
        estimate = need() if callable(need) else None
        if estimate is not None and estimate.peak <= plan.largest:
            peaks[item.nodeid] = estimate.peak
    size = memory.size_pool(judge, peaks)
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is None:
        return
    workeroutput[results.WORKEROUTPUT_POOL] = size.to_dict()
    workeroutput[results.WORKEROUTPUT_POOL_TEXT] = size.describe()
    if plan.pool_file:
        write_needs(plan.pool_file, CaseNeeds(size.bytes, memory.claims(judge, peaks)))

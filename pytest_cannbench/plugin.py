"""pytest hooks of pytest-cannbench. Hooks only: each one calls into the module that does the work.

This module is loaded by every pytest run of the environment (``pytest11``
entry point), so it imports nothing heavy: no torch, numpy or yaml.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_cannbench import options, state
from pytest_cannbench.judge import goldens
from pytest_cannbench.kernelbench.collect import ProblemItem
from pytest_cannbench.nodes import hidden, items, keys, multi_rank, tree
from pytest_cannbench.report import collector as results
from pytest_cannbench.report import journal as reporting
from pytest_cannbench.report import progress
from pytest_cannbench.submission import build as submission

COLLECTOR_KEY = pytest.StashKey[results.ResultCollector]()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    settings = options.settings_from_config(config)
    state.create(config, settings)
    if not settings.active:  # not a cannbench run: collect, write and print nothing (issue 19)
        return
    state.trap_sigterm(config)
    config.addinivalue_line("markers", "cannbench: a CANN Bench case collected by pytest-cannbench")
    for level in range(1, 6):
        config.addinivalue_line("markers", f"level{level}: CANN Bench level {level} operators")
    if settings.tasks and config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args = [settings.tasks]
    if not hasattr(config, "workerinput"):
        collector = results.ResultCollector(key_of=lambda nodeid: keys.key_from_nodeid(
            nodeid, config.rootpath, settings.kb_trials, keys.initial_paths(config)))
        config.stash[COLLECTOR_KEY] = collector
        config.pluginmanager.register(collector, "cannbench-results")
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(XdistHooks(), "cannbench-xdist")
        if config.pluginmanager.hasplugin("html"):
            from pytest_cannbench.report.html import HtmlHooks

            config.pluginmanager.register(HtmlHooks(lambda: collector.board, cap=settings.hap_cap), "cannbench-html")


class XdistHooks:
    """Registered only when pytest-xdist is present (its hooks fail validation otherwise)."""

    @pytest.hookimpl
    def pytest_configure_node(self, node: Any) -> None:
        st = state.of(node.config)
        data = st.submission_for_workers()
        if data is not None:
            node.workerinput[state.WORKERINPUT_KEY] = data
        node.workerinput[state.RESUME_WORKERINPUT_KEY] = sorted(st.resume_keys())
        node.workerinput[state.PINS_WORKERINPUT_KEY] = st.golden_pins()
        node.workerinput[options.SECRET_WORKERINPUT_KEY] = st.settings.secret
        from pytest_cannbench.timing.isolation import FENCE_WORKERINPUT_KEY

        fence = st.fence_path()  # one per session: its workers fence each other, never another session's
        node.workerinput[FENCE_WORKERINPUT_KEY] = str(fence) if fence is not None else None
        from pytest_cannbench.workers.memory_plan import WORKERINPUT_KEY as MEMORY_PLAN_KEY

        node.workerinput[MEMORY_PLAN_KEY] = st.memory_plan().to_dict()  # one plan for the session

    @pytest.hookimpl
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        st = state.of(config)
        if st.settings.dispatch != "memory" or config.getoption("dist", "no") != "load":
            return None  # xdist's own scheduler (and any other --dist mode stays the user's)
        from pytest_cannbench.workers.xdist_dispatch import MemoryScheduling

        return MemoryScheduling(config, log, st.memory_plan().pool_file)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    # tryfirst: xdist starts its workers in a trylast sessionstart, so the build happens once, before them
    config = session.config
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    announce = (lambda line: reporter.write_line(line)) if reporter is not None else None
    state.of(config).prepare_judge_process()
    state.of(config).reap_scratch()
    state.of(config).start_submission(announce)
    collector = config.stash.get(COLLECTOR_KEY, None)
    if collector is not None:
        reporting.start(config, collector)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # tryfirst: before junit-xml writes its file (its suite properties carry the scores), pytest-html its page
    # (trylast) and the terminal summary
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: which device it planned with, for the controller's board
        workeroutput[results.WORKEROUTPUT_DEVICE] = state.of(session.config).detected_device()
    collector = session.config.stash.get(COLLECTOR_KEY, None)
    if collector is not None and not session.config.option.collectonly:
        interrupted = collector.account_for_unrun(results.interruption_reason(session, exitstatus))
        collector.selection = results.selection(session.config, collector, interrupted)
        reporting.finish(session.config, collector)
        collector.gate = progress.below_gate(collector.board, state.of(session.config).settings.fail_under) or ""
        if collector.gate and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if not hasattr(session.config, "workerinput"):  # the controller, once the workers stopped writing
            collector.notes += goldens.tidy_cache(state.of(session.config).settings)


@pytest.hookimpl(tryfirst=True)  # before xdist's worker tells the controller (whose scheduler reads the needs)
def pytest_collection_finish(session: pytest.Session) -> None:
    st = state.of(session.config)
    if not st.settings.active:
        return
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # for the controller's account
        workeroutput[results.WORKEROUTPUT_KEYS] = results.expected_cases(session.items)
    if st.runs_cases():
        from pytest_cannbench.nodes.memory import size_session_pool

        size_session_pool(st, session.items)


def pytest_deselected(items: list[pytest.Item]) -> None:
    workeroutput = getattr(items[0].config, "workeroutput", None) if items else None
    if workeroutput is not None:
        key = results.WORKEROUTPUT_DESELECTED
        workeroutput[key] = workeroutput.get(key, 0) + len(items)


def pytest_unconfigure(config: pytest.Config) -> None:
    state.close(config)
    reporting.reveal_secret(config)  # after close: no worker, hence no submission code, is left running
    collector = config.stash.get(COLLECTOR_KEY, None)
    if collector is not None:
        config.pluginmanager.unregister(collector)
    for name in ("cannbench-xdist", "cannbench-html"):
        hooks = config.pluginmanager.get_plugin(name)
        if hooks is not None:
            config.pluginmanager.unregister(hooks)


def pytest_collect_file(file_path: Any, parent: pytest.Collector) -> pytest.Collector | None:
    if not state.of(parent.config).settings.active:
        return None
    if file_path.suffix == ".py":  # a KernelBench problem file (kernelbench_collect decides)
        from pytest_cannbench.kernelbench.collect import collect_file as collect_problem

        return collect_problem(file_path, parent)
    if state.of(parent.config).settings.bench == "stanford":
        return None
    return items.collect_file(file_path, parent, multi_rank.OperatorWithRanks)


def pytest_ignore_collect(collection_path: Any, config: pytest.Config) -> bool | None:
    return tree.ignore(collection_path, state.of(config).settings.active)


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Any, parent: pytest.Collector) -> pytest.Collector | None:
    return tree.directory(path, parent, state.of(parent.config).settings.active)


@pytest.hookimpl(tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport | None:
    return tree.collect_report(collector)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
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


def pytest_report_header(config: pytest.Config) -> list[str]:
    st = state.of(config)
    settings = st.settings
    if not settings.active:
        return []
    if settings.self_check:
        mode = "self-check (goldens graded as the candidate, in the candidate worker)"
    elif settings.source or settings.no_install:
        mode = "grading a submission"
    else:
        mode = "no candidate"
    seed = f"seed {settings.seed}" + (" + a session secret (reports record its commitment)" if settings.secret
                                      else "")
    cache = "off (secret seeds never repeat)" if settings.secret else settings.golden_cache or "off"
    lines = [f"cannbench: {mode}; {seed}, inputs {settings.input_dist}/{settings.input_compat}, "
             f"golden {settings.golden_precision}, checker {settings.checker}",
             f"cannbench: golden cache {cache}; logs {st.log_dir}", st.budget_line(), st.memory_plan().describe()]
    if settings.source or settings.no_install:
        lines.append(f"cannbench: guard {settings.guard} (builtin compute, host libraries, tampering); "
                     "containment on (seccomp where available)")
    if settings.hidden:
        lines.append(hidden.header_line(settings))
    if settings.tasks:
        lines.insert(0, f"cannbench: tasks {settings.tasks}")
    submitted = st.submission
    if submitted is not None:
        lines.append(f"cannbench: {reporting.sandbox_of(submitted).describe()}")
    if submitted is not None:  # every candidate of a multi-candidate run, each line naming it
        for name, sub in st.submissions.items() if st.submissions else [("", submitted)]:
            lines += [f"cannbench: [{name}] {line.removeprefix('cannbench: ')}" if name else line
                      for line in submission.header_lines(sub)]
    if settings.self_check or submitted is not None:
        if st.runs_cases():  # a judge: its own comparison kernel, built and self-tested (imports torch)
            from pytest_cannbench.judge.error_scan import kernel_line
        else:  # an xdist controller never imports torch: a trial build; each judge builds and tests its own
            from pytest_cannbench.judge.scan_kernel import trial_line as kernel_line
        lines += [kernel_line(), *st.timing_header()]
    return lines


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> Any:
    return progress.teststatus(report)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    collector = config.stash.get(COLLECTOR_KEY, None)
    if collector is not None:
        results.render_summary(terminalreporter, collector)

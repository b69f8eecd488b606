"""The run header pytest prints: what will be graded, how, and under which budgets (the controller's view)."""

from __future__ import annotations

import pytest

from pytest_cannbench.guard import sandbox
from pytest_cannbench.judge.scan_kernel import trial_line
from pytest_cannbench.nodes import hidden
from pytest_cannbench.nodes.session import RunController, runs_cases
from pytest_cannbench.scratch import cache_dir
from pytest_cannbench.submission import build
from pytest_cannbench.timing.anchors import hardware_key, roofline_line
from pytest_cannbench.timing.in_worker import MAX_FLUSH_BYTES
from pytest_cannbench.timing.machine import last_level_cache_bytes
from pytest_cannbench.workers.cpu_watch import header_line


def lines(config: pytest.Config, run: RunController) -> list[str]:
    settings, core = run.settings, run.core
    if settings.self_check:
        mode = "self-check (goldens graded as the candidate, in the candidate worker)"
    elif settings.source or settings.no_install:
        mode = "grading a submission"
    else:
        mode = "no candidate"
    seed = f"seed {settings.seed}" + (" + a session secret (reports record its commitment)" if settings.secret else "")
    cache = "off (secret seeds never repeat)" if settings.secret else settings.golden_cache or "off"
    out = [
        f"cannbench: {mode}; {seed}, inputs {settings.input_dist}/{settings.input_compat}, "
        f"golden {settings.golden_precision}, checker {settings.checker}",
        f"cannbench: golden cache {cache}; logs {core.log_dir}",
        core.budget_line(),
        core.memory_plan().describe(),
    ]
    if settings.source or settings.no_install:
        out.append(
            f"cannbench: guard {settings.guard} (builtin compute, host libraries, tampering); "
            "containment on (seccomp where available)"
        )
    if settings.hidden:
        out.append(hidden.header_line(settings))
    if settings.tasks:
        out.insert(0, f"cannbench: tasks {settings.tasks}")
    submitted = core.submission
    if submitted is not None:
        out.append(f"cannbench: {sandbox.sandbox_of(submitted).describe()}")
        for name, sub in core.submissions.items() if core.submissions else [("", submitted)]:
            out += [
                f"cannbench: [{name}] {line.removeprefix('cannbench: ')}" if name else line
                for line in build.header_lines(sub)
            ]
    if settings.self_check or submitted is not None:
        if runs_cases(config):  # a judge: its own comparison kernel, built and self-tested
            from pytest_cannbench.judge.error_scan import kernel_line  # brings torch

            out.append(kernel_line())
        else:  # an xdist controller never imports torch: a trial build; each judge builds and tests its own
            out.append(trial_line())
        out += timing_lines(config, run)
    return out


def timing_lines(config: pytest.Config, run: RunController) -> list[str]:
    """How cases will be timed and anchored; calibrates the roofline here, once per machine, when it is used."""
    s, core = run.settings, run.core
    if not s.perf:
        return ["cannbench: timing off (--cann-no-perf): cases are 'not measured'"]
    plan = core.device()
    flush = (
        f"cache flush {min(2 * last_level_cache_bytes(), MAX_FLUSH_BYTES) >> 20} MiB"
        if plan.kind == "cpu"
        else "L2 flush"
        if plan.kind == "cuda"
        else "cache-clean kernel"
    )
    hap = f", HAP to +-{s.hap_target:g}" if s.hap_target > 0 else ""
    repeat = (
        f"repeat auto ({s.repeat}-{s.repeat_max} calls, speed-up to +-{s.timing_target * 100:g}%{hap} or "
        f"{s.timing_budget_s:g} s a case)"
        if s.repeat_auto
        else f"repeat {s.repeat}"
    )
    threads = core.timed_threads()
    out = [
        f"cannbench: timing on {plan.label}: {threads} thread{'s' if threads > 1 else ''} per timed call, "
        f"warmup {s.warmup}, {repeat} on fresh verified inputs streamed "
        f"one call at a time, candidate and baseline interleaved (ABBA), {flush}; T_baseline = the golden "
        "in native precision on the device, unless metadata has one"
    ]
    out.append(header_line(threads, core.processes, plan.worker_device))  # thread budget, CPU meter
    if s.timing_isolation == "off":
        out.append(
            "cannbench: timing isolation off (cann_timing_isolation = off): other workers' accuracy "
            "work runs during timed windows"
        )
    if plan.kind == "cuda":
        out.append(
            f"cannbench: GPU clocks, temperature and power read around each window (a throttled one is "
            f"timed again once); CUDA graphs {s.cuda_graph} (cann_cuda_graph)"
        )
    key = hardware_key(s, plan)
    if key:
        out.append(f"cannbench: anchors from metadata/<{key}>.json where it has the case; else live")
    if config.option.collectonly or not (s.source or s.no_install or s.self_check):
        return out
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    announce = reporter.write_line if reporter is not None else None
    out.append(roofline_line(cache_dir(), plan, threads, announce))
    return out

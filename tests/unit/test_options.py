"""Options declared once: every Settings field classified, the command line short, the previous release's spellings
still parsed (with one warning) into the same settings as their new spellings, messages that quote what was typed,
and the ``--cann-resume`` identity and merge's comparison read off the declarations."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_cannbench.options import CannOptionDeprecationWarning, Settings, settings_from_config
from pytest_cannbench.options.aliases import MOVED
from pytest_cannbench.options.declare import KEY, Context, Derived, Given, Internal, Option
from pytest_cannbench.options.table import (
    changes_results,
    command_line,
    compared_fields,
    declarations,
    derived_from,
    identity_fields,
    ini_only,
    options,
)
from pytest_cannbench.report.journal import run_identity

MAX_COMMAND_LINE = 25


class Warned:
    """Collects the deprecation warnings a config issues (pytest records config-time warnings through a hook)."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    @pytest.hookimpl
    def pytest_warning_recorded(self, warning_message: Any) -> None:
        if issubclass(warning_message.category, CannOptionDeprecationWarning):
            self.messages.append(str(warning_message.message))


def parse(pytester: pytest.Pytester, *args: str, ini: str = "") -> tuple[Settings, list[str]]:
    pytester.makeini(f"[pytest]\n{ini}\n")
    config = pytester.parseconfig(*args)
    warned = Warned()
    config.pluginmanager.register(warned)
    return dataclasses.replace(settings_from_config(config), secret=""), warned.messages


def samples(tmp: Path) -> dict[str, list[str]]:
    """A value other than the default for every option, as the user spells it now."""
    (tmp / "dir").mkdir(exist_ok=True)
    return {
        "tasks": [f"--cann-tasks={tmp / 'dir'}"], "sources": ["--cann-source=@golden"],
        "bench": ["--cann-bench=stanford"], "report_dir": [f"--cann-report-dir={tmp / 'r'}"],
        "leaderboard": ["-o", f"cann_leaderboard={tmp / 'b.json'}"], "device": ["--cann-device=cpu"],
        "hardware": ["--cann-hardware=Ascend910B"], "perf": ["--cann-no-perf"], "warmup": ["--cann-warmup=1"],
        "repeat": ["--cann-repeat=5"], "timing_target": ["--cann-timing-target=5"], "seed": ["--cann-seed=3"],
        "checker": ["--cann-checker=allclose"], "guard": ["--cann-guard=strict"], "sandbox": ["--cann-sandbox=off"],
        "golden_cache": ["--cann-golden-cache=off"], "session_memory_gib": ["--cann-session-memory=4"],
        "case_timeout_s": ["--cann-case-timeout=30"], "kb_trials": ["--cann-kb-trials=2"],
        "kb_compile": ["--cann-kb-compile"], "hidden_cases": [f"--cann-hidden-cases={tmp / 'dir'}"],
        "hidden_generate": ["--cann-hidden-generate=2"], "resume": ["--cann-resume"], "shard": ["--cann-shard=1/2"],
        "fail_under": ["--cann-fail-under=50"], "reveal_secret": [f"--cann-reveal-secret={tmp / 's.txt'}"],
        "input_dist": ["-o", "cann_input_dist=normal"], "input_compat": ["-o", "cann_input_compat=official"],
        "golden_precision": ["-o", "cann_golden_precision=native_cpu"],
        "kb_max_input_gib": ["-o", "cann_kb_max_input_gib=2"], "hap_target": ["-o", "cann_hap_target=0.05"],
        "timing_budget_s": ["-o", "cann_timing_budget=3"], "timing_threads": ["-o", "cann_timing_threads=all"],
        "timing_isolation": ["-o", "cann_timing_isolation=off"], "cuda_graph": ["-o", "cann_cuda_graph=auto"],
        "freq_boost": ["-o", "cann_no_freq_boost=true"], "profiler_level": ["-o", "cann_profiler_level=Level2"],
        "hidden_gate": ["-o", "cann_hidden_gate=off"], "hap_cap": ["-o", "cann_hap_cap=true"],
        "build_timeout_s": ["-o", "cann_build_timeout=60"], "golden_timeout_s": ["-o", "cann_golden_timeout=60"],
        "worker_memory_gib": ["-o", "cann_worker_memory=2"], "golden_memory_gib": ["-o", "cann_golden_memory=3"],
        "memory_pool": ["-o", "cann_memory_pool=machine"], "dispatch": ["-o", "cann_dispatch=xdist"],
        "golden_cache_min_free_gib": ["-o", "cann_golden_cache_min_free=1"],
        "golden_cache_max_gib": ["-o", "cann_golden_cache_max=off"], "rebuild": ["-o", "cann_rebuild=true"],
        "markdown": ["-o", f"cann_markdown={tmp / 'm.md'}"],
        "eval_report": ["-o", f"cann_eval_report={tmp / 'e.json'}"],
    }


def test_every_settings_field_is_declared() -> None:
    for field in dataclasses.fields(Settings):
        assert isinstance(field.metadata.get(KEY), (Option, Derived, Internal)), \
            f"Settings.{field.name}: declare it with setting(), derived() or internal() (options/declare.py)"
    for name, declaration in declarations().items():
        if isinstance(declaration, Derived):
            assert isinstance(declarations().get(declaration.of), Option), name


def test_options_with_derived_fields_return_all_of_them() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(Settings)}
    for name, option in options().items():
        value = option.parse(Given(None, option.flag_name, defaults[name]), Context(Path("/r"), {"report_dir": "/r"}))
        if derived_from(name):
            assert set(value) == {name, *derived_from(name)}, name
            assert value == {k: defaults[k] for k in value}, f"{name}: its parser's defaults are not the fields'"
        else:
            assert not isinstance(value, dict), name


def test_at_most_25_command_line_options_and_each_ini_key_only_where_it_makes_sense() -> None:
    assert len(command_line()) <= MAX_COMMAND_LINE, sorted(o.name for o in command_line().values())
    run_time = {o.name for o in command_line().values() if not o.ini}
    assert run_time == {"resume", "shard", "fail-under", "reveal-secret"}
    assert all(o.ini for o in ini_only().values())


def test_what_changes_results_is_compared_by_merge_and_never_per_job() -> None:
    for name, declaration in declarations().items():
        if declaration.results:
            assert declaration.recorded and not declaration.per_job, name
    assert set(identity_fields()) <= set(compared_fields())
    # the settings that merge compared while a resumed run ignored them, before both lists were derived
    assert {"kb_guard", "cuda_graph", "timing_isolation", "repeat_max", "timing_target", "hap_target"} \
        <= set(identity_fields())
    assert "secret" not in compared_fields() and "reveal_secret" not in Settings().as_dict()


def test_pytest_help_lists_only_this_release_s_options(pytester: pytest.Pytester) -> None:
    shown = re.findall(r"^  (--cann-[a-z-]+)", pytester.runpytest("--help").stdout.str(), re.M)
    assert shown == [o.flag_name for o in command_line().values()]
    assert len(shown) <= MAX_COMMAND_LINE and "--cann-self-check" not in shown


def test_every_option_has_a_sample_and_changes_the_identity_exactly_when_declared(pytester, tmp_path) -> None:
    given = samples(tmp_path)
    assert set(given) == set(options()), "add a sample value for a new option above"
    base, _ = parse(pytester)
    ident = run_identity({"kind": "source"}, base)
    for name, args in given.items():
        settings, _ = parse(pytester, *args)
        assert settings.as_dict() != base.as_dict() or name == "reveal_secret", f"{name}: {args} changed nothing"
        changed = run_identity({"kind": "source"}, settings) != ident
        assert changed == changes_results(name), f"{name} ({args}): identity changed {changed}"
    for args in (["--cann-device=auto:0,1"], ["--cann-source", str(tmp_path / "dir")]):  # per-job parts
        assert run_identity({"kind": "source"}, parse(pytester, *args)[0]) == ident, args


def test_merged_spellings_set_the_fields_other_modules_read(pytester, tmp_path) -> None:
    s, warned = parse(pytester, "--cann-source=@golden", "--cann-device=cuda:0,1", "--cann-repeat=5..50",
                      "--cann-checker=relative_error", "--cann-guard=kernelbench")
    assert (s.self_check, s.no_install, s.source, s.sources) == (True, False, None, ())
    assert (s.device, s.device_ids) == ("cuda", (0, 1))
    assert (s.repeat, s.repeat_auto, s.repeat_max) == (5, True, 50)
    assert (s.checker, s.kb_accuracy, s.guard, s.kb_guard) == ("relative_error", "cann", "block", "kernelbench")
    assert warned == []
    s, _ = parse(pytester)
    assert (s.checker, s.kb_accuracy, s.guard, s.kb_guard) == ("relative_error", "kernelbench", "block", "coverage")
    assert (s.repeat, s.repeat_auto, s.repeat_max, s.device_ids) == (10, True, 100, ())
    s, _ = parse(pytester, "--cann-source=@installed", "--cann-repeat=7", "--cann-guard=strict")
    assert (s.no_install, s.self_check, s.repeat, s.repeat_auto, s.kb_guard) == (True, False, 7, False, "cann")


MOVED_PAIRS = [
    (["--cann-self-check"], ["--cann-source=@golden"]),
    (["--cann-no-install"], ["--cann-source=@installed"]),
    (["--cann-repeat-min=5"], ["--cann-repeat=5.."]),
    (["--cann-repeat-max=50"], ["--cann-repeat=..50"]),
    (["--cann-repeat-min=5", "--cann-repeat-max=50"], ["--cann-repeat=5..50"]),
    (["--cann-repeat=20", "--cann-repeat-min=5"], ["--cann-repeat=20"]),  # a count has no bounds, as before
    (["--cann-device=cuda", "--cann-device-ids=0,1"], ["--cann-device=cuda:0,1"]),
    (["--cann-device-ids=1"], ["--cann-device=auto:1"]),
    (["--cann-kb-accuracy=cann"], ["--cann-checker=relative_error"]),
    (["--cann-kb-accuracy=kernelbench"], ["--cann-checker=kernelbench"]),
    (["--cann-checker=allclose", "--cann-kb-accuracy=kernelbench"], ["--cann-checker=allclose"]),
    (["--cann-kb-guard=coverage"], ["--cann-guard=block"]),
    (["--cann-kb-guard=kernelbench"], ["--cann-guard=kernelbench"]),
    (["--cann-kb-guard=cann"], ["--cann-guard=strict"]),
    (["--cann-guard=warn", "--cann-kb-guard=cann"], ["--cann-guard=warn"]),  # the rule of block only
]


@pytest.mark.parametrize("old, new", MOVED_PAIRS, ids=lambda args: " ".join(args))
def test_a_merged_spelling_parses_as_its_new_one_and_warns_once(pytester, old, new) -> None:
    was, warned = parse(pytester, *old)
    now, quiet = parse(pytester, *new)
    assert was == now and quiet == []
    deprecated = [a for a in old if a.split("=")[0] in {m.flag_name for m in MOVED}]
    assert len(warned) == len(deprecated) and all("deprecated" in w for w in warned), warned
    assert all(new[-1].replace("=", " ", 1) in w for w in warned), warned  # what to write instead, all told


def test_every_merged_spelling_is_tested_on_the_command_line_and_as_an_ini_key(pytester) -> None:
    typed = {a.split("=")[0] for old, _ in MOVED_PAIRS for a in old}
    assert {m.flag_name for m in MOVED} <= typed
    for old_ini, new_ini, new_cli in [("cann_self_check = true", "cann_source = @golden", "--cann-source=@golden"),
                                      ("cann_repeat_min = 5", "cann_repeat = 5..", "--cann-repeat=5.."),
                                      ("cann_device_ids = 2", "cann_device = auto:2", "--cann-device=auto:2"),
                                      ("cann_kb_accuracy = cann", "cann_checker = relative_error", None),
                                      ("cann_kb_guard = cann", "cann_guard = strict", None),
                                      ("cann_no_install = 1", "cann_source = @installed", None),
                                      ("cann_repeat_max = 40", "cann_repeat = ..40", None)]:
        was, warned = parse(pytester, ini=old_ini)
        now, quiet = parse(pytester, ini=new_ini)
        assert was == now and quiet == [] and len(warned) == 1, old_ini
        assert new_ini.replace(" = ", " = ") in warned[0], warned
        if new_cli:
            assert parse(pytester, new_cli, ini="")[0] == now


def test_options_moved_to_the_ini_file_or_off_it_still_work(pytester, tmp_path) -> None:
    given = samples(tmp_path)
    for name, option in options().items():
        if option.was_cli:
            key, value = given[name][1].split("=", 1)
            old = [option.flag_name] if option.flag else [f"{option.flag_name}={value}"]
            was, warned = parse(pytester, *old)
            now, quiet = parse(pytester, *given[name])
            assert was == now and quiet == [], name
            assert len(warned) == 1 and f"-o {key}=" in warned[0], warned
        if option.was_ini:
            value = given[name][0].partition("=")[2] or "true"
            was, warned = parse(pytester, ini=f"{option.ini_key} = {value}")
            now, quiet = parse(pytester, *given[name])
            assert was == now and quiet == [], name
            assert len(warned) == 1 and option.flag_name in warned[0], warned
    assert sum(o.was_cli for o in options().values()) == 25  # the expert knobs, markdown, eval-report, leaderboard


def test_an_xdist_worker_does_not_warn_again(pytester) -> None:
    config = pytester.parseconfig("--cann-self-check")
    config.workerinput = {}  # type: ignore[attr-defined]
    warned = Warned()
    config.pluginmanager.register(warned)
    assert settings_from_config(config).self_check and warned.messages == []


@pytest.mark.parametrize("args, ini, quoted, expected", [
    (["--cann-warmup=-1"], "", "--cann-warmup -1:", "a whole number >= 0"),
    (["-o", "cann_warmup=-1"], "", "-o cann_warmup=-1:", "a whole number >= 0"),
    ([], "cann_warmup = x", "cann_warmup = x:", "a whole number >= 0"),
    (["--cann-repeat=0"], "", "--cann-repeat 0:", "a count >= 1, auto, or MIN..MAX"),
    (["--cann-repeat=9..3"], "", "--cann-repeat 9..3:", "1 <= MIN <= MAX"),
    (["--cann-repeat-min=0"], "", "--cann-repeat-min 0", "1 <= MIN <= MAX"),
    (["--cann-source=@golden", "--cann-source=@installed"], "", "--cann-source @golden @installed:",
     "cannot be combined"),
    (["--cann-self-check", "--cann-no-install"], "", "--cann-self-check --cann-no-install", "cannot be combined"),
    (["--cann-source=@gold"], "", "--cann-source @gold:", "@gold is not a kind of source"),
    (["--cann-device=gpu"], "", "--cann-device gpu:", "auto|cpu|cuda|npu, optionally with :IDS"),
    (["--cann-device=cuda:x"], "", "--cann-device cuda:x:", "device ids"),
    (["--cann-checker=allclose", "--cann-kb-accuracy=cann"], "", "--cann-kb-accuracy cann:", "--cann-checker"),
    (["--cann-guard=maybe"], "", "--cann-guard maybe:", "block, kernelbench, strict, warn, off"),
    (["-o", "cann_no_freq_boost=maybe"], "", "-o cann_no_freq_boost:", "'maybe' (expected true or false)"),
    ([], "cann_rebuild = maybe", "cann_rebuild:", "'maybe' (expected true or false)"),
    (["--cann-golden-memory=0.5"], "", "--cann-golden-memory 0.5:", "torch alone reserves"),
    (["-o", "cann_hap_target=0.5"], "", "-o cann_hap_target=0.5:", "< 0.5"),
    (["--cann-timing-target=0"], "", "--cann-timing-target 0:", "> 0"),
    (["--cann-shard=3/2"], "", "--cann-shard 3/2:", "K must be between 1 and N"),
    (["--cann-tasks=/no/such/tree"], "", "--cann-tasks /no/such/tree:", "no such directory"),
    (["-o", "cann_memory_pool=lots"], "", "-o cann_memory_pool=lots:", "auto, machine or a positive number"),
])
def test_a_bad_value_is_quoted_as_typed(pytester, args, ini, quoted, expected) -> None:
    with pytest.raises(pytest.UsageError) as raised:
        parse(pytester, *args, ini=ini)
    assert quoted in str(raised.value) and expected in str(raised.value), str(raised.value)

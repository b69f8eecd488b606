"""Broken task trees: every problem costs exactly its own item(s), never the session.

``tests/fixtures/malformed`` holds one small operator per kind of breakage next to
healthy ones; the inner session runs once per module (it is the slow part) and
each test reads the recorded reports. The heavy golden failures (memory, time,
death, noise) have fixtures and sessions of their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

# Imported before any inner session: pytester.inline_run drops modules first imported inside it, and
# taskspec keeps a loader class built on the yaml module it first saw; a re-imported yaml would raise
# errors that ``except yaml.YAMLError`` of the new module does not catch (in later tests of this run).
import yaml  # noqa: F401
from inner import InnerRun, run_inner

BASE_ARGS = ("--cann-tasks=tasks", "--cann-source=@golden", "-p", "no:cacheprovider", "--cann-golden-cache=off",
             "--cann-no-perf")

TASK, GOLDEN = "task_error", "golden_error"


@dataclass(frozen=True)
class Bad:
    """How one item must fail."""

    outcome: str  # pytest's view: "failed" (call) or "error" (setup)
    failure_type: str
    file: str | None  # the task file the message names; "" = the operator directory itself
    fragments: tuple[str, ...]  # the case and the field, as they must appear in the message
    status: str = "error"  # cannbench's view: harness and task problems are errors, not failures


OK = None

# Every item of the malformed tree and its fate. Operators not named here do not exist.
MALFORMED: dict[str, dict[str, Bad | None]] = {
    # healthy
    "soft_clip": {"01": OK, "02": OK},
    "lerp_pair": {"01": OK, "02": OK},
    # the whole operator cannot be parsed: one [task] item
    "proto_yaml_syntax": {"task": Bad("failed", TASK, "proto.yaml", (
        "line 14, column 10", "YAML syntax error", "did not find expected ',' or ']'", "(fix the YAML syntax)"))},
    "cases_yaml_syntax": {"task": Bad("failed", TASK, "cases.yaml", (
        "line 12, column 4", "YAML syntax error", "(fix the YAML syntax)"))},
    "proto_no_operator": {"task": Bad("failed", TASK, "proto.yaml", (
        "top level must be a mapping with the key 'operator'",))},
    "input_no_name": {"task": Bad("failed", TASK, "proto.yaml", (
        "operator.inputs[1]", "missing or invalid field 'name'",
        "(give every input and output a Python identifier as name)"))},
    "proto_unknown_dtype": {"task": Bad("failed", TASK, "proto.yaml", (
        "operator.inputs[0] (x)", "unknown dtype 'float17'", "(use one of bfloat16, bool, float16"))},
    "golden_syntax": {"task": Bad("failed", TASK, "golden.py", (
        "line 5", "Python syntax error", "(fix the golden's syntax)"))},
    "golden_no_function": {"task": Bad("failed", TASK, "golden.py", (
        "defines no golden function 'golden_no_function'", "schema"))},
    "no_golden": {"task": Bad("failed", TASK, "", (
        "missing golden.py", "an operator directory needs proto.yaml, cases.yaml and golden.py"))},
    "empty_cases": {"task": Bad("failed", TASK, "cases.yaml", (
        "cases: the list is empty", "(add at least one case)"))},
    # one case is broken: that case fails, its siblings run
    "case_unknown_dtype": {"01": OK, "02": Bad("failed", TASK, "cases.yaml", (
        "case_id 2", "field 'dtype'", "input 'x'", "unknown dtype 'floot16'")), "03": OK},
    "case_extra_input": {"01": OK, "02": Bad("failed", TASK, "cases.yaml", (
        "case_id 2", "field 'input_shape'", "2 shapes given but the operator declares 1 input(s) (x)"))},
    "case_id_broken": {
        "01": OK,
        "#1": Bad("failed", TASK, "cases.yaml", ("cases[1]", "field 'case_id' must be a non-negative int",
                                                 "got None")),
        "02": OK,
        "#3": Bad("failed", TASK, "cases.yaml", ("case_id 2", "duplicate case_id", "(also cases[2])")),
    },
    "attrs_not_mapping": {"01": Bad("failed", TASK, "cases.yaml", (
        "case_id 1", "field 'attrs' must be a mapping, got list")), "02": OK},
    "case_missing_shape": {"01": Bad("failed", TASK, "cases.yaml", (
        "case_id 1", "missing field 'input_shape'")), "02": OK},
    # the golden fails when it runs: an ERROR in setup, as golden_error
    "golden_import_raises": {
        "01": Bad("error", GOLDEN, "golden.py", ("case_id 1", "import failed", "RuntimeError",
                                                 "needs an accelerator library that is not installed")),
        "02": Bad("error", GOLDEN, "golden.py", ("case_id 2", "import failed", "RuntimeError")),
    },
    "golden_raises_one_case": {
        "01": OK,
        "02": Bad("error", GOLDEN, "golden.py", ("case_id 2", "ValueError",
                                                 "unsupported rounding mode 'stochastic'", "golden.py:8")),
        "03": OK,
    },
    # valid but suspicious: warnings only
    "suspicious_cases": {"01": OK, "02": OK, "05": OK},
    # a candidate-side failure (the self-check candidate drifts from the reference)
    "stateful_golden": {"01": Bad("failed", "precision_mismatch", None, ("y [float32]", "MERE"),
                                  status="failed")},
}

WARNINGS = (
    "case_id 1: field 'baseline_perf_us' is ignored (anchors live in metadata/<hw>.json)",
    "case_id 2: attrs 'gamma' are not declared in proto.yaml",
    "case ids are not contiguous (1..5, 3 cases)",
    "case_id 5: input 'x' has dtype 'float16', not among proto's ['float32']",
)


def item_name(op: str, label: str) -> str:
    return f"{op}[{label}]"


def case_key(op: str, label: str) -> str:
    """The key cannbench reports a case under (flat tree: rel_path is the directory name)."""
    return f"{op}_{int(label)}" if label.isdigit() else f"{op}_{label}"


def expected_items(tree: dict[str, dict[str, Bad | None]]) -> dict[str, Bad | None]:
    return {item_name(op, label): bad for op, items in tree.items() for label, bad in items.items()}


# --------------------------------------------------------------------------------------------
# running an inner session


def run_tasks(pytester: pytest.Pytester, capsys: pytest.CaptureFixture, tasks: Path, *args: str) -> InnerRun:
    return run_inner(pytester, capsys, tasks, *BASE_ARGS, *args)


@pytest.fixture(scope="module")
def runs() -> dict[str, InnerRun]:
    return {}


@pytest.fixture
def malformed(pytester, task_tree, capsys, runs) -> InnerRun:
    """The malformed tree, run once for the module (serially, golden cache off)."""
    if "malformed" not in runs:
        runs["malformed"] = run_tasks(pytester, capsys, task_tree("malformed"))
    return runs["malformed"]


@pytest.fixture
def crash(pytester, task_tree, capsys, runs) -> InnerRun:
    """The golden_crash tree (goldens that end their process, a golden that prints megabytes), run once."""
    if "crash" not in runs:
        runs["crash"] = run_tasks(pytester, capsys, task_tree("golden_crash"))
    return runs["crash"]


def worker_log(run: InnerRun) -> Path:
    return run.root / "reports" / "logs" / "golden-worker-main.log"


def check_bad(run: InnerRun, name: str, op: str, label: str, bad: Bad) -> None:
    case = run.cases[name]
    assert case.outcome == bad.outcome, (name, case.longrepr)
    assert case.cann is not None, name
    assert (case.cann["status"], case.cann["failure_type"]) == (bad.status, bad.failure_type), name
    assert case.cann["key"] == case_key(op, label)
    message = case.cann["message"]
    fragments = list(bad.fragments)
    if bad.file is not None:
        fragments.insert(0, str(run.tasks / op / bad.file) if bad.file else str(run.tasks / op))
    for text in (message, case.longrepr):
        for fragment in fragments:
            assert fragment in text, (name, fragment, text)
    # a one-line verdict, not a traceback of pytest's or the plugin's internals
    assert "Traceback" not in case.longrepr and "_pytest" not in case.longrepr, case.longrepr
    assert f"{case_key(op, label)}: {bad.status} [{bad.failure_type}]" in "\n".join(run.section())


# --------------------------------------------------------------------------------------------
# the malformed tree


def test_broken_operators_do_not_stop_the_session(malformed):
    assert malformed.collect_failures == []
    assert "error during collection" not in malformed.text and "errors during collection" not in malformed.text
    assert "Interrupted" not in malformed.text
    assert malformed.ret == pytest.ExitCode.TESTS_FAILED
    assert set(malformed.cases) == set(expected_items(MALFORMED))
    expected = expected_items(MALFORMED)
    counts = {"passed": sum(b is None for b in expected.values()),
              "failed": sum(b is not None and b.outcome == "failed" for b in expected.values()),
              "errors": sum(b is not None and b.outcome == "error" for b in expected.values())}
    assert re.search(rf"\b{counts['failed']} failed, {counts['passed']} passed, \d+ warnings?, "
                     rf"{counts['errors']} errors in ", malformed.text), malformed.text[-600:]


@pytest.mark.parametrize("op", [op for op, items in MALFORMED.items() if all(b is None for b in items.values())])
def test_healthy_and_warned_operators_pass(malformed, op):
    for label in MALFORMED[op]:
        case = malformed.cases[item_name(op, label)]
        assert case.outcome == "passed", case.longrepr
        assert case.cann["status"] == "passed" and case.cann["failure_type"] is None


@pytest.mark.parametrize("op", [op for op, items in MALFORMED.items() if any(b is not None for b in items.values())])
def test_exactly_the_broken_items_fail(malformed, op):
    for label, bad in MALFORMED[op].items():
        name = item_name(op, label)
        if bad is None:
            assert malformed.cases[name].outcome == "passed", (name, malformed.cases[name].longrepr)
        else:
            check_bad(malformed, name, op, label, bad)


def test_every_item_reports_one_outcome_under_its_own_key(malformed):
    for name, case in malformed.cases.items():
        assert case.cann_reports == 1, name
    keys = [c.cann["key"] for c in malformed.cases.values()]
    assert len(set(keys)) == len(keys)  # a duplicate case_id must not hide its namesake's result


def test_suspicious_cases_warn(malformed):
    """One warning for the operator, every problem in it on a line of its own naming cases.yaml."""
    (message,) = [w for w in malformed.warnings if "suspicious_cases" in w]
    assert message.startswith(f"{malformed.tasks / 'suspicious_cases'}: {len(WARNINGS)} task warnings:\n")
    for fragment in WARNINGS:
        (line,) = [line for line in message.splitlines() if fragment in line]
        assert line.startswith(f"  - {malformed.tasks / 'suspicious_cases' / 'cases.yaml'}: ")
    assert "CannTaskWarning" in malformed.text
    warned = malformed.text.split("warnings summary")[1]
    for fragment in WARNINGS:
        assert fragment in warned


def test_summary_separates_harness_errors_from_candidate_failures(malformed):
    section = malformed.section()
    expected = expected_items(MALFORMED)
    statuses = {"error": 0, "passed": 0, "failed": 0}
    harness = {TASK: 0, GOLDEN: 0}
    for bad in expected.values():
        statuses["passed" if bad is None else bad.status] += 1
        if bad is not None and bad.failure_type in harness:
            harness[bad.failure_type] += 1
    assert section[0] == (f"{len(MALFORMED)} operators, {len(expected)} cases: {statuses['error']} error, "
                          f"{statuses['passed']} passed, {statuses['failed']} failed")
    assert section[1] == "candidate failures: precision_mismatch 1"
    assert section[2] == (f"harness/task errors (not the candidate's): task_error {harness[TASK]}, "
                          f"golden_error {harness[GOLDEN]}")
    listed = [line for line in section[3:] if re.match(r"  \S+: \w+ \[", line)]  # the per-case lines
    assert len(listed) == sum(bad is not None for bad in expected.values())
    for op, items in MALFORMED.items():
        for label, bad in items.items():
            tag = f"  {case_key(op, label)}: "
            assert any(line.startswith(tag) for line in listed) == (bad is not None), tag


def test_xdist_gives_the_same_statuses(malformed, pytester, task_tree, capsys):
    parallel = run_tasks(pytester, capsys, task_tree("malformed"), "-n", "2")
    assert parallel.collect_failures == []
    assert "errors during collection" not in parallel.text
    assert parallel.ret == pytest.ExitCode.TESTS_FAILED
    assert parallel.statuses() == malformed.statuses()
    assert parallel.section()[:3] == malformed.section()[:3]
    for name, case in parallel.cases.items():
        assert case.cann_reports == 1, name
        if case.cann["message"]:  # same verdicts, only the sandbox path differs
            assert (case.cann["message"].replace(str(parallel.tasks), "<tasks>")
                    == malformed.cases[name].cann["message"].replace(str(malformed.tasks), "<tasks>"))


# --------------------------------------------------------------------------------------------
# heavy golden failures: each costs its own case, and the session goes on


def test_golden_over_its_memory_budget(pytester, task_tree, capsys):
    run = run_tasks(pytester, capsys, task_tree("golden_memory"), "-o", "cann_golden_memory=1")
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    hint = "(raise cann_golden_memory, e.g. -o cann_golden_memory=16, or make the golden use less memory)"
    check_bad(run, "memory_hog[01]", "memory_hog", "01", Bad("error", GOLDEN, "golden.py", (
        "case_id 1", "can't allocate memory", "8589934592 bytes", hint)))
    check_bad(run, "memory_hog[02]", "memory_hog", "02", Bad("error", GOLDEN, "golden.py", (
        "case_id 2", "MemoryError", hint)))
    assert run.cases["memory_hog[03]"].outcome == "passed"
    assert run.section()[0] == "1 operators, 3 cases: 2 error, 1 passed"


def test_golden_past_its_timeout_is_killed_and_the_next_case_runs(pytester, task_tree, capsys):
    run = run_tasks(pytester, capsys, task_tree("golden_timeout"), "-o", "cann_golden_timeout=3")
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    check_bad(run, "slow_golden[01]", "slow_golden", "01", Bad("error", GOLDEN, "golden.py", (
        "case_id 1", "golden did not finish within 3 s (cann_golden_timeout); its worker was killed")))
    # on a fresh worker: its start-up (python + torch import) is not charged to the 3 s
    assert run.cases["slow_golden[02]"].outcome == "passed", run.cases["slow_golden[02]"].longrepr
    assert run.seconds < 120  # the golden sleeps 600 s


def test_golden_that_ends_its_own_process(crash):
    run = crash
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    log = worker_log(run)
    check_bad(run, "self_kill[01]", "self_kill", "01", Bad("error", GOLDEN, "golden.py", (
        "case_id 1", f"golden worker died (exit code 3); log {log}")))
    check_bad(run, "self_kill[02]", "self_kill", "02", Bad("error", GOLDEN, "golden.py", (
        "case_id 2", f"golden worker died (SIGSEGV); log {log}")))
    assert run.cases["self_kill[03]"].outcome == "passed", run.cases["self_kill[03]"].longrepr
    assert run.section()[:2] == ["2 operators, 5 cases: 3 passed, 2 error",
                                 "harness/task errors (not the candidate's): golden_error 2"]


def test_golden_printing_megabytes_does_not_corrupt_the_worker_protocol(crash):
    """loud_golden runs first in the crash tree: its noise must not reach the judge or a later verdict."""
    run = crash
    for label in ("01", "02"):
        case = run.cases[f"loud_golden[{label}]"]
        assert case.outcome == "passed", case.longrepr
    log = worker_log(run).read_text(errors="replace")
    assert log.count("debug: " + "x" * 120) == 2 * 2 * 4000  # truth and reference of both cases, all of it
    assert "raw sys.__stdout__ text" in log and "not a pickle" in log
    # the self-check candidate runs in the candidate worker: its noise lands in that worker's log
    candidate_log = (run.root / "reports" / "logs" / "candidate-worker-main.log").read_text(errors="replace")
    assert candidate_log.count("debug: " + "x" * 120) == 2 * 4000
    assert "raw sys.__stdout__ text" in candidate_log and "not a pickle" in candidate_log
    for text in (run.text, run.cases["self_kill[01]"].cann["message"], run.cases["self_kill[02]"].cann["message"]):
        assert "debug: xxx" not in text and "not a pickle" not in text and "raw sys.__stdout__" not in text

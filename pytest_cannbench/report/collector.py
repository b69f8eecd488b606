"""Collects every case's outcome on the controller and renders the terminal summary.

Outcomes arrive as a report attribute (``report.cann``), which xdist carries to
the controller; a worker crash arrives as a ``when == "???"`` report with no
attribute and becomes a ``crashed`` case, so no case is lost from the tally.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_cannbench import outcome as oc
from pytest_cannbench.figures import hap
from pytest_cannbench.outcome import CaseOutcome, FailureType, Status
from pytest_cannbench.report.kernelbench import summary_lines as kernelbench_lines
from pytest_cannbench.report.passk import summary_lines as candidate_lines
from pytest_cannbench.report.splits import summary_lines as split_lines
from pytest_cannbench.vocab.casekey import parse_key, split_key
from pytest_cannbench.vocab.records import TIME_KEYS, TimingRecord, times_of


def _crashed_worker(report: pytest.TestReport) -> bool:
    """xdist reports a test whose worker died with ``when == "???"``, a value outside pytest's ``Literal``."""
    when: str = report.when
    return when == "???"


def _case_key(report: pytest.TestReport) -> str:
    for name, value in getattr(report, "user_properties", ()) or ():
        if name == "cann_case":
            return str(value)
    return report.nodeid


def _from_key(key: str, status: Status, failure_type: FailureType, message: str) -> CaseOutcome:
    """The outcome of a case known only by its key (a crash report, a case that never ran): what the key says of
    its operator, case id, candidate and split; a bare node id (no worker named the key) is its own rel_path."""
    found = parse_key(key)
    rel_path, case_id = split_key(key)
    return CaseOutcome(key=key, rel_path=rel_path, operator="", case_id=case_id, status=status,
                       failure_type=failure_type, message=message, candidate=found.candidate if found else "",
                       split=oc.SPLIT_HIDDEN if found and found.is_hidden else oc.SPLIT_PUBLIC)


WORKEROUTPUT_KEYS = "cannbench_case_keys"
WORKEROUTPUT_DESELECTED = "cannbench_deselected"
WORKEROUTPUT_DEVICE = "cannbench_device"  # the device kind a worker planned with (State.device)
WORKEROUTPUT_POOL = "cannbench_memory_pool"  # the memory pool's size a judge worked out (workers.memory_pool)
WORKEROUTPUT_POOL_TEXT = "cannbench_memory_pool_text"  # the same, described for the summary


def expected_cases(items: list[pytest.Item]) -> dict[str, str | None]:
    """nodeid -> case key of the items of ours among ``items``."""
    found: dict[str, str | None] = {}
    for item in items:
        key = next((str(v) for name, v in item.user_properties if name == "cann_case"), None)
        if key is not None:
            found[item.nodeid] = key
    return found


def _ours(nodeid: str) -> bool:
    """Whether a bare nodeid (no worker named its key) is a case of ours: an operator's cases.yaml."""
    return nodeid.split("::", 1)[0].endswith("cases.yaml")


def selection(config: pytest.Config, collector: ResultCollector, interrupted: int) -> dict[str, Any]:
    """What this session graded out of what it could have: paths, -k, -m, --cann-shard, the deselected and
    interrupted counts. ``partial`` says a board is not the whole tree's (merge and compare warn)."""
    keyword, markexpr = config.getoption("keyword", "") or "", config.getoption("markexpr", "") or ""
    shard = config.getoption("cann_shard", None)
    return {"args": [str(a) for a in config.args], "keyword": keyword, "markexpr": markexpr, "shard": shard,
            "selected": len(collector.expected), "deselected": collector.deselected, "interrupted": interrupted,
            "partial": bool(keyword or markexpr or shard or collector.deselected or interrupted)}


def interruption_reason(session: pytest.Session, exitstatus: int) -> str:
    """Why cases are left without a verdict at the end of the session, in the user's words."""
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return "the session was interrupted (Ctrl-C or SIGTERM) before this case ran"
    stop = session.shouldfail or session.shouldstop
    if stop:
        return f"the session stopped before this case ran ({stop})"
    return "never ran: its pytest-xdist worker was lost (see the crashed case before it)"


@dataclass(eq=False)  # registered as a plugin: pluggy needs identity hashing
class ResultCollector:
    """Registered as a plugin on the controller (or the only process without xdist)."""

    outcomes: dict[str, CaseOutcome] = field(default_factory=dict)
    journal: Any = None  # reporting.Journal once the run's identity is known
    resumed: set[str] = field(default_factory=set)  # keys taken from an earlier run's results.jsonl
    board: Mapping[str, Any] | None = None  # the leaderboard, once built (or read back: cannbench show)
    written: list[str] = field(default_factory=list)  # files this session wrote, for the summary
    notes: list[str] = field(default_factory=list)  # what else the session did that a user should know of
    run_flags: list[str] = field(default_factory=list)  # weaker modes of the whole run, put on every case

    expected: dict[str, str | None] = field(default_factory=dict)  # nodeid -> case key, of every selected case
    settled: set[str] = field(default_factory=set)  # nodeids whose verdict (or skip, or crash) arrived
    deselected: int = 0
    device_kind: str | None = None  # what the xdist workers planned with (WORKEROUTPUT_DEVICE), for the board
    memory_pool: dict[str, Any] | None = None  # the pool's size as the judges worked it out (workers.memory_pool)
    memory_pool_text: str | None = None  # the same, in words
    dispatch: str | None = None  # how the controller's scheduler handed cases out (workers.xdist_dispatch)
    crashed: dict[str, str] = field(default_factory=dict)  # nodeid -> the key its crash was recorded under
    gate: str = ""  # why --cann-fail-under fails the session, if it does
    selection: dict[str, Any] = field(default_factory=dict)  # what -k/-m/paths chose: the board's config.selection
    # a node id's case key when no worker named it (nodes.keys.key_from_nodeid); None: not known here
    key_of: Callable[[str], str | None] | None = None

    def record(self, result: CaseOutcome) -> None:
        result.flags = sorted(set(result.flags) | set(self.run_flags))
        self.outcomes[result.key] = result
        if self.journal is not None:
            self.journal.append(result.to_dict())

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Every selected case of ours (without xdist: the controller collects nothing under xdist)."""
        self.expected.update(expected_cases(session.items))

    @pytest.hookimpl
    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected += len(items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        for nodeid in ids:
            self.expected.setdefault(nodeid, None)  # whose key a worker's output names (pytest_testnodedown)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A finished xdist worker's account of what it collected: every worker collects the same cases, so one
        that finished names the keys of a lost one's too."""
        output = getattr(node, "workeroutput", None) or {}
        for nodeid, key in (output.get(WORKEROUTPUT_KEYS) or {}).items():
            if self.expected.get(nodeid) is None:
                self.expected[nodeid] = key
        self.deselected = max(self.deselected, int(output.get(WORKEROUTPUT_DESELECTED) or 0))
        self.device_kind = self.device_kind or output.get(WORKEROUTPUT_DEVICE)
        self.memory_pool = self.memory_pool or output.get(WORKEROUTPUT_POOL)
        self.memory_pool_text = self.memory_pool_text or output.get(WORKEROUTPUT_POOL_TEXT)

    def account_for_unrun(self, reason: str) -> int:
        """Record every selected case that never got a verdict as ``interrupted`` (the board lists it, scored 0,
        the harness's fault): a case must not vanish because the session ended early. Returns how many."""
        for nodeid, old in self.crashed.items():  # recorded before any worker had named the case's key
            key = self.expected.get(nodeid)
            if key and key != old and old in self.outcomes and key not in self.outcomes:
                crash = self.outcomes.pop(old)
                sealed = (found := parse_key(key)) is not None and found.is_hidden
                self.record(_from_key(key, crash.status, crash.failure_type or oc.WORKER_CRASH,
                                      "worker crashed" if sealed else crash.message))
        count = 0
        for nodeid, key in sorted(self.expected.items()):
            if nodeid in self.settled:
                continue
            if key is None:  # seen on an H200: a SIGINT to the process group ends the workers before they name keys
                key = self.key_of(nodeid) if self.key_of is not None else None
            if key is None:
                if not _ours(nodeid):
                    continue
                key = nodeid
            if key in self.outcomes:
                continue
            self.record(_from_key(key, oc.INTERRUPTED, oc.SESSION_INTERRUPTED, reason))
            count += 1
        return count

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "cann", None)
        if isinstance(data, dict) or _crashed_worker(report) or report.skipped:
            self.settled.add(report.nodeid)
        if isinstance(data, dict):
            result = CaseOutcome.from_dict(data)
            previous = self.outcomes.get(result.key)
            # the call verdict wins over a setup one; a setup error stands when there is no call
            if previous is None or report.when == "call" or previous.status == oc.SKIPPED:
                self.record(result)
        elif _crashed_worker(report):
            key = self.expected.get(report.nodeid) or _case_key(report)
            self.crashed[report.nodeid] = key
            found = parse_key(key)
            sealed = found is not None and found.is_hidden  # a sealed case says nothing but its fate
            self.record(_from_key(key, oc.CRASHED, oc.WORKER_CRASH,
                                  "worker crashed" if sealed else str(report.longrepr)[:500]))

    def summary_lines(self, verbose: bool = False) -> list[str]:
        if not self.outcomes:
            return []
        results = list(self.outcomes.values())
        operators = {r.rel_path for r in results if r.rel_path}
        status = Counter(r.status for r in results)
        lines = [f"{len(operators)} operators, {len(results)} cases: "
                 + ", ".join(f"{n} {s}" for s, n in sorted(status.items(), key=lambda kv: -kv[1]))]
        candidate = Counter(r.failure_type for r in results
                            if r.failure_type and r.failure_type not in oc.HARNESS_FAILURES
                            and r.status not in (oc.SKIPPED, oc.MISSING))
        harness = Counter(r.failure_type for r in results if r.failure_type in oc.HARNESS_FAILURES)
        if candidate:
            lines.append("candidate failures: " + ", ".join(f"{t} {n}" for t, n in candidate.most_common()))
        if harness:
            lines.append("harness/task errors (not the candidate's): "
                         + ", ".join(f"{t} {n}" for t, n in harness.most_common()))
        missing: dict[str, int] = defaultdict(int)
        for r in results:
            if r.status == oc.MISSING:
                missing[r.rel_path] += 1
        if missing:
            lines.append("not provided by the submission (score 0): "
                         + ", ".join(f"{op} ({n} cases)" for op, n in sorted(missing.items())))
        bad = [r for r in sorted(results, key=lambda r: (r.rel_path, r.case_id or 0))
               if r.status not in (oc.PASSED, oc.SKIPPED, oc.MISSING)]
        limit = None if verbose else 30
        for r in bad[:limit]:
            lines.append(f"  {r.key}: {r.status} [{r.failure_type}] {_one_line(r.message)}")
        if limit is not None and len(bad) > limit:
            lines.append(f"  ... {len(bad) - limit} more (-v lists all)")
        cached = sum(1 for r in results if r.golden_cached)
        if cached:
            lines.append(f"golden outputs from cache: {cached}/{len(results)} cases")
        if self.resumed:
            lines.append(f"resumed from results.jsonl: {len(self.resumed)} cases (--cann-resume)")
        lines += pool_lines(self.memory_pool_text, results, self.dispatch)
        lines += timing_lines(results, limit)
        if self.board is not None:
            lines += score_lines(self.board, limit)
            lines += kernelbench_lines(self.board.get("kernelbench"), limit)

            lines += candidate_lines({"summary": self.board["summary"]} if "summary" in self.board else None)
        if self.written:
            lines.append("written: " + ", ".join(self.written))
        lines += self.notes
        if self.gate:
            lines.append(f"FAILED: {self.gate}")
        if self.journal is not None and self.journal.tampered:
            lines.append(f"WARNING: {self.journal.path} was changed by another process during the run; it was "
                         "rewritten from the judge's own record (leaderboard config.journal_rewritten)")
        return lines


def pool_lines(pool: str | None, results: list[CaseOutcome], dispatch: str | None = None) -> list[str]:
    """The memory pool's size, how cases were handed out and what waiting for room cost (only where judges
    shared one)."""
    waits = [r.seconds.get("memory_wait", 0.0) for r in results if r.seconds]
    if pool is None or not waits:
        return []
    waited = [w for w in waits if w >= 0.01]
    handed = f"; cases handed out {dispatch}" if dispatch else ""
    return [f"memory pool: {pool}{handed}; {len(waited)} cases waited for room, "
            f"{sum(waits):.1f} s in all"]


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def _speedup(t: TimingRecord) -> str:
    """The paired speed-up and its 95% interval, e.g. ``2.41x [2.37, 2.46]``."""
    iv = t.get("speedup")
    if not isinstance(iv, dict) or not all(isinstance(iv.get(k), (int, float)) for k in ("estimate", "low", "high")):
        return "-"
    return f"{iv['estimate']:.3g}x [{iv['low']:.3g}, {iv['high']:.3g}]"


def timing_lines(results: list[CaseOutcome], limit: int | None) -> list[str]:
    """One line per timed case: T_cand (median and spread), T_baseline and T_HW with their sources, the paired
    speed-up with its interval and the number of timed calls."""
    timed = sorted((r for r in results if r.timing.get("measured")), key=lambda r: (r.rel_path, r.case_id or 0))
    if not timed:
        return []
    first = timed[0].timing
    counts = sorted({int(r.timing.get("input_sets") or 0) for r in timed})
    count = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    lines = [f"timing on {first.get('device')} ({first.get('timer')}; median of {count} verified calls on fresh "
             "inputs, candidate and baseline paired), microseconds:",
             f"  {'case':<28} {'T_cand':>9} {'spread':>7} {'T_base':>9} {'T_HW':>9} {'speed-up [95% CI]':>24} "
             f"{'n':>4}  anchors"]
    for r in timed[:limit]:
        t = r.timing
        cand = t.get("cand")
        spread = f"{cand['spread'] * 100:.1f}%" if cand else "-"
        source = f"base {t.get('baseline_source') or '-'}, hw {t.get('t_hw_source') or '-'}"
        flags = f" [{', '.join(t['flags'])}]" if t.get("flags") else ""
        times = times_of(t)
        lines.append(f"  {r.key:<28} {_us(times.cand):>9} {spread:>7} {_us(times.baseline):>9} "
                     f"{_us(times.hw):>9} {_speedup(t):>24} {t.get('input_sets') or '-':>4}  {source}{flags}")
    if limit is not None and len(timed) > limit:
        lines.append(f"  ... {len(timed) - limit} more timed cases (-v lists all)")
    return lines


def _one_line(text: str, width: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def attach(item: pytest.Item, report: pytest.TestReport, outcome: CaseOutcome | None) -> None:
    """Put the outcome on the report that decides the case: call, or setup when setup did not pass."""
    if outcome is None:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        record = report.cann = outcome.to_dict()  # type: ignore[attr-defined]  # plain data: xdist's wire
        extra = [("cann_status", record["status"]), ("cann_split", record.get("split"))] + junit_properties(outcome)
        if record.get("failure_type"):
            extra.append(("cann_failure_type", record.get("failure_type")))
        # on the item, so the teardown report (what junit-xml writes) carries them too
        item.user_properties.extend(p for p in extra if p not in item.user_properties)


def score_lines(board: Mapping[str, Any], limit: int | None) -> list[str]:
    """Per operator (passed/total, the three parts, score, speed-up), per level, total; failures by type."""
    ops = board["operators"]
    lines = [f"scores (compile {board['weights']['compile']:.0%} + function {board['weights']['function']:.0%} + "
             f"performance {board['weights']['performance']:.0%}):",
             f"  {'operator':<32} {'passed':>7} {'compile':>8} {'function':>9} {'perf':>7} {'score':>7} "
             f"{'speed-up':>9}"]
    for op in ops[:limit]:
        speed = f"x{op['speedup_geomean']:.2f}" if op.get("speedup_geomean") else "-"
        note = f"  [{op['score_error']}]" if op.get("score_error") else ""
        note += f"  [{oc.NOT_RANKED}: {op['not_ranked_reason']}]" if op.get("not_ranked_reason") else ""
        lines.append(f"  {op['rel_path']:<32} {op['cases_passed']:>3}/{op['cases_total']:<3} "
                     f"{op['compile_score']:>8.1f} {op['function_score']:>9.1f} {op['performance_score']:>7.1f} "
                     f"{op['score']:>7.1f} {speed:>9}{note}")
    if limit is not None and len(ops) > limit:
        lines.append(f"  ... {len(ops) - limit} more operators (-v lists all)")
    levels = ", ".join(f"{name} {entry['score']:.1f} ({entry['operators']} ops)"
                       for name, entry in board["levels"].items())
    lines.append(f"total score {board['total_score']:.1f} over {len(ops)} operators; levels: {levels or '-'}")

    lines += split_lines(board)
    examples: dict[str, tuple[int, str]] = {}
    for op in ops:
        for case in op["cases"]:
            ft = case.get("failure_type")
            if ft and case["status"] not in (oc.PASSED, oc.SKIPPED, oc.MISSING):
                count, example = examples.get(ft, (0, f"{case['key']}: {_one_line(case['message'], 120)}"))
                examples[ft] = (count + 1, example)
    if examples:
        lines.append("failures by type (one example each):")
        for ft, (count, example) in sorted(examples.items(), key=lambda kv: -kv[1][0]):
            harness = " (harness/task, not the candidate's)" if ft in oc.HARNESS_FAILURES else ""
            lines.append(f"  {ft} x{count}{harness}: {example}")
    return lines


def junit_properties(outcome: CaseOutcome) -> list[tuple[str, Any]]:
    """Scalars CI tools read from junit-xml: HAP, the three times, the worst MERE/MARE over outputs."""
    props: list[tuple[str, Any]] = []
    t = outcome.timing
    if t.get("measured"):
        times = times_of(t)
        value, _ = hap(times.baseline, times.cand, times.hw)
        props.append(("cann_hap", "" if value is None else round(value, 6)))
        for name, time in zip(TIME_KEYS, times):
            if time is not None:
                props.append((f"cann_{name}", round(time, 3)))
    for metric in ("mere", "mare"):
        values = [m for v in outcome.accuracy if isinstance(m := v.get(metric), (int, float))]
        if values:
            props.append((f"cann_{metric}", max(values)))
    return props


def render_summary(terminalreporter: Any, collector: ResultCollector) -> None:
    lines = collector.summary_lines(verbose=terminalreporter.config.getoption("verbose") > 0)
    if not lines:
        return
    terminalreporter.section("cannbench")
    for line in lines:
        terminalreporter.write_line(line)

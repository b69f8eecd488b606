"""The leaderboard as GitHub-flavoured Markdown, sized for a CI job summary (``$GITHUB_STEP_SUMMARY``).

A reviewer opening a CI run wants the verdict first (score, cases passed, did the submission build, where it ran),
then where points were lost (levels, operators) and why (failure types, one example each). Rendering is a pure
function of the board: the same board gives the same bytes, and its own ``generated_at`` is the only time shown.
Every value that reaches a table cell is escaped (``|``, newlines, HTML, backticks), so a hostile or merely
multi-line candidate message cannot break the table or inject markup.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping
from typing import Any

from pytest_cannbench.outcome import HARNESS_FAILURES
from pytest_cannbench.report.eval_report import board_device, number
from pytest_cannbench.vocab.records import times_of

EXAMPLE_CHARS = 300
DETAILS_OVER = 40  # operator tables longer than this fold into <details>
STATUS_NOTES = {"compile_failed": "build failed", "install_failed": "install failed", "import_failed": "import failed",
                "missing": "not provided", "no cases": "no cases"}


def cell(value: Any, limit: int | None = None) -> str:
    """One table cell: a single line, HTML-escaped, with ``|`` and backticks escaped; cut at ``limit`` chars."""
    text = str(value if value is not None else "").replace("\r\n", "\n").replace("\r", "\n").strip()
    if limit is not None and len(text) > limit:
        text = text[: limit - 3].rstrip() + "..."
    text = html.escape(text, quote=False).replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")
    return "<br>".join(line.strip() for line in text.split("\n") if line.strip())


def _fmt(value: Any, digits: int = 2) -> str:
    found = number(value)
    return "–" if found is None else f"{found:.{digits}f}"


def _speedup(value: Any) -> str:
    found = number(value)
    return "–" if found is None else f"{found:.2f}×"


def _table(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    return ["| " + " | ".join(header) + " |",
            "|" + "|".join(":---" if a == "l" else "---:" for a in align) + "|",
            *("| " + " | ".join(row) + " |" for row in rows)]


def _submission_line(submission: Mapping[str, Any] | None) -> str:
    if not submission:
        return "**Submission:** unknown (built from results.jsonl only)"
    kind = submission.get("kind")
    if kind == "self-check":
        return "**Submission:** self-check (the goldens graded as the candidate)"
    if kind == "none":
        return "**Submission:** none (no candidate; every case is missing)"
    what = "the installed `cann_bench` (--cann-source @installed)" if kind == "installed" else ""
    if submission.get("wheel"):
        wheel = str(submission["wheel"]).replace("\\", "/").rsplit("/", 1)[-1]
        sha = str(submission.get("wheel_sha256") or "")[:12]
        how = "prebuilt" if submission.get("prebuilt") else "built"
        what = f"wheel {cell(wheel)} ({how}" + (f", sha256 {sha}" if sha else "") + ")"
    elif not what:
        what = cell(submission.get("source") or "?")
    status = str(submission.get("status") or "ok")
    if status == "ok":
        return f"**Submission:** {what} — build ok"
    message = cell(str(submission.get("message") or "").strip().split("\n")[0], EXAMPLE_CHARS)
    return f"**Submission:** {what} — **{cell(status.upper())}**" + (f": {message}" if message else "")


def _headline(board: Mapping[str, Any]) -> list[str]:
    operators = board.get("operators") or []
    cases = [c for op in operators for c in op.get("cases") or []]
    passed = sum(1 for c in cases if c.get("status") == "passed")
    device = board_device(board) or "unknown"
    lines = [f"## CANN-Bench score: {_fmt(board.get('total_score'))}", "",
             f"**Cases passed:** {passed}/{len(cases)} · **Operators:** {len(operators)} · "
             f"**Device:** {cell(device)}" + (f" · **Generated:** {cell(board['generated_at'])}"
                                              if board.get("generated_at") else ""),
             "", _submission_line(board.get("submission")), ""]
    return lines


def _levels(board: Mapping[str, Any]) -> list[str]:
    levels = board.get("levels") or {}
    if not levels:
        return []
    rows = []
    for name, entry in levels.items():
        count = int(entry.get("operators") or 0)
        score = number(entry.get("score")) or 0.0
        rows.append([cell(name), str(count), _fmt(score), _fmt(score / count if count else None)])
    total = number(board.get("total_score")) or 0.0
    count = sum(int(e.get("operators") or 0) for e in levels.values())
    rows.append(["**total**", f"**{count}**", f"**{_fmt(total)}**", f"**{_fmt(total / count if count else None)}**"])
    return ["### Levels", "", *_table(["Level", "Operators", "Score", "Average"], rows, "lrrr"), ""]


def _operators(board: Mapping[str, Any]) -> list[str]:
    operators = board.get("operators") or []
    if not operators:
        return ["No operators were graded.", ""]
    rows = []
    for op in operators:
        name = f"{cell(op.get('name') or op.get('rel_path'))} ({cell(op.get('rel_path'))})"
        note = STATUS_NOTES.get(str(op.get("score_error") or ""), "")
        if note:
            name += f" — **{note}**"
        if op.get("not_ranked_reason"):
            name += f" — **not ranked: {cell(op['not_ranked_reason'])}**"
        level = f"level{op['level']}" if op.get("level") is not None else "–"
        rows.append([name, level, f"{op.get('cases_passed', 0)}/{op.get('cases_total', 0)}",
                     _fmt(op.get("compile_score")), _fmt(op.get("function_score")),
                     _fmt(op.get("performance_score")), _fmt(op.get("score")), _speedup(op.get("speedup_geomean"))])
    table = _table(["Operator", "Level", "Passed", "Compile", "Function", "Performance", "Score",
                    "Speed-up (geomean)"], rows, "llrrrrrr")
    if len(operators) > DETAILS_OVER:
        return ["### Operators", "", f"<details><summary>{len(operators)} operators</summary>", "", *table, "",
                "</details>", ""]
    return ["### Operators", "", *table, ""]


def _timing(board: Mapping[str, Any]) -> list[str]:
    """Every timed case with its paired speed-up and HAP intervals and the calls it took."""
    rows = []
    for op in board.get("operators") or []:
        for case in op.get("cases") or []:
            iv, hi = case.get("speedup"), case.get("hap_interval")
            times = times_of(case)
            if not number(times.cand):
                continue
            speed = (f"{iv['estimate']:.3g}x [{iv['low']:.3g}, {iv['high']:.3g}]"
                     if isinstance(iv, dict) and all(number(iv.get(k)) for k in ("estimate", "low", "high")) else "–")
            hap_text = _fmt(case.get("hap"), 3) + (f" [{hi[0]:.3f}, {hi[1]:.3f}]" if isinstance(hi, list)
                                                   and len(hi) == 2 and all(number(v) for v in hi) else "")
            precision = case.get("precision")
            rows.append([cell(case.get("key")), _fmt(times.cand, 1), _fmt(times.baseline, 1),
                         _fmt(times.hw, 1), speed, hap_text, cell(case.get("timed_calls") or "–"),
                         f"±{precision * 100:.1f}%" if number(precision) else "–"])
    if not rows:
        return []
    table = _table(["Case", "T_cand (us)", "T_base (us)", "T_HW (us)", "Speed-up [95% CI]", "HAP [95% CI]",
                    "Calls", "Precision"], rows, "lrrrrrrr")
    return ["### Timing", "", f"<details><summary>{len(rows)} timed cases</summary>", "", *table, "",
            "</details>", ""]


def _failures(board: Mapping[str, Any]) -> list[str]:
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for op in board.get("operators") or []:
        for case in op.get("cases") or []:
            if case.get("status") == "passed":
                continue
            kind = str(case.get("failure_type") or case.get("status") or "unknown")
            groups.setdefault(kind, []).append((str(op.get("rel_path") or ""), case))
    if not groups:
        return []
    rows = []
    for kind, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        _, example = members[0]
        message = next((str(c.get("message")) for _, c in members if str(c.get("message") or "").strip()), "")
        key = next((str(c.get("key")) for _, c in members if str(c.get("message") or "").strip()), example.get("key"))
        whose = ("harness/task" if kind in HARNESS_FAILURES else
                 "not graded" if all(c.get("status") == "skipped" for _, c in members) else "candidate")
        rows.append([cell(kind), str(len(members)), whose,
                     f"{cell(key)}: {cell(message, EXAMPLE_CHARS)}" if message else cell(key)])
    return ["### Failures", "", *_table(["Failure type", "Cases", "Whose", "Example"], rows, "lrll"), ""]


def _notes(board: Mapping[str, Any]) -> list[str]:
    cases = [c for op in board.get("operators") or [] for c in op.get("cases") or []]
    unmeasured: Counter[str] = Counter()
    flags: Counter[str] = Counter()
    for case in cases:
        timing = case.get("timing") if isinstance(case.get("timing"), dict) else {}
        if case.get("status") == "passed" and not (timing.get("measured") and number(times_of(case).cand)):
            unmeasured[str(timing.get("reason") or "no timing recorded")] += 1
        flags.update(str(f) for f in case.get("flags") or [])
    notes = []
    if unmeasured:
        reasons = ", ".join(f"{cell(r)} ({n})" for r, n in sorted(unmeasured.items(), key=lambda kv: (-kv[1], kv[0])))
        count = sum(unmeasured.values())
        notes.append(f"- **Not measured:** {count} passed {'case has' if count == 1 else 'cases have'} no time, "
                     f"so no performance points: {reasons}")
    if flags:
        notes.append("- **Timing flags:** " + ", ".join(f"`{cell(f)}` ({n})" for f, n in
                                                        sorted(flags.items(), key=lambda kv: (-kv[1], kv[0]))))
    degenerate = board.get("degenerate_anchors") or {}
    if degenerate.get("count"):
        notes.append(f"- **Degenerate anchors:** {degenerate['count']} case(s) whose baseline is not above T_HW, so "
                     f"their HAP says nothing: {', '.join(cell(k) for k in degenerate.get('cases', [])[:10])}")
    missing = [str(op.get("rel_path")) for op in board.get("operators") or [] if op.get("score_error") == "missing"]
    if missing:
        notes.append(f"- **Not provided by the submission** (score 0): {', '.join(cell(m) for m in missing)}")
    weights = board.get("weights") or {}
    if weights:
        notes.append(f"- Score = {weights.get('compile', 0):.0%} compile + {weights.get('function', 0):.0%} function + "
                     f"{weights.get('performance', 0):.0%} performance (HAP" +
                     (", capped at 1)" if weights.get("hap_cap") else ", uncapped as in the official formula)"))
    if board.get("merged_from"):
        notes.append(f"- Merged from {len(board['merged_from'])} inputs by `cannbench merge`")
    return ["### Notes", "", *notes, ""] if notes else []


def render(board: Mapping[str, Any]) -> str:
    """The board as Markdown: headline, levels, operators, failures by type, notes."""
    lines = (_headline(board) + _levels(board) + _splits(board) + _operators(board) + _kernelbench(board)
             + _timing(board)
             + _failures(board) + _notes(board))
    return "\n".join(lines).rstrip("\n") + "\n"


def _splits(board: Mapping[str, Any]) -> list[str]:
    """Public, hidden and combined scores per level and in total, the gap, who is not ranked."""
    splits = board.get("splits")
    if not splits:
        return []
    rows = [[cell(name), _fmt(entry.get("public_score")), _fmt(entry.get("hidden_score")),
             _fmt(entry.get("combined_score"))] for name, entry in (board.get("levels") or {}).items()]
    rows.append(["**total**", f"**{_fmt(splits.get('public_score'))}**", f"**{_fmt(splits.get('hidden_score'))}**",
                 f"**{_fmt(splits.get('combined_score'))}**"])
    gap = number(splits.get("function_rate_gap"))
    notes = [f"Function-rate gap (public − hidden): {'–' if gap is None else f'{gap * 100:+.1f} points'} · "
             f"hidden cases {splits.get('hidden_cases', 0)}, dropped {splits.get('dropped', 0)} · gate "
             f"{'on' if splits.get('gate') else 'off'}"]
    if splits.get("not_ranked"):
        notes.append(f"**Not ranked (fails held-out cases):** {', '.join(cell(r) for r in splits['not_ranked'])}")
    return ["### Public and hidden splits", "", *_table(["Level", "Public", "Hidden", "Combined"], rows, "lrrr"), "",
            *(f"{n}  " for n in notes), ""]


def _kernelbench(board: Mapping[str, Any]) -> list[str]:
    """KernelBench problems (docs/kernelbench.md): correctness, speed-up, fast_p and the geometric mean."""
    kb = board.get("kernelbench")
    if not kb:
        return []
    lines = ["### KernelBench", "", "| problem | correct | T_cand (us) | T_base (us) | speed-up | kernel coverage |",
             "|---|---|---:|---:|---:|---:|"]
    for r in kb.get("problems", []):
        speed = f"x{r['speedup']:.2f}" if r.get("speedup") else "-"
        cand = f"{r['t_cand_us']:.1f}" if r.get("t_cand_us") else "-"
        base = f"{r['t_baseline_us']:.1f}" if r.get("t_baseline_us") else "-"
        cover = f"{r['kernel_coverage'] * 100:.0f}%" if isinstance(r.get("kernel_coverage"), (int, float)) else "-"
        lines.append(f"| `{r['rel_path']}` | {'yes' if r['correct'] else r['status']} | {cand} | {base} | {speed} | "
                     f"{cover} |")
    fast = ", ".join(f"fast_{p} {v * 100:.0f}%" if isinstance(v, (int, float)) else f"fast_{p} -"
                     for p, v in kb.get("fast_p", {}).items())
    geo = f"x{kb['speedup_geomean']:.2f}" if kb.get("speedup_geomean") else "-"
    lines += ["", f"{kb.get('problems_correct')}/{kb.get('problems_graded')} problems correct; {fast}; "
              f"geometric-mean speed-up {geo}", ""]
    return lines

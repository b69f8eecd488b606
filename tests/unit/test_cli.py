"""``cannbench`` as a CLI: every subcommand's --help, show, compare (and its exit code), report, list, info,
roofline and check, on boards built by the real scorer (tests/synth_outcomes.py) and on real task trees."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from synth_outcomes import all_outcomes, board_of, outcome, timed

from pytest_cannbench import __version__
from pytest_cannbench.cli import HANDLERS, main
from pytest_cannbench.report import leaderboard
from pytest_cannbench.report.collector import score_lines
from pytest_cannbench.report.compare import compare, interval, partial_reasons, speedup

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def _write(path: Path, board: dict[str, Any]) -> str:
    leaderboard.write(path, board)
    return str(path)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _worse(outcomes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """level1/exp_1 now fails on precision; level1/relu_2 got twice as fast."""
    out = copy.deepcopy(outcomes)
    out[0] = outcome("level1/exp", "Exp", 1, "failed", "precision_mismatch", "MERE 0.3 > 0.001")
    out[4] = outcome("level1/relu", "Relu", 2, timing=timed(15.0))
    return out


@pytest.fixture
def boards(tmp_path: Path) -> tuple[str, str]:
    return (_write(tmp_path / "a.json", board_of(all_outcomes())),
            _write(tmp_path / "b.json", board_of(_worse(all_outcomes()))))


# --- the parser ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("verb", sorted(HANDLERS))
def test_every_subcommand_has_its_help(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, verb, "--help")
    assert rc == 0 and out.startswith(f"usage: cannbench {verb}")


def test_version_and_the_command_list(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "--version")
    assert rc == 0 and out.strip() == f"pytest-cannbench {__version__}"
    rc, out, _ = _run(capsys, "--help")
    assert rc == 0 and all(verb in out for verb in HANDLERS)
    rc, _, err = _run(capsys)
    assert rc == 2 and "usage: cannbench" in err


# --- show ------------------------------------------------------------------------------------------------------


def test_show_prints_the_sessions_tables_again(boards: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    a, _ = boards
    rc, out, _ = _run(capsys, "show", a)
    assert rc == 0
    board = json.loads(Path(a).read_text())
    lines = out.splitlines()
    assert lines[1] == "5 operators, 13 cases: 6 passed, 2 compile_failed, 2 missing, 1 failed, 1 timeout, 1 crashed"
    table = score_lines(board, 30)
    start = lines.index(table[0])
    assert lines[start:start + len(table)] == table  # the collector's own score table, line for line
    assert any(line.startswith("timing on cpu") for line in lines)


def test_show_of_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, "show", str(tmp_path / "nope.json"))
    assert rc == 2 and "cannbench show: error:" in err and "no such file" in err


# --- compare ---------------------------------------------------------------------------------------------------


def test_compare_reports_deltas_status_changes_and_new_failures(boards: tuple[str, str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    a, b = boards
    rc, out, _ = _run(capsys, "compare", a, b)
    assert rc == 0  # no gate asked for
    board_a, board_b = (json.loads(Path(p).read_text()) for p in boards)
    assert f"total score {board_a['total_score']:.2f} -> {board_b['total_score']:.2f}" in out
    exp = next(line for line in out.splitlines() if line.strip().startswith("level1/exp "))
    delta = board_b["operators"][0]["score"] - board_a["operators"][0]["score"]
    assert "passed -> partial" in exp and f"{delta:+.2f}" in exp
    assert "level1/exp_1: passed -> failed [precision_mismatch]; NEW FAILURE" in out
    assert re.search(r"level1/relu_2: speed-up x0\.67 -> x1\.33 \(\+100\.0%\)", out)
    assert "new failures: 1; fixed: 0" in out


@pytest.mark.parametrize("pct, rc", [(5.0, 1), (30.0, 0)])
def test_compare_gate(boards: tuple[str, str], capsys: pytest.CaptureFixture[str], pct: float, rc: int) -> None:
    a, b = boards
    got, out, _ = _run(capsys, "compare", a, b, "--fail-on-regression", str(pct))
    assert got == rc
    if rc:
        assert "level1/exp: score 82.17 -> 61.06 (-25.7%)" in out and "total: score" in out
    else:
        assert f"regressions over {pct:g}%: none" in out
    # the other way round everything improved: the gate passes
    assert main(["compare", b, a, "--fail-on-regression", str(pct)]) == 0


def test_compare_markdown_and_html(boards: tuple[str, str], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    a, b = boards
    page = tmp_path / "cmp" / "compare.html"
    rc, out, _ = _run(capsys, "compare", a, b, "--markdown", "--html", str(page), "--fail-on-regression", "5")
    assert rc == 1
    assert out.startswith("## cannbench compare:")
    assert "| level1/exp | passed → partial | 82.17 | 61.06 | -21.11 | -25.7% |" in out
    assert "| level1/exp_1 | passed → failed [precision_mismatch]; NEW FAILURE | MERE 0.3 &gt; 0.001 |" in out
    html = page.read_text()
    assert html.count('<section class="board" id="board-') == 2 and 'id="comparison"' in html


def _with_ci(board: dict[str, Any], key: str, low: float, high: float) -> dict[str, Any]:
    board = copy.deepcopy(board)
    for op in board["operators"]:
        for case in op["cases"]:
            if case["key"] == key:
                case["speedup_ci"] = [low, high]
    return board


def _slower(factor: float) -> dict[str, Any]:
    out = copy.deepcopy(all_outcomes())
    out[1] = outcome("level1/exp", "Exp", 2, timing=timed(12.0 * factor))  # the same case, slower
    return board_of(out)


def test_overlapping_intervals_are_noise_for_the_gate(tmp_path: Path) -> None:
    base, slow = board_of(all_outcomes()), _slower(3.0)
    assert compare(base, slow).operators[0].change_pct < -5  # level1/exp lost score on timing alone
    a = _write(tmp_path / "a.json", _with_ci(base, "level1/exp_2", 1.0, 2.0))
    overlapping = _write(tmp_path / "b.json", _with_ci(slow, "level1/exp_2", 0.5, 1.1))
    apart = _write(tmp_path / "c.json", _with_ci(slow, "level1/exp_2", 0.4, 0.6))
    no_ci = _write(tmp_path / "d.json", slow)
    assert main(["compare", a, overlapping, "--fail-on-regression", "5"]) == 0
    assert main(["compare", a, apart, "--fail-on-regression", "5"]) == 1
    assert main(["compare", a, no_ci, "--fail-on-regression", "5"]) == 1  # no interval in B: the change counts


def test_interval_shapes() -> None:
    assert interval({"speedup_ci": [2.0, 1.0]}) == (1.0, 2.0)
    assert interval({"speedup_ci": {"low": 1, "high": 3}}) == (1.0, 3.0)
    assert interval({"timing": {"speedup_ci": [1, 2]}}) == (1.0, 2.0)
    assert interval({"speedup_ci": ["nan", 2]}) is None and interval({}) is None
    paired = {"status": "passed", "t_baseline_us": 30.0, "t_cand_us": 10.0,  # the shape our boards write
              "speedup": {"estimate": 2.9, "low": 2.8, "high": 3.1, "rel_half_width": 0.05, "samples": 12}}
    assert interval(paired) == (2.8, 3.1) and speedup(paired) == 2.9
    assert speedup({"status": "passed", "t_baseline_us": 30.0, "t_cand_us": 10.0}) == 3.0


def test_partial_boards_are_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = board_of(all_outcomes())
    selected = board_of(all_outcomes()[:5])
    selected["selection"] = {"keyword": "exp or relu", "markexpr": "", "deselected": 8}
    a, b = _write(tmp_path / "a.json", whole), _write(tmp_path / "b.json", selected)
    rc, out, _ = _run(capsys, "compare", a, b)
    assert rc == 0
    assert f"WARNING: {b} is a partial board (-k 'exp or relu', 8 cases deselected)" in out
    assert f"WARNING: 8 cases of {a} missing from {b}: level1/relu_3, level2/matmul_1" in out
    assert partial_reasons({"config": {"shard": [1, 2]}}) == ["shard 1/2"]
    assert partial_reasons(whole) == []
    # operators that dropped out of B are regressions, not silently gone
    rc, out, _ = _run(capsys, "compare", a, b, "--fail-on-regression", "1")
    assert rc == 1 and "level3/conv: score 16.67 -> 0.00 (-100.0%) (absent from B)" in out


def test_compare_reads_results_jsonl_and_rejects_junk(boards: tuple[str, str], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    a, _ = boards
    jsonl = tmp_path / "results.jsonl"
    jsonl.write_text("".join(leaderboard.dumps({"run": "r", "outcome": o}) + "\n" for o in all_outcomes()))
    rc, out, _ = _run(capsys, "compare", a, str(jsonl), "--fail-on-regression", "0")
    assert rc == 0 and "cases changed" not in out  # the same outcomes, scored again
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2]")
    rc, _, err = _run(capsys, "compare", a, str(junk))
    assert rc == 2 and "cannbench compare: error:" in err
    assert main(["compare", a, a, "--fail-on-regression", "-1"]) == 2


# --- report ----------------------------------------------------------------------------------------------------


def test_report_regenerates_every_file(boards: tuple[str, str], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    a, _ = boards
    html, md, ev = tmp_path / "r" / "report.html", tmp_path / "r" / "summary.md", tmp_path / "r" / "eval.json"
    rc, out, _ = _run(capsys, "report", a, "--html", str(html), "--markdown", str(md), "--eval-report", str(ev))
    assert rc == 0 and f"wrote {html}, {md}, {ev}" in out
    board = json.loads(Path(a).read_text())
    from pytest_cannbench.report.eval_report import to_eval_report
    from pytest_cannbench.report.markdown import render
    from pytest_cannbench.report.page import render as render_page

    assert md.read_text() == render(board)
    assert json.loads(ev.read_text()) == json.loads(leaderboard.dumps(to_eval_report(board)))
    assert html.read_text() == render_page(board)
    rc, _, err = _run(capsys, "report", a)
    assert rc == 2 and "--html PATH" in err


def test_merge_writes_the_page_too(boards: tuple[str, str], tmp_path: Path) -> None:
    a, b = boards
    assert main(["merge", str(tmp_path / "m.json"), a, b, "--html", str(tmp_path / "m.html")]) == 0
    assert "<svg" in (tmp_path / "m.html").read_text()


# --- list and info ---------------------------------------------------------------------------------------------


def test_list_a_tree(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "list", str(FIXTURES / "submission"))
    assert rc == 0
    lines = out.splitlines()
    assert re.fullmatch(r"level1/softplus\s+1\s+4\s+Elementwise\s+float32, float16, bfloat16", lines[1]), lines[1]
    assert lines[2].startswith("level2/rms_scale") and re.search(r"\s2\s+\s", lines[2])
    assert lines[-1] == "2 operators, 6 cases; level1 1 ops / 4 cases, level2 1 ops / 2 cases"
    rc, out, _ = _run(capsys, "list", str(FIXTURES / "submission"), "-k", "rms")
    assert rc == 0 and "softplus" not in out


def test_list_reports_broken_operators(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "list", str(FIXTURES / "malformed"))
    assert rc == 0
    assert re.search(r"^empty_cases\s+-\s+-\s+BROKEN: .*the list is empty", out, re.M)
    assert re.search(r"^case_id_broken\s+1\s+4 .*\(2 broken\)$", out, re.M)
    rc, _, err = _run(capsys, "list", str(FIXTURES / "nowhere"))
    assert rc == 2 and "no such directory" in err


def test_info_an_operator(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "info", str(FIXTURES / "submission" / "level1" / "softplus"))
    assert rc == 0
    assert out.startswith("level1/softplus: Softplus (level 1,")
    assert "schema: softplus(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor y" in out
    assert re.search(r"^  beta\s+float\s+default 1\.0$", out, re.M)
    assert "cases (4):" in out and re.search(r"^\s+1  \d+x\d+", out, re.M)
    rc, _, err = _run(capsys, "info", str(FIXTURES / "submission"))
    assert rc == 2 and "not an operator directory" in err
    rc, _, err = _run(capsys, "info", str(FIXTURES / "malformed" / "empty_cases"))
    assert rc == 2 and "cannot be graded" in err


# --- roofline and check (real measurements, small) -------------------------------------------------------------


def test_roofline_calibrates_then_reads_its_cache(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "roofline", "--threads", "1", "--cache-dir", str(tmp_path), "--json")
    assert rc == 0
    entry = json.loads(out)
    assert entry["bandwidth_gbs"] > 0 and entry["peak_gflops"] > 0 and entry["cached"] is False
    rc, out, _ = _run(capsys, "roofline", "--threads", "1", "--cache-dir", str(tmp_path))
    assert rc == 0 and out.startswith("roofline cpu (")
    if entry["details"]["under_load"] is None:
        assert out.strip().endswith("(cached)")
    else:  # measured while other work ran: read back as it is, or measured again now that it is quiet, and merged
        assert ("MEASURED UNDER LOAD" in out and "(cached)" in out) or "best of 2 calibrations" in out
    rc, _, err = _run(capsys, "roofline", "--device", "tpu", "--cache-dir", str(tmp_path))
    assert rc == 2 and "device must be" in err


def test_check_runs_the_quality_gate(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "check", str(FIXTURES / "basic"), "--threads", "1")
    assert rc == 0 and "1 operators, 3 cases, 0 problem(s)" in out


def test_log_axis_ticks_stay_readable() -> None:
    from pytest_cannbench.report.charts import _ticks

    assert _ticks(0.3, 30.0) == [0.5, 1.0, 2.0, 5.0, 10.0, 20.0]
    assert _ticks(0.03, 3000.0) == [0.1, 1.0, 10.0, 100.0, 1000.0]


def test_list_a_kernelbench_tree(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "list", str(FIXTURES / "kernelbench" / "problems"))
    assert rc == 0
    assert re.search(r"^level1/1_ReLU\.py\s+1\s+6$", out, re.M) and re.search(r"^level2/1_Linear_GELU\.py\s+2\s+6$",
                                                                              out, re.M)
    assert out.splitlines()[-1].startswith("4 KernelBench problems, 24 cases")
    rc, _, err = _run(capsys, "list", str(FIXTURES / "kernelbench" / "honest"))  # ModelNew files: no problems
    assert rc == 2 and "no KernelBench problem" in err

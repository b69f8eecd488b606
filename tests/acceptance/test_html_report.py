"""The pytest-html integration: escaped cells, the summary section and its SVG chart, in a real report and a browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_cannbench.figures import hap
from pytest_cannbench.report.html import COLUMNS, HtmlHooks, row_values, summary_html, svg_bar_chart
from pytest_cannbench.report.leaderboard import score_cases

SVG = "{http://www.w3.org/2000/svg}"
XSS = "<script>alert(1)</script>"


def _timing(t_cand: float, t_base: float, t_hw: float) -> dict[str, Any]:
    return {"measured": True, "t_cand_us": t_cand, "t_baseline_us": t_base, "t_hw_us": t_hw, "flags": []}


def _outcome(rel_path: str, case_id: int, status: str, failure_type: str | None = None,
             timing: dict[str, Any] | None = None, operator: str | None = None, message: str = "") -> dict[str, Any]:
    return {"key": f"{rel_path}_{case_id}", "rel_path": rel_path, "operator": operator or rel_path.split("/")[-1],
            "case_id": case_id, "status": status, "failure_type": failure_type, "message": message,
            "timing": timing or {}}


OUTCOMES = [
    _outcome("level1/exp", 1, "passed", timing=_timing(40.0, 100.0, 10.0)),
    _outcome("level1/exp", 2, "failed", "precision_mismatch", message="max abs error 0.5"),
    _outcome("level1/fast", 1, "passed", timing=_timing(2.0, 100.0, 10.0)),  # faster than T_hw: HAP above 1
    _outcome("level2/<script>alert(1)</script>", 1, "crashed", "worker_crashed", operator=XSS,
             message="worker 'gw0' crashed while running 'x'"),
]
# A fixed board in the leaderboard's schema (levels, operators with their cases), as the plugin would pass it.
BOARD: dict[str, Any] = json.loads(json.dumps(score_cases(OUTCOMES)))


def _svg(markup: str) -> ET.Element:
    """Parse the chart as XML: it must be well-formed to render inline and as a standalone file."""
    root = ET.fromstring(markup)
    assert root.tag == f"{SVG}svg"
    return root


def _bars(root: ET.Element) -> list[tuple[str, float, str]]:
    """(label, bar width, value text) per bar."""
    out = []
    for group in root.iter(f"{SVG}g"):
        label, value = (t.text or "" for t in group.findall(f"{SVG}text"))
        out.append((label, float(group.find(f"{SVG}rect").get("width")), value))
    return out


# --- svg_bar_chart ---------------------------------------------------------------------------------------------


def test_chart_escapes_labels_and_keeps_order() -> None:
    markup = svg_bar_chart([("b", 50.0), (XSS, 25.0)])
    assert "<script>" not in markup
    bars = _bars(_svg(markup))
    assert [b[0] for b in bars] == ["b", XSS]  # the parser unescapes: the text survives intact
    assert bars[0][1] == pytest.approx(2 * bars[1][1], abs=0.2)
    assert [b[2] for b in bars] == ["50.00", "25.00"]


def test_chart_empty_is_well_formed() -> None:
    root = _svg(svg_bar_chart([]))
    assert not _bars(root)
    assert "no operators scored" in "".join(root.itertext())


def test_chart_scores_above_100_fit_with_reference_line() -> None:
    width = 500
    root = _svg(svg_bar_chart([("a", 150.0), ("b", 100.0), ("c", 0.0)], width=width))
    (_a, wa, _), (_b, wb, _), (_c, wc, _) = _bars(root)
    assert wa == pytest.approx(1.5 * wb, abs=0.2)
    assert wc == 0.0
    rects = list(root.iter(f"{SVG}rect"))
    assert all(float(r.get("x")) + float(r.get("width")) <= width for r in rects)
    assert len(root.findall(f"{SVG}line")) == 1  # the 100 mark


def test_chart_zero_nan_and_explicit_scale() -> None:
    root = _svg(svg_bar_chart([("zero", 0.0), ("nan", float("nan")), ("neg", -3.0), ("half", 50.0)], max_value=50.0))
    widths = {label: w for label, w, _ in _bars(root)}
    assert widths["zero"] == widths["nan"] == widths["neg"] == 0.0
    assert widths["half"] > 0
    assert not root.findall(f"{SVG}line")  # all within 100
    assert [v for _, _, v in _bars(root)] == ["0.00", "-", "-3.00", "50.00"]


def test_chart_shortens_long_labels_but_keeps_full_tooltip() -> None:
    long = "level9/" + "x" * 100
    root = _svg(svg_bar_chart([(long, 10.0)]))
    label, _, _ = _bars(root)[0]
    assert len(label) < len(long) and label.endswith("…")
    assert long in root.find(f"{SVG}g").find(f"{SVG}title").text


# --- summary_html ----------------------------------------------------------------------------------------------


def _section_svg(section: str) -> ET.Element:
    return _svg(re.search(r"<svg.*</svg>", section, re.S).group(0))


def test_summary_from_scored_board() -> None:
    section = summary_html(BOARD)
    assert XSS not in section and "&lt;script&gt;" in section
    assert f"Total score: <strong>{BOARD['total_score']:.2f}</strong> (3 operators, 4 cases)" in section
    levels = re.search(r'<table class="cannbench-levels">.*?</table>', section).group(0)
    assert "<td>level1</td><td>2</td>" in levels and "<td>level2</td><td>1</td>" in levels
    bars = _bars(_section_svg(section))
    assert [b[0] for b in bars] == [op["rel_path"] for op in BOARD["operators"]]
    assert float(bars[1][2]) == 100  # level1/fast: HAP at 1 (above it only below T_HW, which fails)
    assert "Cases lost to crashed xdist workers (1" in section
    assert "worker &#x27;gw0&#x27; crashed" in section


def test_summary_empty_board() -> None:
    section = summary_html({})
    assert "Total score: <strong>-</strong> (0 operators, 0 cases)" in section
    assert "<table" not in section and "crashed" not in section
    _section_svg(section)


def test_summary_tolerates_json_cleaned_numbers() -> None:
    board = {"total_score": "nan", "levels": {"level1": {"score": "inf", "operators": 1}},
             "operators": [{"rel_path": "level1/a", "score": "nan", "cases": []}]}
    section = summary_html(board)
    assert "<td>level1</td><td>1</td><td>-</td>" in section
    assert _bars(_section_svg(section))[0][1] == 0.0


# --- hooks on their own ----------------------------------------------------------------------------------------


def test_header_and_row_cells_line_up() -> None:
    header = ["<th>Result</th>", "<th>Test</th>", "<th>Duration</th>", "<th>Links</th>"]
    hooks = HtmlHooks(lambda: None)
    hooks.pytest_html_results_table_header(header)
    assert header[2] == '<th class="sortable" data-column-type="cann_operator">Operator</th>'
    assert [re.sub("<.*?>", "", h) for h in header[2:7]] == [title for _, title, _ in COLUMNS]
    cann = OUTCOMES[0] | {"operator": XSS}
    row = ["<td>r</td>", "<td>t</td>", "<td>d</td>", "<td></td>"]
    hooks.pytest_html_results_table_row(SimpleNamespace(when="call", cann=cann), row)
    assert len(row) == len(header)
    assert row[2] == '<td class="col-cann_operator">&lt;script&gt;alert(1)&lt;/script&gt;</td>'
    expected = hap(100.0, 40.0, 10.0)[0]
    assert f">{expected:.3f}</td>" in row[5]
    assert row[6].endswith(">40.00 / 100.00</td>")
    hidden: list[str] = []
    hooks.pytest_html_results_table_row(SimpleNamespace(when="call", cann=cann), hidden)
    assert hidden == []  # a row another plugin deleted stays deleted


@pytest.mark.parametrize("report, status", [
    (SimpleNamespace(when="setup"), "-"),
    (SimpleNamespace(when="call"), "-"),
    (SimpleNamespace(when="???", nodeid="x"), "crashed"),
    (SimpleNamespace(when="call", cann="not a dict"), "-"),
    (SimpleNamespace(), "-"),
])
def test_row_without_cann(report: Any, status: str) -> None:
    values = row_values(report)
    assert (values.operator, values.status, values.hap, values.times) == ("-", status, "-", "-")


def test_row_failed_and_unmeasured() -> None:
    failed = row_values(SimpleNamespace(when="call", cann=OUTCOMES[1]))
    assert (failed.status, failed.hap, failed.case) == ("failed (precision_mismatch)", "-", "2")
    unmeasured = OUTCOMES[0] | {"timing": {"measured": False, "reason": "no device"}}
    assert row_values(SimpleNamespace(when="call", cann=unmeasured)).hap == "-"
    capped = row_values(SimpleNamespace(when="call", cann=OUTCOMES[2]), cap=True)
    assert capped.hap == "1.000" and "hap_capped" in capped.hap_title


def test_summary_hook_prepends_and_survives_a_failing_getter() -> None:
    prefix = ["<p>other</p>"]
    HtmlHooks(lambda: BOARD).pytest_html_results_summary(prefix, [], [])
    assert prefix[0].startswith('<section class="cannbench-summary"') and prefix[1] == "<p>other</p>"
    prefix = []
    HtmlHooks(lambda: None).pytest_html_results_summary(prefix, [], [])
    assert prefix == []

    def boom() -> dict[str, Any]:
        raise RuntimeError("<no board>")

    HtmlHooks(boom).pytest_html_results_summary(prefix, [], [])
    assert "&lt;no board&gt;" in prefix[0]


# --- a real pytest-html report ---------------------------------------------------------------------------------

CONFTEST = """
import json

import pytest

from pytest_cannbench.report.html import HtmlHooks

BOARD = json.loads({board!r})
CANN = json.loads({cann!r})


def pytest_configure(config):
    # Registered unconditionally: with -p no:html this shows the optional hooks validate without pytest-html.
    config.pluginmanager.register(HtmlHooks(lambda: BOARD), "cannbench-html-test")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and item.name in CANN:
        report.cann = CANN[item.name]
    return report
"""

TESTS = """
def test_exp():
    pass

def test_xss():
    assert False

def test_plain():
    pass
"""


class _Blob(HTMLParser):
    """pytest-html keeps the rows in a JSON attribute that its script renders; pull it out."""

    blob: Any = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "data-jsonblob" and value:
                self.blob = json.loads(value)


def _make_report(pytester: pytest.Pytester, *extra: str) -> tuple[pytest.RunResult, Path]:
    cann = {"test_exp": OUTCOMES[0], "test_xss": OUTCOMES[1] | {"operator": XSS}}
    pytester.makeconftest(CONFTEST.format(board=json.dumps(BOARD), cann=json.dumps(cann)))
    pytester.makepyfile(test_ops=TESTS)
    # The plugin proper stays out: this checks the hooks alone.
    result = pytester.runpytest("-p", "no:cannbench", "-p", "no:cacheprovider", *extra)
    return result, pytester.path / "report.html"


def test_pytest_html_report(pytester: pytest.Pytester) -> None:
    result, path = _make_report(pytester, "--html=report.html", "--self-contained-html")
    result.assert_outcomes(passed=2, failed=1)
    page = path.read_text(encoding="utf-8")
    assert XSS not in page
    for _, title, _ in COLUMNS:
        assert f">{title}</th>" in page
    summary = re.search(r'<section class="cannbench-summary".*?</section>', page, re.S).group(0)
    assert summary == summary_html(BOARD)
    assert '<table class="cannbench-levels">' in summary and "<svg" in summary
    _section_svg(summary)

    parser = _Blob()
    parser.feed(page)
    rows = {test_id: data["resultsTableRow"] for test_id, runs in parser.blob["tests"].items() for data in runs}
    exp = next(cells for test_id, cells in rows.items() if test_id.endswith("test_exp"))
    assert exp[2] == '<td class="col-cann_operator">exp</td>'
    assert f">{hap(100.0, 40.0, 10.0)[0]:.3f}</td>" in exp[5]
    xss = next(cells for test_id, cells in rows.items() if test_id.endswith("test_xss"))
    assert xss[2] == '<td class="col-cann_operator">&lt;script&gt;alert(1)&lt;/script&gt;</td>'
    assert "failed (precision_mismatch)" in xss[4]
    plain = next(cells for test_id, cells in rows.items() if test_id.endswith("test_plain"))
    assert plain[2:7] == [f'<td class="col-{name}">-</td>' for name, _, _ in COLUMNS]
    assert all(len(cells) == 4 + len(COLUMNS) for cells in rows.values())  # setup/teardown rows too, if any


def test_without_pytest_html(pytester: pytest.Pytester) -> None:
    result, path = _make_report(pytester, "-p", "no:html")
    result.assert_outcomes(passed=2, failed=1)
    assert not path.exists()
    assert "PluginValidationError" not in result.stdout.str() + result.stderr.str()


# --- rendered in a browser -------------------------------------------------------------------------------------


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not found:
        pytest.skip("no chromium: apt-get install chromium")
    return found


def test_report_renders_in_headless_chromium(pytester: pytest.Pytester, tmp_path: Path) -> None:
    browser = _chromium()
    result, path = _make_report(pytester, "--html=report.html", "--self-contained-html")
    result.assert_outcomes(passed=2, failed=1)
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-first-run", "--disable-extensions", f"--user-data-dir={tmp_path / 'profile'}",
               "--virtual-time-budget=5000", "--dump-dom", path.as_uri()]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("chromium did not finish within 120 s")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    section = re.search(r'<section class="cannbench-summary".*?</section>', dom, re.S)
    assert section, dom[:2000]
    assert "<svg" in section.group(0) and 'class="cannbench-bar"' in section.group(0)
    assert "Total score:" in section.group(0) and 'class="cannbench-levels"' in section.group(0)
    # The results rows exist only once pytest-html's script has run: our cells made it through the browser.
    assert '<td class="col-cann_operator">exp</td>' in dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom and XSS not in dom
    assert re.search(r'<th class="sortable[^"]*" data-column-type="cann_hap"', dom)

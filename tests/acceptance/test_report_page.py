"""The standalone report (reports/report.html): written by every graded run, self-contained, escaped, and drawn
by a real browser (headless Chromium: the DOM after rendering and a screenshot's pixels)."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from inner import run_inner
from synth_outcomes import all_outcomes, board_of, outcome

from pytest_cannbench.report import page
from pytest_cannbench.report.collector import score_lines
from pytest_cannbench.report.compare import compare

XSS = "<script>alert('x')</script>"
QUICK = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-repeat=2",
         "--cann-warmup=0")


def _board_with_every_category() -> dict[str, Any]:
    out = all_outcomes()
    out.append(outcome("level3/conv", "Conv", 4, "failed", "builtin_compute", f"aten::add ran {XSS}"))
    return json.loads(json.dumps(board_of(out)))  # as a reader of leaderboard.json sees it


# --- the page as text ------------------------------------------------------------------------------------------


class _Refs(HTMLParser):
    """Every tag name and every attribute value that could load something."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.refs += [f"{name}={value}" for name, value in attrs if name in ("src", "href", "xlink:href", "srcset",
                                                                             "action", "data", "poster")]


def test_the_page_has_no_external_reference() -> None:
    html = page.render(_board_with_every_category())
    refs = _Refs()
    refs.feed(html)
    assert refs.refs == []
    assert not refs.tags & {"script", "link", "img", "iframe", "object", "embed"}
    assert not re.search(r"https?:|//[a-z]|url\(|@import", html, re.I)


def test_messages_and_names_are_escaped() -> None:
    board = _board_with_every_category()
    board["operators"][0]["rel_path"] = XSS
    html = page.render(board)
    assert XSS not in html and "<script" not in html
    assert "aten::add ran &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html


def test_the_page_shows_what_the_board_says() -> None:
    board = _board_with_every_category()
    timed_cases = [c for op in board["operators"] for c in op["cases"] if c["status"] == "passed"
                   and c["t_baseline_us"] and c["t_cand_us"]]
    assert timed_cases
    timed_cases[0]["speedup"] = {"estimate": 1.9, "low": 1.7, "high": 2.2, "rel_half_width": 0.13, "samples": 10}
    html = page.render(board)
    assert f'<div class="value">{board["total_score"]:.2f}</div>' in html
    assert html.count('class="cb-bar"') == len(board["levels"]) + len(board["operators"])
    assert html.count('class="cb-cell ') == board["cases_total"]
    for kind in ("passed", "precision", "runtime", "guard", "harness", "missing"):
        assert f'class="cb-cell cb-{kind}"' in html, kind
    timed = sum(1 for op in board["operators"] for c in op["cases"] if c["status"] == "passed"
                and c["t_baseline_us"] and c["t_cand_us"])
    assert html.count('class="cb-point"') == timed
    with_ci = sum(1 for op in board["operators"] for c in op["cases"] if c["status"] == "passed"
                  and c["t_baseline_us"] and c["t_cand_us"] and isinstance(c.get("speedup"), dict))
    assert html.count('class="cb-interval"') == with_ci  # the paired speed-up's interval as a whisker (issue 20)
    assert with_ci == 1 and html.count("[95% CI ×") == 1 and "[95% CI ×1.7, ×2.2]" in html
    groups = re.findall(r'<summary>(\w+) × (\d+)', html)
    assert dict((ft, int(n)) for ft, n in groups) == board["failure_types"]
    assert "fixed seed 0" in html and board["submission"]["wheel_sha256"] in html


# --- a browser -------------------------------------------------------------------------------------------------


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not found:
        pytest.skip("no chromium: apt-get install chromium")
    return found


def _browser(path: Path, profile: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}", "--hide-scrollbars",
               "--virtual-time-budget=5000", *mode, path.as_uri()]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=path.parent)
    except subprocess.TimeoutExpired:
        pytest.fail("chromium did not finish within 120 s")
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _png_pixels(data: bytes) -> np.ndarray:
    """RGB pixels of an 8-bit, non-interlaced PNG (what Chromium writes), decoded with zlib alone."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, header = 8, [], b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and interlace == 0 and color in (2, 6)
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(chunks))
    stride = width * bpp
    out = np.zeros((height, stride), dtype=np.int32)
    previous = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        if kind == 0:
            row = line
        elif kind == 2:
            row = (line + previous) & 255
        else:  # sub, average and paeth depend on the pixel to the left: byte by byte
            row = np.zeros(stride, dtype=np.int32)
            for i in range(stride):
                left = row[i - bpp] if i >= bpp else 0
                up, corner = previous[i], previous[i - bpp] if i >= bpp else 0
                if kind == 1:
                    pred = left
                elif kind == 3:
                    pred = (left + up) // 2
                else:
                    p = left + up - corner
                    pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                    pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                row[i] = (line[i] + pred) & 255
        out[y] = row
        previous = row
    return out.reshape(height, width, bpp)[:, :, :3]


def _has_color(pixels: np.ndarray, hex_color: str, at_least: int = 50) -> bool:
    rgb = [int(hex_color[i:i + 2], 16) for i in (1, 3, 5)]
    return int(np.all(pixels == rgb, axis=2).sum()) >= at_least


def test_the_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    page.write(path, _board_with_every_category())
    dom = _browser(path, tmp_path / "profile", "--dump-dom").stdout
    for selector in ('class="cb-bar"', 'class="cb-cell cb-passed"', 'class="cb-point"', 'class="cb-ceiling"',
                     'class="kpi'):
        assert selector in dom, selector
    assert len(re.findall(r"<svg[^>]*class=\"cb-chart\"", dom)) == 4  # levels, operators, grid, speed-ups
    assert "&lt;script&gt;" in dom and XSS not in dom
    shot = tmp_path / "shot.png"
    _browser(path, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2400")
    pixels = _png_pixels(shot.read_bytes())
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # not blank
    for kind in ("passed", "precision", "runtime", "guard", "harness", "missing"):
        assert _has_color(pixels, page.CATEGORIES[kind][1]), kind  # the grid's squares, drawn
    assert _has_color(pixels, page.OPERATOR_COLORS["partial"], 500)  # an operator bar coloured by its status


# --- every graded run writes it; the CLI reads the run back ----------------------------------------------------


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_cannbench.cli", *argv], capture_output=True, text=True,
                          timeout=300)


def test_a_graded_run_writes_the_page_and_the_cli_reads_it_back(pytester: pytest.Pytester,
                                                               capsys: pytest.CaptureFixture[str], task_tree: Any,
                                                               prebuilt: Any, tmp_path: Path) -> None:
    tasks = task_tree("submission")
    good = run_inner(pytester, capsys, tasks, *QUICK, "--cann-source=@golden")
    reports = pytester.path / "reports"
    html, board_a = reports / "report.html", reports / "leaderboard.json"
    assert html.is_file() and any("report.html" in line for line in good.section() if line.startswith("written:"))
    board = json.loads(board_a.read_text())
    assert html.read_text() == page.render(board)  # the page is the board's, nothing else

    # the second run: a submission that crashes on one case, its board elsewhere
    bad = run_inner(pytester, capsys, tasks, *QUICK, f"--cann-source={prebuilt('broken/segfault')}",
                    "-o", "cann_leaderboard=reports/b/leaderboard.json")
    board_b = reports / "b" / "leaderboard.json"
    assert (reports / "b" / "report.html").is_file()

    shown = _cli("show", str(board_a))
    assert shown.returncode == 0, shown.stderr
    section = good.section()
    table = score_lines(board, None)
    assert [line for line in section if line in table] == table  # the session's own score table ...
    assert all(line in shown.stdout.splitlines() for line in table)  # ... printed again

    compared = _cli("compare", str(board_a), str(board_b), "--fail-on-regression", "5", "--html",
                    str(tmp_path / "compare.html"))
    assert compared.returncode == 1, compared.stdout + compared.stderr
    assert "level1/softplus_2: passed -> crashed [candidate_crashed]; NEW FAILURE" in compared.stdout
    assert re.search(r"^  level1/softplus: score [\d.]+ -> [\d.]+ \(-[\d.]+%\)$", compared.stdout, re.M)
    print(compared.stdout, file=sys.stderr)  # visible with -s: what the closing note quotes
    assert _cli("compare", str(board_a), str(board_a), "--fail-on-regression", "0").returncode == 0
    assert compare(board, json.loads(board_b.read_text())).new_failures()
    assert bad.cases  # both runs graded cases

    regenerated = tmp_path / "again.html"
    assert _cli("report", str(board_a), "--html", str(regenerated)).returncode == 0
    assert regenerated.read_text() == html.read_text()
    dom = _browser(tmp_path / "compare.html", tmp_path / "profile", "--dump-dom").stdout
    assert dom.count('class="cb-cell cb-passed"') >= 6 and 'class="cb-cell cb-runtime"' in dom


def test_the_page_beside_the_board_never_overwrites_pytest_htmls(tmp_path: Path) -> None:
    board = _board_with_every_category()
    reports = tmp_path / "reports"
    assert page.write_beside(reports / "leaderboard.json", board) == str(reports / "report.html")
    theirs = str(reports / "report.html")
    assert page.write_beside(reports / "leaderboard.json", board, theirs) == str(reports / "cannbench-report.html")
    blocked = tmp_path / "file"
    blocked.write_text("")
    said = page.write_beside(blocked / "leaderboard.json", board)  # its directory is a file
    assert said.startswith(f"{blocked / 'report.html'} not written (")


def test_the_page_tolerates_empty_and_json_cleaned_boards() -> None:
    odd = {"total_score": "nan", "levels": {"level1": {"score": "inf", "operators": 1}},
           "operators": [{"rel_path": "level1/a", "score": "nan", "status": "passed",
                          "cases": [{"key": "level1/a_1", "status": "passed", "t_cand_us": "inf",
                                     "t_baseline_us": 5.0, "t_hw_us": "nan"}]}]}
    assert '<div class="value">-</div>' in page.render({})
    html = page.render(odd)
    assert "no timed cases" in html and 'class="cb-cell cb-passed"' in html
    both = page.render_comparison({}, odd, compare({}, odd, "empty", "odd"))
    assert "1 case of odd missing from empty" in both

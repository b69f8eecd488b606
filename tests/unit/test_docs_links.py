"""Every relative link in the manual resolves: README.md, CHANGELOG.md, docs/*.md and benchmarks/results/*.md.

A link is an inline link or image (``[text](target)``, ``![alt](target)``) or a reference definition
(``[label]: target``) outside code blocks and code spans. A target with a scheme (``https:``, ``mailto:``) is left
alone; any other must name a file or directory inside the repository, and an anchor (``#...``) must be a heading of
the Markdown file it points into, spelled as GitHub spells heading ids.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1", re.S)
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]*(?:\([^()\s]*\)[^()\s<>]*)*)>?"
                          r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
_REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def manual_files(root: Path = ROOT) -> list[Path]:
    """The Markdown files whose links the manual promises: README, changelog, docs/, benchmarks/results/."""
    files = [root / "README.md", root / "CHANGELOG.md"]
    files += sorted((root / "docs").glob("*.md"))
    files += sorted((root / "benchmarks" / "results").glob("*.md"))
    return [f for f in files if f.is_file()]


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, code spans blanked."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        out.append((number, line))
    return out


def _blank_code_spans(line: str) -> str:
    return _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def heading_id(heading: str) -> str:
    """GitHub's id for a heading's text: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").lower()
    kept = []
    for ch in text:
        category = unicodedata.category(ch)
        if ch in " -_" or category[0] in "LNM":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors_of(path: Path) -> set[str]:
    """Every id a link may name in a Markdown file: its headings (duplicates numbered as GitHub does) and HTML ids."""
    seen: dict[str, int] = {}
    ids: set[str] = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if match:
            base = heading_id(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            ids.add(base if count == 0 else f"{base}-{count}")
        ids.update(_HTML_ID.findall(line))
    return ids


def link_targets(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link in a Markdown file, code excluded."""
    found: list[tuple[int, str]] = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        prose = _blank_code_spans(line)
        ref = _REFERENCE_DEF.match(prose)
        if ref:
            found.append((number, ref.group(1)))
            continue
        found += [(number, m.group(1)) for m in _INLINE_LINK.finditer(prose)]
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """One message per link of ``path`` that does not resolve, naming the file, the line and what is missing."""
    problems: list[str] = []
    anchor_cache: dict[Path, set[str]] = {}
    where_root = root.resolve()
    for number, target in link_targets(path):
        where = f"{path.relative_to(root)}:{number}: link '{target}'"
        if not target or _SCHEME.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path.resolve()
        if dest != where_root and where_root not in dest.parents:
            problems.append(f"{where} leaves the repository")
            continue
        if not dest.exists():
            problems.append(f"{where}: {dest.relative_to(where_root)} does not exist")
            continue
        if not anchor:
            continue
        if dest.suffix != ".md" or not dest.is_file():
            problems.append(f"{where}: an anchor into {dest.relative_to(where_root)}, which is not a Markdown file")
            continue
        if dest not in anchor_cache:
            anchor_cache[dest] = anchors_of(dest)
        if anchor not in anchor_cache[dest]:
            problems.append(f"{where}: {dest.relative_to(where_root)} has no heading with the id '{anchor}'")
    return problems


@pytest.mark.parametrize("path", manual_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    problems = broken_links(path)
    assert not problems, "broken links (fix the target or the heading):\n" + "\n".join(problems)


def test_the_manual_is_all_there() -> None:
    names = {str(p.relative_to(ROOT)) for p in manual_files()}
    assert {"README.md", "CHANGELOG.md", "docs/index.md", "benchmarks/results/README.md"} <= names


def test_heading_ids_as_github_spells_them() -> None:
    assert heading_id("Budgets: the session memory plan") == "budgets-the-session-memory-plan"
    assert heading_id("Timer fidelity on the CPU (`benchmarks/timer_fidelity.py`)") == (
        "timer-fidelity-on-the-cpu-benchmarkstimer_fidelitypy")
    assert heading_id("The `cannbench` command") == "the-cannbench-command"
    assert heading_id("Paired, interleaved, adaptive") == "paired-interleaved-adaptive"
    assert heading_id("Multi-rank (MC2) cases: the ranks' network") == "multi-rank-mc2-cases-the-ranks-network"


def test_the_check_finds_a_missing_file_a_missing_heading_and_an_escape(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# B\n\n## A part\n\n## A part\n", encoding="utf-8")
    page = tmp_path / "docs" / "a.md"
    page.write_text(
        "# A\n\n"
        "[good](b.md#a-part) [second](b.md#a-part-1) [self](#a) [web](https://example.com/x#y)\n"
        "[gone](c.md) [no heading](b.md#nowhere) [out](../../elsewhere.md)\n"
        "`[in code](missing.md)`\n\n"
        "```\n[in a fence](missing.md)\n```\n\n"
        "[ref]: b.md#no-such-part\n",
        encoding="utf-8")
    problems = broken_links(page, root=tmp_path)
    assert len(problems) == 4, problems
    assert "docs/a.md:4: link 'c.md': docs/c.md does not exist" in problems
    assert any("b.md#nowhere" in p and "no heading with the id 'nowhere'" in p for p in problems)
    assert any("../../elsewhere.md" in p and "leaves the repository" in p for p in problems)
    assert any("b.md#no-such-part" in p for p in problems)

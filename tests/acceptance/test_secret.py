"""The session secret stays secret: real graded sessions (a hand-made wheel, real workers, the sandbox as chosen),
then every artefact under the run directory and the terminal text searched for the secret's bytes in every usual
spelling. Only ``--cann-reveal-secret`` writes it, to a file of the user's choosing (0600), and that file verifies
against the board's commitment.

The submission prints everything about itself it can read (its environment, its command line, its parent's and
pid 1's /proc entries through libc, below the guard's audit hook, its working and temporary directories): what
it prints lands in the case logs, which are searched like every other file, so a secret visible to submission code
would be found there.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
from pathlib import Path

import pytest
from inner import InnerRun, make_wheel, run_inner

from pytest_cannbench import cli, options
from pytest_cannbench.report.secret import commitment

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BASE = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-hidden-generate=1",
        "-k", "softplus", "--cann-repeat=2", "--cann-warmup=0", "-l", "-rA")
PRYING = '''import ctypes
import os
import sys

import torch

_libc = ctypes.CDLL(None)  # --cann-guard off: native reads, below the audit hook that refuses them in Python


def _native_read(path):
    fd = _libc.open(path.encode(), os.O_RDONLY)
    if fd < 0:
        return f"open failed (errno {ctypes.get_errno()})"
    buffer = ctypes.create_string_buffer(1 << 16)
    got = _libc.read(fd, buffer, len(buffer))
    _libc.close(fd)
    return buffer.raw[:max(got, 0)]


def _show(label, read):
    try:
        value = read()
    except Exception as exc:  # what it may not read is refused: say so
        value = f"refused ({type(exc).__name__})"
    print(f"pry {label}: {value!r}", file=sys.stderr, flush=True)


def _listing(path):
    found = []
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            found.append((full, _native_read(full)[:4096]))
    return found


def softplus(x, beta=1.0, threshold=20.0):
    _show("environ", lambda: dict(os.environ))
    _show("argv", lambda: sys.argv)
    for pid in ("self", str(os.getppid()), "1", "2"):
        for entry in ("cmdline", "environ"):
            _show(f"/proc/{pid}/{entry}", lambda: _native_read(f"/proc/{pid}/{entry}"))
    _show("cwd", lambda: _listing(os.getcwd()))
    _show("tmp", lambda: _listing(os.environ.get("TMPDIR", "/tmp/none")))
    return torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold).to(x.dtype).contiguous()
'''


def spellings(secret: str) -> dict[str, str]:
    """The secret's 16 bytes as hex (both cases), base64 (standard and URL-safe, padded or not), base32 and as
    decimal numbers (the integer both ways round, the bytes one by one)."""
    raw = bytes.fromhex(secret)
    forms = {"hex": secret.lower(), "HEX": secret.upper(), "base64": base64.b64encode(raw).decode(),
             "base64url": base64.urlsafe_b64encode(raw).decode(), "base32": base64.b32encode(raw).decode(),
             "int big-endian": str(int.from_bytes(raw, "big")), "int little-endian": str(int.from_bytes(raw, "little")),
             "bytes, comma": ", ".join(str(b) for b in raw), "bytes, space": " ".join(str(b) for b in raw)}
    forms.update({f"{name} unpadded": value.rstrip("=") for name, value in list(forms.items()) if "=" in value})
    forms["hex, half"] = secret[:16]  # a leak of either half would already be one
    return forms


def artefacts(run: InnerRun) -> dict[str, str]:
    """Every file the run left under its directory (not the inputs: tasks, the wheel) and the terminal text."""
    texts = {"terminal": run.text}
    for path in sorted(p for p in run.root.rglob("*") if p.is_file()):
        rel = path.relative_to(run.root)
        if rel.parts[0] in ("tasks", "sub"):
            continue
        texts[str(rel)] = path.read_bytes().decode("latin-1")
    return texts


def assert_nowhere(run: InnerRun, secret: str) -> None:
    texts = artefacts(run)
    assert {"reports/leaderboard.json", "reports/results.jsonl", "reports/report.html", "junit.xml", "summary.md",
            "eval.json"} <= set(texts), sorted(texts)
    logs = [name for name in texts if name.startswith("reports/logs/cases/")]
    assert logs and any("pry environ" in texts[name] for name in logs), logs  # the submission did print
    for name, text in texts.items():
        for form, value in spellings(secret).items():
            where = text.lower().find(value.lower()) if form.startswith(("hex", "HEX")) else text.find(value)
            assert where < 0, f"{name} holds the secret ({form}): ...{text[max(0, where - 80):where + 80]}..."


def grade(pytester: pytest.Pytester, capsys, task_tree, *args: str) -> tuple[InnerRun, str]:
    tasks = task_tree("submission")
    source = pytester.path / "sub"
    make_wheel(source / "dist", {"cann_bench/__init__.py": PRYING})
    run = run_inner(pytester, capsys, tasks, *BASE, f"--cann-source={source}", "--junitxml=junit.xml",
                    "-o", "cann_markdown=summary.md", "-o", "cann_eval_report=eval.json", *args)
    secret = run.config.stash[options.SETTINGS_KEY].secret
    assert re.fullmatch(r"[0-9a-f]{32}", secret), "a graded run without --cann-seed draws a secret"
    return run, secret


def test_no_artefact_of_a_graded_run_holds_the_secret(pytester, capsys, task_tree):
    pytest.importorskip("pytest_html")
    run, secret = grade(pytester, capsys, task_tree, "-n", "2",  # xdist: the workers get it through execnet
                        "--html=pytest-html.html")
    cases = {name: c.cann["status"] for name, c in run.cases.items()}
    assert cases and set(cases.values()) == {"passed"}, (cases, run.text[-3000:])
    assert any(name.startswith("hidden-") for name in cases)  # generated under the secret
    board = json.loads((run.root / "reports" / "leaderboard.json").read_text())
    assert "secret" not in board["config"] and board["config"]["secret_commitment"] == commitment(secret)
    lines = [json.loads(line) for line in (run.root / "reports" / "results.jsonl").read_text().splitlines()]
    assert {line["secret_commitment"] for line in lines} == {commitment(secret)}
    assert f"commitment sha256 {commitment(secret)}" in run.text
    assert_nowhere(run, secret)


def test_the_secret_is_revealed_only_where_asked_and_verifies(pytester, capsys, task_tree, tmp_path_factory):
    reveal = tmp_path_factory.mktemp("revealed") / "secret.txt"
    reveal.symlink_to(tmp_path_factory.mktemp("elsewhere") / "target")  # replaced, never written through
    run, secret = grade(pytester, capsys, task_tree, f"--cann-reveal-secret={reveal}")
    assert not reveal.is_symlink() and reveal.read_text() == secret + "\n"
    assert stat.S_IMODE(reveal.stat().st_mode) == 0o600
    assert_nowhere(run, secret)
    board = str(run.root / "reports" / "leaderboard.json")
    assert cli.main(["secret", board, str(reveal)]) == 0
    assert cli.main(["secret", str(run.root / "reports" / "results.jsonl"), str(reveal)]) == 0
    other = reveal.with_name("other.txt")
    other.write_text(os.urandom(16).hex() + "\n")
    assert cli.main(["secret", board, str(other)]) == 1
    # merging a board with its own results.jsonl: one session, one commitment, kept
    merged = run.root / "merged.json"
    assert cli.main(["merge", str(merged), board, str(run.root / "reports" / "results.jsonl")]) == 0
    data = json.loads(merged.read_text())
    assert data["config"]["secret_commitment"] == commitment(secret)
    assert cli.main(["secret", str(merged), str(reveal)]) == 0

"""Running an inner pytest session and reading back what every case became; hand-made submission wheels."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_cannbench.nodes.items import CannTaskWarning
from pytest_cannbench.report.board_schema import shipped


def board_errors(board: Any) -> list[str]:
    """Where a board breaks the shipped leaderboard schema (report/leaderboard.schema.json): one line per error,
    naming the JSON path, the value's start and what the schema wanted."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(shipped())
    return [f"{'/'.join(map(str, e.absolute_path)) or '<board>'}: {str(e.instance)[:120]}: {e.message[:300]}"
            for e in sorted(validator.iter_errors(board), key=lambda e: list(map(str, e.absolute_path)))]


def check_boards(root: Path, since: float) -> None:
    """Every leaderboard.json an inner session wrote under ``root`` validates against the shipped schema: each
    real board of the test suite is a check of the schema (and of the types it is generated from)."""
    for path in sorted(root.rglob("leaderboard.json")):
        if path.stat().st_mtime >= since:
            errors = board_errors(json.loads(path.read_text()))
            assert not errors, f"{path} breaks the leaderboard schema:\n" + "\n".join(errors[:20])


def int_attr_operator(tasks: Path, name: str, title: str, golden: str, attr: str, description: str,
                      cases: list[str]) -> Path:
    """A level-1 operator ``name`` (``y = f(x)``, one float32 input, one int attribute ``attr``) with its golden
    source and one line of ``cases.yaml`` per case (``case_id: i`` first, from 1): tests whose golden misbehaves."""
    op = tasks / "level1" / name
    op.mkdir()
    (op / "golden.py").write_text(golden)
    (op / "proto.yaml").write_text(
        f"operator:\n  name: {title}\n  category: Elementwise\n  difficulty: L1\n  formula: y = f(x)\n"
        f"  description: {description}\n  shape_support: any\n  attrs:\n"
        f"  - {{name: {attr}, type: int, default: 0, description: {attr}}}\n"
        "  inputs:\n  - {name: x, dtype: [float32], description: x}\n"
        "  outputs:\n  - {name: y, dtype: [float32], description: y}\n"
        f"  schema: {name}(Tensor x, int {attr}=0) -> Tensor y\n")
    (op / "cases.yaml").write_text("cases:\n" + "".join(
        f"- {{operator: {title}, case_id: {i}, input_shape: [[4]], dtype: [float32], {case}}}\n"
        for i, case in enumerate(cases, 1)))
    return op


@dataclass
class Case:
    outcome: str = "passed"
    longrepr: str = ""
    cann: dict | None = None
    cann_reports: int = 0


@dataclass
class InnerRun:
    ret: int
    text: str
    tasks: Path
    seconds: float
    root: Path  # the inner session's rootdir: reports/logs/ is there
    cases: dict[str, Case] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    collect_failures: list[str] = field(default_factory=list)
    config: Any = None  # the inner session's pytest.Config (its plugin state stays in config.stash)

    def section(self) -> list[str]:
        """The lines of the terminal's "cannbench" section."""
        lines = self.text.splitlines()
        start = next(i for i, line in enumerate(lines) if re.fullmatch(r"=+ cannbench =+", line))
        body = []
        for line in lines[start + 1:]:
            if re.fullmatch(r"=+ .* =+", line):
                break
            if line.strip():
                body.append(line)
        return body

    def statuses(self) -> dict[str, tuple]:
        return {name: (c.outcome, (c.cann or {}).get("status"), (c.cann or {}).get("failure_type"))
                for name, c in self.cases.items()}


def run_inner(pytester: pytest.Pytester, capsys: pytest.CaptureFixture, tasks: Path, *args: str) -> InnerRun:
    """``pytester.inline_run(*args)``, its terminal text and every case's reports, keyed by item name.

    Test submissions are small Python packages that compute with torch, which the delegation guard refuses;
    so a run given a submission gets ``--cann-guard=off`` unless it chooses a mode itself. Each defence is
    tested on its own that way, and the guard's tests (tests/adversarial) choose ``block`` explicitly.
    """
    if any(a.startswith("--cann-source") and a != "--cann-source=@golden" for a in args) and \
            not any(a.startswith("--cann-guard") for a in args):
        args = (*args, "--cann-guard=off")
    t0, started = time.monotonic(), time.time()
    reprec = pytester.inline_run(*args)
    seconds = time.monotonic() - t0
    check_boards(Path(pytester.path), started - 1.0)
    configured = reprec.getcalls("pytest_sessionfinish")
    run = InnerRun(ret=int(reprec.ret), text=capsys.readouterr().out, tasks=tasks.resolve(), seconds=seconds,
                   root=Path(pytester.path), config=configured[0].session.config if configured else None)
    for rep in reprec.getreports("pytest_collectreport"):
        if rep.failed:
            run.collect_failures.append(f"{rep.nodeid}: {rep.longrepr}")
    for rep in reprec.getreports("pytest_runtest_logreport"):
        case = run.cases.setdefault(rep.nodeid.split("::")[-1], Case())
        if rep.failed:
            case.outcome = "failed" if rep.when == "call" else "error"
            case.longrepr = str(rep.longrepr)
        elif rep.skipped and case.outcome == "passed":
            case.outcome = "skipped"
        cann = getattr(rep, "cann", None)
        if cann is not None:
            case.cann = cann
            case.cann_reports += 1
    for call in reprec.getcalls("pytest_warning_recorded"):
        if issubclass(call.warning_message.category, CannTaskWarning):
            run.warnings.append(str(call.warning_message.message))
    return run


def make_wheel(dist: Path, files: dict[str, str], version: str = "0.0.1") -> Path:
    """A pure-Python cann_bench wheel written by hand (for contents setuptools would not produce)."""
    dist.mkdir(parents=True, exist_ok=True)
    info = f"cann_bench-{version}.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: cann_bench\nVersion: {version}\n"
    files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    path = dist / f"cann_bench-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


# A softplus golden whose native-precision run (the live baseline) sleeps: a baseline that respects a raised T_HW,
# so a candidate below that T_HW is implausibly fast while the anchor itself is sound. Without it the trusted
# baseline would beat the raised T_HW too, and T_HW would fall back to the bytes written (timing/anchors.check_t_hw).
SLOW_BASELINE_SOFTPLUS = '''"""Test fixture: softplus whose baseline (native precision) takes at least 0.2 s a call."""

import time

import torch


def softplus(x: torch.Tensor, beta: float = 1.0, threshold: float = 20.0) -> torch.Tensor:
    if x.dtype != torch.float64:
        time.sleep(0.2)
    return torch.nn.functional.softplus(x, beta=beta, threshold=threshold).contiguous()
'''
RAISED_T_HW_BYTES = "3e8 + 0 * x.nbytes"  # 3-30 ms at 10-100 GB/s: above any softplus call, below the 0.2 s baseline


def raise_t_hw(operator_dir: Path, proto: str) -> None:
    """Give a softplus fixture a perf_model T_HW far above the candidate's time and a baseline slower than it."""
    (operator_dir / "proto.yaml").write_text(proto)
    (operator_dir / "golden.py").write_text(SLOW_BASELINE_SOFTPLUS)

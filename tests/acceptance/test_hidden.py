"""The sealed hidden split (issue 18) end to end: real wheels, real workers, inner pytest sessions.

``tests/fixtures/hidden/submission`` holds written hidden cases for ``tests/fixtures/submission``; the runs add
generated ones. A submission fitted to the public shapes must pass every public case, fail hidden ones and not
rank; nothing of a hidden case may reach a file or a terminal line beyond its opaque id, status and failure type.
"""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from inner import InnerRun, make_wheel, run_inner

from pytest_cannbench.taskformat.dirs import find_bench_root
from pytest_cannbench.taskformat.hidden import generation_key, load_hidden
from pytest_cannbench.taskformat.spec import load_operator

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SEED = 7
GENERATE = 2
BASE = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-hidden-cases=hidden",
        f"--cann-hidden-generate={GENERATE}", f"--cann-seed={SEED}")
HONEST = '''import torch


def softplus(x, beta=1.0, threshold=20.0):
    return torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold).to(x.dtype).contiguous()


def rms_scale(x, gamma, epsilon=1e-6):
    xf = x.double()
    y = xf * (xf * xf).mean(dim=-1, keepdim=True).add(epsilon).rsqrt() * gamma.double()
    return y.to(x.dtype).contiguous()
'''
# Correct on exactly the published shapes, garbage elsewhere: what a kernel hard-coded to the public cases does.
# It also prints every shape it is given (and its case note would be in its inputs' sizes): none may reach a report.
FITTED = HONEST.replace("import torch\n", "import sys\n\nimport torch\n\nPUBLIC = {(64, 33), (1000,), (4, 5, 6), "
                        "(257,), (16, 64), (3, 7, 96)}\n").replace(
    "def softplus(x, beta=1.0, threshold=20.0):\n",
    "def softplus(x, beta=1.0, threshold=20.0):\n    print('softplus', list(x.shape), tuple(x.shape), flush=True)\n"
    "    print('x'.join(map(str, x.shape)), file=sys.stderr, flush=True)\n").replace(
    "def rms_scale(x, gamma, epsilon=1e-6):\n",
    "def rms_scale(x, gamma, epsilon=1e-6):\n    print('rms_scale', list(x.shape), flush=True)\n").replace(
    "    return torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold).to(x.dtype).contiguous()",
    "    if tuple(x.shape) not in PUBLIC:\n        return torch.zeros_like(x)\n"
    "    return torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold).to(x.dtype).contiguous()",
).replace("    xf = x.double()", "    if tuple(x.shape) not in PUBLIC:\n        return torch.zeros_like(x)\n"
          "    xf = x.double()")
PUBLIC_NAMES = {"softplus[01]", "softplus[02]", "softplus[03]", "softplus[04]", "rms_scale[01]", "rms_scale[02]"}


def grade(pytester: pytest.Pytester, capsys, task_tree, package: str, *args: str) -> InnerRun:
    tasks = task_tree("submission")
    shutil.copytree(FIXTURES / "hidden" / "submission", pytester.path / "hidden")
    source = pytester.path / "sub"
    make_wheel(source / "dist", {"cann_bench/__init__.py": package})
    return run_inner(pytester, capsys, tasks, *BASE, f"--cann-source={source}", *args)


def board_of(root: Path) -> dict:
    return json.loads((root / "reports" / "leaderboard.json").read_text())


def hidden_cases(root: Path) -> list:
    """Every hidden case of the run, as the judge made them (same tree, same key)."""
    out = []
    for op_dir in sorted((root / "tasks").glob("level*/*")):
        task = load_operator(op_dir.resolve(), find_bench_root(op_dir.resolve()))
        out += [(task, h) for h in load_hidden(task, hidden_root=str(root / "hidden"), count=GENERATE,
                                               key=generation_key("", SEED))]
    return out


def secrets_of(root: Path) -> list[re.Pattern]:
    """What must never appear: each hidden case's real key, id, node name and shapes in the usual spellings."""
    patterns = []
    for task, h in hidden_cases(root):
        case = h.case
        if case.case_id is not None:
            patterns += [re.escape(task.case_key(case.case_id)),
                         rf"(case_id\W{{0,3}}|case |_|\[|#){case.case_id}(?![\d.])"]
        for shape in case.raw.get("input_shape") or []:
            if not shape or len(shape) < 2:
                dims = shape or []
                patterns += [re.escape(f"[{', '.join(map(str, dims))}]"), re.escape(f"({dims[0]},)")] if dims else []
                continue
            for sep in (", ", ",", "x", " x "):
                patterns.append(rf"(?<![\d.]){re.escape(sep.join(map(str, shape)))}(?![\d.])")
        note = str(case.raw.get("note") or "")
        if note:
            patterns.append(re.escape(note))
    return [re.compile(p) for p in patterns]


def assert_sealed(run: InnerRun, root: Path) -> None:
    texts = {"terminal": run.text}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_relative_to(root / "tasks")
                       and not p.is_relative_to(root / "hidden") and not p.is_relative_to(root / "sub")):
        texts[str(path.relative_to(root))] = path.read_text(errors="replace")
    assert any(name.startswith("reports/logs") for name in texts), sorted(texts)
    patterns = secrets_of(root)
    assert len(patterns) > 20
    for name, text in texts.items():
        for pattern in patterns:
            found = pattern.search(text)
            context = text[max(0, found.start() - 80):found.end() + 80] if found else ""
            assert found is None, f"{name} shows {found.group(0)!r} of a hidden case: ...{context}..."


def test_an_honest_submission_scores_on_both_splits(pytester, capsys, task_tree):
    run = grade(pytester, capsys, task_tree, HONEST, "--cann-no-perf")
    board = board_of(pytester.path)
    hidden = {n: c for n, c in run.cases.items() if n.startswith("hidden-")}
    assert PUBLIC_NAMES <= set(run.cases)
    assert len(hidden) == 3 + GENERATE  # names repeat across operators: softplus has 3 written, rms_scale 1
    cases = [c for op in board["operators"] for c in op["cases"]]
    assert {c["split"] for c in cases} == {"public", "hidden"}
    assert all(c["status"] == "passed" for c in cases), [(c["key"], c["status"], c["message"]) for c in cases]
    splits = board["splits"]
    assert splits["hidden_cases"] == 4 + 2 * GENERATE - splits["dropped"] and splits["not_ranked"] == []
    assert splits["public_score"] == pytest.approx(100.0) and splits["hidden_score"] == pytest.approx(100.0)
    assert splits["combined_score"] == pytest.approx(board["total_score"]) == pytest.approx(100.0)
    assert splits["function_rate_gap"] == pytest.approx(0.0)
    for op in board["operators"]:
        assert op["splits"]["ranked"] and op["status"] == "passed"
        assert op["splits"]["hidden"]["cases_passed"] >= 1
    assert "public 100.0 · hidden 100.0 · combined 100.0" in run.text


def test_a_submission_fitted_to_the_public_shapes_is_not_ranked_and_nothing_leaks(pytester, capsys, task_tree):
    pytest.importorskip("pytest_html")
    run = grade(pytester, capsys, task_tree, FITTED, "-n", "2", "--cann-repeat=2", "--cann-warmup=0",
                "--junitxml=junit.xml", "-o", "cann_markdown=summary.md", "--html=report.html",
                "-o", "cann_eval_report=eval.json", "-rA")
    board = board_of(pytester.path)
    for name in PUBLIC_NAMES:
        assert run.cases[name].cann["status"] == "passed", (name, run.cases[name].longrepr)
    hidden = [c for op in board["operators"] for c in op["cases"] if c["split"] == "hidden"]
    assert hidden and all(c["status"] == "failed" for c in hidden)
    assert all(c["message"] == f"{c['key'].rpartition('#')[2]}: failed ({c['failure_type']})" for c in hidden)
    for op in board["operators"]:
        assert op["status"] == "not_ranked" and op["not_ranked_reason"] == "fails held-out cases"
        assert op["score"] == 0.0 and op["splits"]["combined"]["ungated_score"] > 0
        assert op["splits"]["public"]["cases_passed"] == op["splits"]["public"]["cases_total"]
        assert op["splits"]["function_rate_gap"] == pytest.approx(1.0)
    assert board["total_score"] == 0.0 and board["splits"]["public_score"] > 50
    assert "not ranked (fails held-out cases): level1/softplus, level2/rms_scale" in run.text
    summary = (pytester.path / "summary.md").read_text()
    assert "### Public and hidden splits" in summary and "not ranked: fails held-out cases" in summary
    suite = ET.parse(pytester.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iter("property") if p.get("name", "").startswith("cann_")
             and p.get("name") in ("cann_public_score", "cann_hidden_score", "cann_combined_score")}
    assert float(props["cann_public_score"]) > 50 and float(props["cann_combined_score"]) == 0.0
    names = {tc.get("name") for tc in suite.iter("testcase")}
    assert {n for n in names if "hidden" in n} == {f"hidden-{i:02d}" for i in range(1, 4 + GENERATE)}
    logs = "".join(p.read_text() for p in (pytester.path / "reports" / "logs").rglob("*.log"))
    assert "softplus [64, 33] (64, 33)" in logs  # public calls are logged as ever: the search below can see prints
    assert_sealed(run, pytester.path)


def test_a_hidden_id_that_clashes_with_a_public_one_is_refused(pytester, capsys, task_tree):
    tasks = task_tree("submission")
    hidden = pytester.path / "hidden" / "level1" / "softplus"
    hidden.mkdir(parents=True)
    (hidden / "cases.yaml").write_text(
        "cases:\n- {operator: Softplus, case_id: 2, input_shape: [[5, 5]], dtype: [float32], attrs: {}}\n")
    run = run_inner(pytester, capsys, tasks, "--cann-tasks=tasks", "-p", "no:cacheprovider",
                    "--cann-hidden-cases=hidden", "--collect-only")
    assert run.ret != 0
    failure = "\n".join(run.collect_failures)
    assert f"hidden case file {hidden / 'cases.yaml'}: case_id 2 also in the public" in failure
    assert "[5, 5]" not in run.text


def test_hidden_node_ids_are_opaque(pytester, capsys, task_tree):
    tasks = task_tree("submission")
    shutil.copytree(FIXTURES / "hidden" / "submission", pytester.path / "hidden")
    run = run_inner(pytester, capsys, tasks, *BASE, "--collect-only", "-q")
    ids = [line for line in run.text.splitlines() if "::" in line]
    hidden = [line for line in ids if "hidden-" in line]
    assert len(hidden) == 4 + 2 * GENERATE
    assert all(re.fullmatch(r"tasks/level\d/\w+/cases\.yaml::hidden-\d\d", line) for line in hidden), hidden
    assert "1001" not in run.text and "48, 71" not in run.text


def test_a_submission_reading_the_hidden_tree_is_refused(pytester, capsys, task_tree):
    """The hidden tree is a protected path of every candidate worker (the sandbox will hide it as well)."""
    target = pytester.path / "hidden" / "level1" / "softplus" / "cases.yaml"
    reader = HONEST.replace("def softplus(x, beta=1.0, threshold=20.0):\n",
                            f"def softplus(x, beta=1.0, threshold=20.0):\n    open({str(target)!r}).read()\n")
    run = grade(pytester, capsys, task_tree, reader, "--cann-no-perf", "--cann-hidden-generate=0", "-k", "softplus")
    statuses = {name: (c.cann or {}).get("failure_type") for name, c in run.cases.items()}
    assert statuses and set(statuses.values()) == {"forbidden_access"}, statuses

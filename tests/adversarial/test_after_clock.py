"""Work after the clock stops: a kernel that leaves its computing to the moment the grader reads or frees its
outputs. The outputs are right, so only where they live and when the window closes can stop it.

- memory of the submission's own behind its outputs (``from_blob``), filled on first touch by a fault handler or
  released by a deleter that does work: refused by the output contract (``foreign_storage``);
- torch-allocated outputs protected so that the grader's copy faults into a handler installed at import: the
  handler is dropped once the import is over and no new one may be set (``containment``), so the page faults kill
  the worker;
- work in a finalizer when the result is dropped: inside the timed window, for the candidate and the baseline.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from inner import make_wheel, run_inner

REPO = Path(__file__).resolve().parents[2]
CPP = Path(__file__).parent / "cpp"
CASES = {
    "softplus": ("Softplus", "{beta: 1.0}"),
    "leaky_relu": ("LeakyRelu", "{negative_slope: 0.1}"),
    "silu": ("Silu", "{}"),
}


def float32_tree(root: Path, names: tuple[str, ...]) -> Path:
    """The bundled operators ``names`` with two float32 cases each (1 Mi and 2 Mi elements)."""
    tasks = root / "tasks"
    for name in names:
        op = tasks / "level1" / name
        shutil.copytree(REPO / "tasks" / "level1" / name, op)
        title, attrs = CASES[name]
        (op / "cases.yaml").write_text("cases:\n" + "".join(
            f"- {{operator: {title}, case_id: {i}, input_shape: [{shape}], dtype: [float32], attrs: {attrs}, "
            "value_range: [-4, 4]}\n" for i, shape in enumerate(("[1024, 1024]", "[2048, 1024]"), 1)))
    return tasks


def board(pytester) -> dict:
    return json.loads((Path(pytester.path) / "reports" / "leaderboard.json").read_text())


def test_outputs_computed_after_the_call_score_nothing(pytester, capsys, prebuilt_source):
    """With the guard off, so that these layers are shown to hold on their own: under ``block`` the symbol
    allowlist refuses the library first (``at::from_blob`` is not an import a kernel library may make)."""
    tasks = float32_tree(Path(pytester.path), tuple(CASES))
    run = run_inner(pytester, capsys, tasks, f"--cann-tasks={tasks}", "-p", "no:cacheprovider",
                    "--cann-golden-cache=off", "--cann-repeat=3", "--cann-warmup=1", "--cann-case-timeout=120",
                    f"--cann-source={prebuilt_source(CPP / 'after_clock')}")
    messages = {name: (c.cann or {}).get("message", "")[:300] for name, c in run.cases.items()}
    operators = {op["rel_path"]: op for op in board(pytester)["operators"]}
    for name in CASES:
        op = operators[f"level1/{name}"]
        assert op["score"] == 0 and op["cases_passed"] == 0, (name, op, messages)
    for name, case in run.cases.items():
        status = (case.cann or {}).get("status")
        assert status != "passed", (name, messages[name])
        if name.startswith(("softplus", "silu")):  # memory of its own: the output contract names it
            assert "not allocated by torch" in messages[name], (name, messages[name])
        else:  # torch's memory, protected: the fault has no handler any more
            assert (case.cann or {}).get("failure_type") == "candidate_crashed", (name, status, messages[name])


FINALIZER = '''"""Softplus whose result, once dropped, runs a finalizer that sleeps 40 ms."""

import time
import weakref

import torch


def softplus(x, beta=1.0, threshold=20.0):
    y = torch.nn.functional.softplus(x, beta, threshold)
    weakref.finalize(y, time.sleep, 0.04)
    return y
'''


def test_work_when_the_result_is_dropped_is_timed(pytester, capsys):
    """Nothing refuses a finalizer: the window closes after the result is dropped, so its 40 ms are the call's."""
    tasks = float32_tree(Path(pytester.path), ("softplus",))
    source = Path(pytester.path) / "sub"
    make_wheel(source / "dist", {"cann_bench/__init__.py": FINALIZER})
    run = run_inner(pytester, capsys, tasks, f"--cann-tasks={tasks}", "-p", "no:cacheprovider",
                    "--cann-golden-cache=off", "--cann-repeat=3", "--cann-warmup=1", f"--cann-source={source}")
    journal = Path(pytester.path) / "reports" / "results.jsonl"
    results = [json.loads(line)["outcome"] for line in journal.read_text().splitlines()]
    timed = [r for r in results if (r.get("timing") or {}).get("t_cand_us")]
    assert timed, [(r.get("status"), r.get("message", "")[:200]) for r in results]
    for r in timed:
        assert r["timing"]["t_cand_us"] >= 40_000, r["timing"]
    assert all(c.cann["status"] == "passed" for c in run.cases.values())

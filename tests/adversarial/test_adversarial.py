"""The adversarial suite: every attack scores 0 with the failure it deserves; honest submissions score in full.

Each attack runs in its own inner session (one submission per session), timed like a real run but with few
calls, so both the correctness and the timing paths are attacked. The honest controls are graded the same
way: the Python one with the guard off (like the attacks on other defences), the C++ example with the
guard on (its kernels are its own loops).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from attacks import ATTACKS, CACHE_PRELUDE, HONEST
from inner import RAISED_T_HW_BYTES, make_wheel, raise_t_hw, run_inner

ARGS = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-repeat=2",
        "--cann-warmup=1", "--cann-case-timeout=60")
SOFTPLUS = ("softplus[01]", "softplus[02]", "softplus[03]", "softplus[04]")
CPP = Path(__file__).parent / "cpp"


def python_submission(pytester, code: str) -> Path:
    source = Path(pytester.path) / "sub"
    make_wheel(source / "dist", {"cann_bench/__init__.py": CACHE_PRELUDE + code})
    return source


def grade(pytester, capsys, task_tree, source: Path, *extra: str, tasks: Path | None = None):
    tasks = tasks or task_tree("submission")
    run = run_inner(pytester, capsys, tasks, *ARGS, f"--cann-source={source}", *extra)
    board = json.loads((Path(pytester.path) / "reports" / "leaderboard.json").read_text())
    softplus = next(op for op in board["operators"] if op["rel_path"] == "level1/softplus")
    return run, softplus, board


def assert_scores_zero(run, softplus, expect) -> None:
    for name in SOFTPLUS:
        case = run.cases[name]
        assert case.outcome != "passed", (name, case.cann)
        assert case.cann["failure_type"] in expect, (name, case.cann["failure_type"], case.cann["message"])
    # Nothing for function or performance. The official formula keeps the compile/runtime part for a pure
    # precision failure (the kernel ran and returned a well-formed tensor); every other failure loses it too.
    assert softplus["cases_passed"] == 0 and softplus["function_score"] == 0 and softplus["performance_score"] == 0
    precision_only = sum(run.cases[name].cann["failure_type"] == "precision_mismatch" for name in SOFTPLUS)
    assert softplus["score"] == pytest.approx(20 * precision_only / len(SOFTPLUS)), softplus


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_scores_zero(attack, pytester, capsys, task_tree):
    tasks = task_tree("submission")
    reports = Path(pytester.path) / "reports"
    code = attack.code.replace("@TASKS@", str(tasks.resolve())).replace("@REPORTS@", str(reports.resolve()))
    run, softplus, _ = grade(pytester, capsys, task_tree, python_submission(pytester, code),
                             f"--cann-guard={attack.guard}", tasks=tasks)
    if attack.per_operator:  # caught where the evidence suffices; the operator then scores 0 as a whole
        assert any(run.cases[n].cann["failure_type"] in attack.expect for n in SOFTPLUS), run.statuses()
        assert softplus["score"] == 0 and softplus["status"] in attack.expect, softplus
    else:
        assert_scores_zero(run, softplus, attack.expect)
    journal = reports / "results.jsonl"
    assert all(json.loads(line).get("run") for line in journal.read_text().splitlines()), "forged journal lines"


@pytest.mark.parametrize("name, expect", [("dispatch_by_name", {"builtin_compute"}),
                                          ("direct_kernel", {"builtin_compute"})])
def test_cpp_delegation_scores_zero(name, expect, pytester, capsys, task_tree, prebuilt_source):
    run, softplus, board = grade(pytester, capsys, task_tree, prebuilt_source(CPP / name), "--cann-guard=block")
    assert_scores_zero(run, softplus, expect)
    if name == "direct_kernel":  # found in the shared object before anything ran
        assert any("at::cpu::softplus" in p for p in board["submission"]["scan"]["symbols"]["problems"])
        assert "imports at::cpu::softplus" in run.cases["softplus[01]"].cann["message"]


def test_cpp_delegation_is_only_flagged_in_warn_mode(pytester, capsys, task_tree, prebuilt_source):
    run, _softplus, _ = grade(pytester, capsys, task_tree, prebuilt_source(CPP / "dispatch_by_name"),
                             "--cann-guard=warn", "--cann-no-perf")
    assert all(run.cases[name].outcome == "passed" for name in SOFTPLUS)
    assert any("builtin_compute" in w and "aten::softplus" in w for w in run.cases["softplus[01]"].cann["warnings"])


def test_honest_python_submission_keeps_its_full_score(pytester, capsys, task_tree):
    run, softplus, _ = grade(pytester, capsys, task_tree, python_submission(pytester, HONEST), "--cann-guard=off")
    assert all(run.cases[name].outcome == "passed" for name in SOFTPLUS)
    assert softplus["compile_score"] == 20.0 and softplus["function_score"] == 30.0
    assert softplus["performance_score"] > 0


FAST_PROTO = """operator:
  name: Softplus
  attrs:
  - {name: beta, type: float, default: 1.0, required: false}
  - {name: threshold, type: float, default: 20.0, required: false}
  inputs:
  - {name: x, dtype: [float16, bfloat16, float32]}
  outputs:
  - {name: y, dtype: [float16, bfloat16, float32]}
  schema: softplus(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor y
  perf_model:
    bytes: "%s"
    flops: "x.numel"
"""


def test_a_time_below_the_hardware_limit_fails_and_scores_no_performance(pytester, capsys, task_tree):
    """Whatever makes a timed call return faster than the roofline allows (a lookup, a forged timer, a kernel
    that skips work), the case fails as implausible_time: no HAP above 1, no score above 100. Here the limit is
    raised instead (300 MB to move, with a baseline slow enough to respect it), so every call of a correct kernel
    is below it."""
    tasks = task_tree("submission")
    raise_t_hw(tasks / "level1" / "softplus", FAST_PROTO % RAISED_T_HW_BYTES)
    run, softplus, _ = grade(pytester, capsys, task_tree, python_submission(pytester, HONEST), "--cann-guard=off",
                             tasks=tasks)
    assert_scores_zero(run, softplus, {"implausible_time"})
    assert all(run.cases[name].cann["timing"]["t_cand_us"] < run.cases[name].cann["timing"]["t_hw_us"]
               for name in SOFTPLUS)


def test_honest_cpp_example_passes_every_defence(pytester, capsys, task_tree, prebuilt):
    """The bundled example, guard on: every case passes and scores (its ops are allocation plus its own loops)."""
    run, softplus, board = grade(pytester, capsys, task_tree, prebuilt("cpp_cpu"), "--cann-guard=block")
    assert all(case.outcome == "passed" for case in run.cases.values()), {
        k: c.cann.get("message") for k, c in run.cases.items() if c.outcome != "passed"}
    assert softplus["compile_score"] == 20.0 and softplus["function_score"] == 30.0
    assert softplus["performance_score"] > 0
    assert not board["submission"]["scan"]["symbols"]["problems"]
    assert not any(w.startswith("guard") for case in run.cases.values() for w in case.cann["warnings"])


def test_fingerprint_cache_of_known_inputs_gains_nothing(pytester, capsys, task_tree):
    """An agent records the answers for inputs it has seen (seed 0 is public), then replays them by fingerprint.
    With the seed given (a reproduced run) the table works, which proves it right; a graded session mixes in a
    secret, so the same table never hits."""
    tasks = task_tree("submission")
    table = Path(pytester.path) / "table.pt"  # outside the sandbox: the agent's own copy, kept between runs
    off = "--cann-sandbox=off"  # the secret seed is the defence tested here
    recorder = (f"import torch\nTABLE = {str(table)!r}\n\n\ndef softplus(x, beta=1.0, threshold=20.0):\n"
                f"    import os\n    y = {HONEST.split('return ', 1)[1].strip()}\n"
                "    seen = torch.load(TABLE) if os.path.exists(TABLE) else {}\n"
                "    seen[tuple(x.reshape(-1)[:16].float().tolist())] = y.clone()\n"
                "    torch.save(seen, TABLE)\n    return y\n")
    grade(pytester, capsys, task_tree, python_submission(pytester, recorder), "--cann-seed=0", "--cann-no-perf",
          off, tasks=tasks)
    assert table.is_file()
    replayer = (f"import torch\nSEEN = torch.load({str(table)!r})\n\n\ndef softplus(x, beta=1.0, threshold=20.0):\n"
                "    y = SEEN.get(tuple(x.reshape(-1)[:16].float().tolist()))\n"
                "    return y.clone() if y is not None else torch.zeros_like(x)\n")
    source = python_submission(pytester, replayer)
    run, _, _ = grade(pytester, capsys, task_tree, source, "--cann-seed=0", "--cann-no-perf", off, tasks=tasks)
    assert all(run.cases[name].outcome == "passed" for name in SOFTPLUS), "the table should replay seed 0"
    run, softplus, _ = grade(pytester, capsys, task_tree, source, "--cann-no-perf", off, tasks=tasks)
    assert_scores_zero(run, softplus, {"precision_mismatch"})

"""The task-quality gate: null candidates on every bundled case, and the null models themselves.

The bundled tree is gated one operator per test (so ``-n 2`` spreads them); a failure lists every weak or
broken case with the null model and the checker's reason. The synthetic operators below show that the gate
flags what it should: an operator whose output is all zeros, an identity, an unchecked second output, a
threshold no rounding can meet, a golden that raises.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from pytest_cannbench.judge import task_quality as tq
from pytest_cannbench.workers.limits import cpu_threads

BUNDLED = Path(__file__).resolve().parents[2] / "tasks"
OPERATORS = tq.operator_dirs(BUNDLED)


@pytest.fixture(scope="module", autouse=True)
def _threads():
    """Share the cores among xdist workers, as the plugin does (oversubscription is pathological)."""
    before = torch.get_num_threads()
    torch.set_num_threads(cpu_threads())
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------------------------
# the bundled tree


@pytest.mark.parametrize("op_dir", OPERATORS, ids=[d.relative_to(BUNDLED).as_posix() for d in OPERATORS])
def test_bundled_operator_cases_tell_wrong_from_right(op_dir: Path):
    result = tq.grade_operator(op_dir)
    problems = result.problems()
    assert result.cases or result.error, f"{op_dir}: no cases"
    assert not problems, (f"{len(problems)} weak or broken case(s) in {result.rel_path} "
                          f"(run `python -m pytest_cannbench.judge.task_quality tasks -k {op_dir.name}`):\n"
                          + "\n".join(problems))


def test_bundled_tree_is_not_empty():
    assert len(OPERATORS) >= 6


def _tasks_table():
    """scripts/tasks_table.py, imported by path (scripts/ is not a package)."""
    import importlib.util
    import sys

    if "_tasks_table" not in sys.modules:
        spec = importlib.util.spec_from_file_location("_tasks_table", BUNDLED.parent / "scripts" / "tasks_table.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["_tasks_table"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules["_tasks_table"]


def test_docs_table_matches_the_task_files():
    table = _tasks_table()
    doc = (BUNDLED.parent / "docs" / "tasks.md").read_text()
    expected = table.render(BUNDLED)
    assert table.embedded(doc) == expected, (
        "docs/tasks.md is out of date with tasks/: run `.venv/bin/python scripts/tasks_table.py --write "
        "docs/tasks.md`")
    assert expected.count("\n| `") == len(OPERATORS)


def test_tasks_table_script_writes_and_escapes(tmp_path: Path):
    table = _tasks_table()
    op = make_op(tmp_path / "tasks", "affine", "return x\n", cases=FLOATS)
    proto = op / "proto.yaml"
    proto.write_text(proto.read_text().replace("category: Test", "category: Test\n  formula: \"y = |x| * 2\""))
    doc = tmp_path / "doc.md"
    doc.write_text(f"# t\n\n{table.BEGIN}\nstale\n{table.END}\n\ntail\n")
    assert table.main([str(tmp_path / "tasks"), "--write", str(doc)]) == 0
    text = doc.read_text()
    assert "stale" not in text and text.endswith(f"{table.END}\n\ntail\n")
    assert "| `affine` (level1/affine) | L1 | Test | y = \\|x\\| * 2 | float16, bfloat16, float32 | 3 |" in text
    assert "1 operators (L1: 1), 3 cases." in table.embedded(text)


# --------------------------------------------------------------------------------------------
# synthetic operators

PROTO = """\
operator:
  name: {name}
  category: Test
  difficulty: L1
{extra}  inputs:
  - name: x
    dtype: [float16, bfloat16, float32, int32]
  outputs:
{outputs}  schema: {schema}
"""


def make_op(root: Path, name: str, body: str, *, cases: list[tuple[list, str, list]],
            outputs: tuple[str, ...] = ("y",), extra: str = "", output_yaml: str = "") -> Path:
    """``root/level1/<name>`` with a golden ``<name>(x)`` whose body is ``body``; cases (shape, dtype, range)."""
    op_dir = root / "level1" / name
    op_dir.mkdir(parents=True)
    outs = output_yaml or "".join(f"  - name: {o}\n    dtype: [float16, bfloat16, float32, int32]\n"
                                  for o in outputs)
    result = outputs[0] if len(outputs) == 1 else "(" + ", ".join(f"Tensor {o}" for o in outputs) + ")"
    result = f"Tensor {result}" if len(outputs) == 1 else result
    (op_dir / "proto.yaml").write_text(PROTO.format(name=name, extra=extra, outputs=outs,
                                                    schema=f"{name}(Tensor x) -> {result}"))
    lines = ["cases:"]
    for i, (shape, dtype, rng) in enumerate(cases, start=1):
        lines += [f"- operator: {name}", f"  case_id: {i}", f"  input_shape: [{shape}]", f"  dtype: [{dtype}]",
                  "  attrs: {}", f"  value_range: {rng}", f"  note: case {i}"]
    (op_dir / "cases.yaml").write_text("\n".join(lines) + "\n")
    (op_dir / "golden.py").write_text("import torch\n\n\n" + f"def {name}(x: torch.Tensor):\n"
                                      + textwrap.indent(textwrap.dedent(body), "    "))
    return op_dir


FLOATS = [([64, 33], "float32", [-3, 3]), ([257], "float16", [-3, 3]), ([8, 9], "bfloat16", [-3, 3])]


def models_wrong(result: tq.OperatorQuality) -> set[tuple[int, str, str]]:
    return {(c.case_id, v.model, v.target) for c in result.cases for v in c.verdicts if v.wrong}


def test_a_sound_operator_has_no_problems(tmp_path: Path):
    op = make_op(tmp_path / "tasks", "affine", "return (x * 2 + 1).contiguous()\n", cases=FLOATS)
    result = tq.grade_operator(op)
    assert result.problems() == []
    by_case = {c.case_id: c for c in result.cases}
    assert {by_case[1].summary(m) for m in tq.MUST_FAIL} == {"fail"}
    assert by_case[1].summary("ulp_noise") == "pass"
    assert by_case[1].summary("passthrough") == "fail"  # x has y's shape and dtype: returning it fails
    assert by_case[3].summary("bfloat16") == "n/a"  # a bfloat16 case is not less precise than itself
    assert all(c.seconds > 0 for c in result.cases)


def test_an_all_zeros_operator_is_weak_for_every_wrong_model(tmp_path: Path):
    op = make_op(tmp_path / "tasks", "nothing", "return torch.zeros_like(x)\n", cases=FLOATS[:1])
    (case,) = tq.grade_operator(op).cases
    assert case.weak and not case.broken
    assert {v.model for v in case.verdicts if v.wrong} == {"zeros", "permuted", "bfloat16"}
    lines = case.problems()
    assert any("weak: zeros [y] should fail but got pass" in line for line in lines)
    assert all(line.startswith("level1/nothing[01] (float32; case 1): weak:") for line in lines)
    assert "the null equals the golden (1 distinct value(s)" in next(v for v in case.verdicts if v.wrong).reason


def test_an_identity_operator_is_weak_for_passthrough(tmp_path: Path):
    op = make_op(tmp_path / "tasks", "same", "return x.clone()\n", cases=FLOATS)
    result = tq.grade_operator(op)
    assert models_wrong(result) == {(1, "passthrough", "y <- x"), (2, "passthrough", "y <- x"),
                                    (3, "passthrough", "y <- x")}
    assert "weak: passthrough [y <- x] should fail but got pass: the null equals the golden" in \
        result.cases[0].problems()[0]


def test_integer_cases_skip_rounding_models_and_keep_noise_exact(tmp_path: Path):
    op = make_op(tmp_path / "tasks", "twice", "return x * 2\n", cases=[([100], "int32", [-50, 50])])
    (case,) = tq.grade_operator(op).cases
    assert case.summary("bfloat16") == "n/a" and case.summary("ulp_noise") == "pass"
    assert not case.weak and not case.broken


def test_an_unchecked_second_output_is_named(tmp_path: Path):
    body = "return (x * 3).contiguous(), torch.ones_like(x)\n"
    op = make_op(tmp_path / "tasks", "pair", body, cases=FLOATS[:1], outputs=("y", "z"))
    (case,) = tq.grade_operator(op).cases
    wrong = {(v.model, v.target) for v in case.verdicts if v.wrong}
    assert wrong == {("permuted", "z"), ("bfloat16", "z")}  # ones survive both; y is checked by every model


def test_a_threshold_tighter_than_one_ulp_is_broken(tmp_path: Path):
    extra = "  precision_thresholds: {float32: 1.0e-12}\n"
    op = make_op(tmp_path / "tasks", "strict", "return (x * 2 + 1).contiguous()\n", cases=FLOATS[:1], extra=extra)
    (case,) = tq.grade_operator(op).cases
    assert case.broken and not case.weak
    (line,) = case.problems()
    assert "broken: ulp_noise [all] should pass but got fail" in line


def test_get_output_is_applied_to_the_nulls_as_to_a_candidate(tmp_path: Path):
    op = make_op(tmp_path / "tasks", "bag", "return (x * 2 + 1).contiguous()\n", cases=FLOATS[:1])
    with open(op / "golden.py", "a") as golden:
        golden.write("\n\ndef get_output(y):\n    return y.reshape(-1).sort().values\n")
    (case,) = tq.grade_operator(op).cases
    # sorted before comparison, the order of the output is free: only the permutation passes
    assert {(v.model, v.got) for v in case.verdicts if v.wrong} == {("permuted", "pass")}
    assert case.summary("ulp_noise") == "pass"


def test_a_golden_that_raises_is_broken_not_skipped(tmp_path: Path):
    op = make_op(tmp_path / "tasks", "boom", "raise RuntimeError('no golden today')\n", cases=FLOATS[:1])
    result = tq.grade_operator(op)
    (line,) = result.problems()
    assert "broken: golden error" in line and "no golden today" in line


def test_the_script_reports_and_exits_nonzero_on_problems(tmp_path: Path):
    root = tmp_path / "tasks"
    make_op(root, "affine", "return (x * 2 + 1).contiguous()\n", cases=FLOATS[:1])
    make_op(root, "same", "return x.clone()\n", cases=FLOATS[:1])
    lines: list[str] = []
    assert tq.main([str(root), "-k", "affine"], out=lines.append) == 0
    assert "level1/affine[01]" in lines[0] and "1 operators, 1 cases, 0 problem(s)" in lines[1]
    lines.clear()
    assert tq.main([str(root)], out=lines.append) == 1
    assert "passthrough" in lines[0] and "fail!" not in lines[0] and "pass!" in lines[0]
    assert any(line.startswith("level1/same[01]") and "weak: passthrough" in line for line in lines)


# --------------------------------------------------------------------------------------------
# the null models


@pytest.mark.parametrize("dtype, bits", [(torch.float16, torch.int16), (torch.bfloat16, torch.int16),
                                         (torch.float32, torch.int32), (torch.float64, torch.int64)])
def test_ulp_noise_is_one_step_of_the_dtype(dtype: torch.dtype, bits: torch.dtype):
    fi = torch.finfo(dtype)
    ref = torch.tensor([0.0, -0.0, 1.0, -1.0, 3.5, fi.max, -fi.max, fi.tiny, float("nan"), float("inf"),
                        -float("inf")] * 20, dtype=dtype)
    noisy = tq.ulp_noise(ref, torch.Generator().manual_seed(1))
    assert noisy.dtype == dtype and noisy.shape == ref.shape and noisy.is_contiguous()
    finite = torch.isfinite(ref)
    assert torch.isfinite(noisy[finite]).all()  # the largest finite value never becomes inf
    assert torch.equal(noisy[ref.isinf()], ref[ref.isinf()]) and noisy[ref.isnan()].isnan().all()
    a, b = ref.view(bits)[finite], noisy.view(bits)[finite]
    mask = torch.iinfo(bits).max
    assert torch.equal(a < 0, b < 0)  # the sign stays
    step = (b & mask) - (a & mask)
    assert bool((step.abs() == 1).all())  # exactly one unit in the last place, for every finite element
    assert bool((step == 1).any()) and bool((step == -1).any())  # both directions occur
    assert bool((step[(a & mask) == 0] == 1).all())  # zeros move away from zero, never to a NaN pattern


def test_ulp_noise_leaves_integers_alone():
    ref = torch.arange(-5, 5, dtype=torch.int32)
    assert torch.equal(tq.ulp_noise(ref, torch.Generator().manual_seed(0)), ref)


@pytest.mark.parametrize("n", [2, 3, 1000])
def test_permuted_keeps_the_elements_and_never_the_order(n: int):
    ref = torch.arange(n, dtype=torch.float32).reshape(-1, 1) if n > 2 else torch.tensor([1.0, 2.0])
    for seed in range(20):
        out = tq.permuted(ref, torch.Generator().manual_seed(seed))
        assert out.shape == ref.shape and not torch.equal(out, ref)
        assert torch.equal(out.reshape(-1).sort().values, ref.reshape(-1).sort().values)


def test_bfloat16_rounding_model():
    x = torch.tensor([1.0 + 2**-10, 3.0], dtype=torch.float32)
    assert tq.bfloat16_rounded(x).tolist() == [1.0, 3.0] and tq.bfloat16_rounded(x).dtype == torch.float32
    ints = torch.tensor([7], dtype=torch.int32)
    assert tq.bfloat16_rounded([x, ints, None])[1] is ints

"""The hidden-case generator and loader (issue 18): determinism under the key, and each constraint rule."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pytest_cannbench.taskformat.dirs import find_bench_root
from pytest_cannbench.taskformat.hidden import GENERATED, WRITTEN, HiddenCaseError, generation_key, load_hidden
from pytest_cannbench.taskformat.hidden_gen import generate
from pytest_cannbench.taskformat.spec import load_operator

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "tasks"


def task(rel: str, root: Path = TASKS):
    op_dir = (root / rel).resolve()
    return load_operator(op_dir, find_bench_root(op_dir))


def shapes(t, key: str, n: int = 20) -> list:
    return [h.case.raw for h in load_hidden(t, hidden_root=None, count=n, key=key)]


@pytest.mark.parametrize("rel", ["level1/softplus", "level3/batch_matmul", "level4/gru_cell"])
def test_same_seed_same_cases_two_secrets_differ(rel):
    t = task(rel)
    seeded = generation_key("", 7)
    assert shapes(t, seeded) == shapes(t, seeded)
    assert shapes(t, generation_key("", 8)) != shapes(t, seeded)
    one, two = generation_key("a" * 32, 0), generation_key("b" * 32, 0)
    assert shapes(t, one) == shapes(t, one) and shapes(t, one) != shapes(t, two)


def test_generated_cases_are_valid_new_and_cover_every_public_dtype():
    for op_dir in sorted(TASKS.glob("level*/*")):
        t = task(op_dir.relative_to(TASKS).as_posix())
        public = [c.raw for c in t.cases if c.error is None]
        hidden = load_hidden(t, hidden_root=None, count=20, key="seed=0")
        assert len(hidden) == 20 and all(h.origin == GENERATED for h in hidden)
        made = [h.case.raw for h in hidden if not h.dropped]
        assert len(made) >= 18, t.rel_path
        assert all(h.case.error is None for h in hidden if not h.dropped)
        ids = {c.case_id for c in t.cases}
        assert not ids & {h.case.case_id for h in hidden}
        assert not {str(r["input_shape"]) for r in made} & {str(r["input_shape"]) for r in public}, t.rel_path
        assert {str(r["dtype"]) for r in made} == {str(r["dtype"]) for r in public}, t.rel_path
        sizes = [sum(math.prod(s) for s in r["input_shape"] if s) for r in public]
        for r in made:
            assert min(sizes) <= sum(math.prod(s) for s in r["input_shape"] if s) <= max(sizes)
            assert r["attrs"] in [p["attrs"] for p in public] or t.rel_path.endswith(("group_norm", "row_top_k"))


def test_shared_dims_alignment_multiples_and_index_bounds_follow_the_public_cases():
    for raw in shapes(task("level3/batch_matmul"), "seed=3"):
        a, b = raw["input_shape"]
        assert a[0] == b[0] and a[2] == b[1]  # batch and K stay shared
    for raw in shapes(task("level4/gru_cell"), "seed=3"):
        x, h, w_ih, w_hh, b_ih, _ = raw["input_shape"]
        assert w_ih[0] == 3 * h[1] and w_ih[1] == x[1] and w_hh == [w_ih[0], h[1]] and b_ih == [w_ih[0]]
    for raw in shapes(task("level2/group_norm"), "seed=3"):
        assert raw["input_shape"][0][1] % raw["attrs"]["num_groups"] == 0  # groups keep dividing the channels
    for raw in shapes(task("level3/gather_rows"), "seed=3"):
        (rows, _), _ = raw["input_shape"]
        assert raw["value_range"][1][1] <= rows - 1  # indices stay in range
    for raw in shapes(task("level3/row_top_k"), "seed=3"):
        assert raw["input_shape"][0][raw["attrs"]["dim"]] >= raw["attrs"]["k"]


def test_a_constant_dimension_stays_and_a_single_value_case_cannot_be_renewed():
    public = [{"case_id": i, "input_shape": [[n, 128]], "dtype": ["float32"], "attrs": {}} for i, n in
              enumerate((16, 64, 256), 1)]
    made = generate(public, 10, key="k", rel_path="x", first_id=100)
    assert all(g.raw is not None and g.raw["input_shape"][0][1] == 128 for g in made)
    assert all(g.raw["input_shape"][0][0] in (16, 32, 64, 128, 256) for g in made if g.raw)  # powers of two
    assert [g.raw["case_id"] for g in made if g.raw] == list(range(100, 110))
    ones = [{"case_id": 1, "input_shape": [[1]], "dtype": ["float32"], "attrs": {}}]
    assert {g.dropped for g in generate(ones, 2, key="k", rel_path="x", first_id=2)} == {
        "no new shape within the constraints the public cases show"}


def test_written_hidden_cases_load_under_opaque_labels_before_generated_ones():
    fixture = ROOT / "tests" / "fixtures"
    t = task("level1/softplus", fixture / "submission")
    hidden = load_hidden(t, hidden_root=str(fixture / "hidden" / "submission"), count=2, key="seed=0")
    assert [h.label for h in hidden] == ["hidden-01", "hidden-02", "hidden-03", "hidden-04", "hidden-05"]
    assert [h.origin for h in hidden] == [WRITTEN] * 3 + [GENERATED] * 2
    assert [h.case.case_id for h in hidden] == [1001, 1002, 1003, 1004, 1005]


@pytest.mark.parametrize("text, fragment", [
    ("cases:\n- {operator: Softplus, case_id: 3, input_shape: [[5, 5]], dtype: [float32]}\n",
     "case_id 3 also in the public"),
    ("cases:\n- {operator: Softplus, case_id: 900, input_shape: [[5, -5]], dtype: [float32]}\n",
     "cases[0] invalid against"),
])
def test_a_bad_hidden_file_is_refused_naming_the_file_not_the_case(tmp_path, text, fragment):
    fixture = ROOT / "tests" / "fixtures"
    t = task("level1/softplus", fixture / "submission")
    path = tmp_path / "level1" / "softplus" / "cases.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(HiddenCaseError) as info:
        load_hidden(t, hidden_root=str(tmp_path), count=0, key="seed=0")
    message = str(info.value)
    assert fragment in message and str(path) in message
    assert "-5" not in message.replace(str(tmp_path), "")  # the case's values stay sealed (the path may hold "-5")


def test_the_bundled_hidden_tree_is_valid_and_stays_out_of_the_task_tree():
    hidden_root = ROOT / "tests" / "fixtures" / "hidden" / "tasks"
    files = sorted(hidden_root.rglob("cases.yaml"))
    assert len(files) >= 5
    for path in files:
        rel = path.parent.relative_to(hidden_root).as_posix()
        assert not (path.parent / "proto.yaml").exists()  # never an operator of its own
        hidden = load_hidden(task(rel), hidden_root=str(hidden_root), count=0, key="seed=0")
        assert len(hidden) == 5 and all(h.origin == WRITTEN and h.case.error is None for h in hidden)

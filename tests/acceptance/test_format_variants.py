"""End-to-end tests of the CANN Bench task-format variants, one fixture tree per variant.

Each test copies ``tests/fixtures/fmt_<variant>`` into a pytester sandbox as ``tasks/`` and runs an inner
pytest session on it, usually with ``--cann-source @golden`` (each golden, computed in the case's native dtype,
graded as the candidate). Goldens that need to show what they received append one JSON line per call to
the file named by ``CANNBENCH_FIXTURE_LOG`` (see the ``golden_log`` fixture); they run in the golden worker
subprocess, which inherits the environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_cannbench.nodes.items import CannTaskWarning
from pytest_cannbench.taskformat.dirs import find_bench_root, find_metadata_dir, iter_operator_dirs
from pytest_cannbench.taskformat.spec import load_operator

BASE_ARGS = ("--cann-source=@golden", "-p", "no:cacheprovider", "--cann-no-perf")


# ------------------------------------------------------------------------------------------------
# helpers


class GoldenLog:
    """The JSON lines the fixture goldens wrote, as dicts."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def calls(self, event: str, **match: Any) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if entry["event"] == event and all(entry.get(k) == v for k, v in match.items()):
                out.append(entry)
        return out

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


@pytest.fixture
def golden_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GoldenLog:
    path = tmp_path / "golden-calls.jsonl"
    monkeypatch.setenv("CANNBENCH_FIXTURE_LOG", str(path))
    return GoldenLog(path)


def run_cases(pytester: pytest.Pytester, *args: str) -> tuple[pytest.HookRecorder, dict[str, dict]]:
    """Inline self-check session over ``tasks/``; returns the recorder and ``report.cann`` by case key."""
    reprec = pytester.inline_run("--cann-tasks=tasks", *BASE_ARGS, *args)
    outcomes: dict[str, dict] = {}
    for report in reprec.getreports("pytest_runtest_logreport"):
        data = getattr(report, "cann", None)
        if data is not None:
            assert data["key"] not in outcomes, f"two verdicts for {data['key']}"
            outcomes[data["key"]] = data
    return reprec, outcomes


def task_warnings(reprec: pytest.HookRecorder) -> list[str]:
    return [str(call.warning_message.message) for call in reprec.getcalls("pytest_warning_recorded")
            if issubclass(call.warning_message.category, CannTaskWarning)]


def collected_ids(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if "::" in line]


def by_name(accuracy: list[dict]) -> dict[str, dict]:
    return {v["name"]: v for v in accuracy}


# ------------------------------------------------------------------------------------------------
# attrs: every type spelling, and attrs omitted so the golden's default applies


def test_attr_type_spellings_are_normalised_without_warnings() -> None:
    task = load_operator(Path(__file__).parents[1] / "fixtures/fmt_attrs/level1/scaled_add",
                         Path(__file__).parents[1] / "fixtures/fmt_attrs")
    types = {a.name: (a.raw_type, a.type) for a in task.spec.attrs}
    assert types == {
        "alpha": ("float", "float"), "steps": ("int64_t", "int"), "shape_hint": ("ListInt", "list_int"),
        "enable": ("BOOL", "bool"), "mode": ("String", "str"), "count": ("Int", "int"),
        "axes": ("int[]", "list_int"), "dims": ("listInt", "list_int"), "pads": ("List[int]", "list_int"),
        "clip": ("float", "float"), "beta": ("float", "float"), "negate": ("bool", "bool"),
    }
    assert task.warnings == []
    assert all(case.warnings == [] and case.error is None for case in task.cases)


def test_attrs_reach_the_golden_with_their_python_types_and_defaults(pytester, task_tree, golden_log) -> None:
    task_tree("fmt_attrs")
    reprec, cases = run_cases(pytester)
    reprec.assertoutcome(passed=3)
    assert task_warnings(reprec) == []
    assert {k: v["status"] for k, v in cases.items()} == {f"level1/scaled_add_{i}": "passed" for i in (1, 2, 3)}

    # the fp64 truth call of each case (the golden type-checks every attr and raises on a wrong type)
    truth = {c["attrs"]["steps"]: c["attrs"] for c in golden_log.calls("scaled_add", dtype="float64")}
    assert truth[1] == {"alpha": 1.5, "steps": 1, "shape_hint": [8, 16], "enable": True, "mode": "sum", "count": 3,
                        "axes": [0, 1], "dims": [-1], "pads": [0, 0, 1, 1], "clip": "inf", "beta": 0.5,
                        "negate": True}
    # case 2: beta and negate omitted -> golden defaults; clip given as the string "inf" -> float inf
    assert truth[2]["beta"] == 0.25 and truth[2]["negate"] is False
    assert truth[2]["clip"] == "inf" and truth[2]["pads"] == [] and truth[2]["mode"] == "max"
    # case 3: clip and beta omitted -> golden defaults (100.0, 0.25)
    assert truth[3]["clip"] == "100.0" and truth[3]["beta"] == 0.25 and truth[3]["count"] == -2
    # the native-dtype calls (same-precision reference and self-check candidate) get the same attrs
    native = golden_log.calls("scaled_add", dtype="float16")
    assert len(native) == 2 and all(c["attrs"] == truth[2] for c in native)


# ------------------------------------------------------------------------------------------------
# optional inputs: truncated input_shape and null placeholders


def test_truncated_shapes_and_null_placeholders_give_none(pytester, task_tree, golden_log) -> None:
    task_tree("fmt_optional")
    reprec, cases = run_cases(pytester)
    reprec.assertoutcome(passed=4)
    assert all(c["status"] == "passed" for c in cases.values())
    seen = {c["value"]: c for c in golden_log.calls("masked_fill_opt") if c["x"] != "float64"}
    # case 1: only x given, value attr 1.0
    assert seen[1.0]["given"] == {"mask": None, "fill": None, "bias": None}
    # case 2: input_shape stops after mask
    assert seen[-5.0]["given"] == {"mask": ["bool", [8, 16]], "fill": None, "bias": None}
    # case 3: null shape + null dtype placeholders for mask and fill; bias present with its own range
    assert seen[0.0]["given"] == {"mask": None, "fill": None, "bias": ["float32", [16]]}
    assert seen[0.0]["bias_min"] >= 2.0
    # case 4: bias truncated away, the others in float16 (mask keeps bool)
    assert seen[9.0]["given"] == {"mask": ["bool", [8, 16]], "fill": ["float16", [8, 16]], "bias": None}
    assert seen[9.0]["x"] == "float16"


# ------------------------------------------------------------------------------------------------
# YAML anchors, aliases and merge keys


def test_yaml_anchors_aliases_and_merge_keys_are_resolved(pytester, task_tree, golden_log) -> None:
    task_tree("fmt_anchors")
    reprec, cases = run_cases(pytester)
    reprec.assertoutcome(passed=3)
    assert task_warnings(reprec) == []  # merged cases carry all seven keys, nothing unknown
    native = golden_log.calls("clamp_range", dtype="float32") + golden_log.calls("clamp_range", dtype="float16")
    first = [c for c in native if c["dtype"] == "float32" and c["hi"] == 0.5]
    merged = [c for c in native if c["dtype"] == "float16"]
    aliased = [c for c in native if c["hi"] == 1.5]
    assert first and merged and aliased
    assert {c["lo"] for c in first + merged + aliased} == {-0.5}
    assert {tuple(c["shape"]) for c in first + merged + aliased} == {(32, 16)}
    assert all(-2 <= c["x_min"] and c["x_max"] <= 2 for c in native)
    # case 3 repeats case 1's anchored fields, but its own case key seeds different inputs
    assert first[0]["x_min"] != aliased[0]["x_min"]
    assert cases["level2/clamp_range_2"]["accuracy"][0]["dtype"] == "float16"


# ------------------------------------------------------------------------------------------------
# TensorList input and output


def test_tensorlist_input_and_flattened_tensorlist_output(pytester, task_tree, golden_log) -> None:
    task_tree("fmt_tensorlist")
    reprec, cases = run_cases(pytester)
    reprec.assertoutcome(passed=2)
    first = cases["level2/foreach_affine_1"]["accuracy"]
    assert [(v["name"], v["dtype"], v["passed"]) for v in first] == [
        ("ys[0]", "float32", True), ("ys[1]", "float16", True), ("ys[2]", "float32", True)]
    assert [v["name"] for v in cases["level2/foreach_affine_2"]["accuracy"]] == ["ys[0]", "ys[1]"]

    native = [c for c in golden_log.calls("foreach_affine", scale=2.0) if c["elements"][1]["dtype"] == "float16"]
    assert len(native) == 2  # same-precision reference and self-check candidate
    elements = native[0]["elements"]
    assert [e["shape"] for e in elements] == [[4, 8], [16], [2, 3, 4]]
    assert [e["dtype"] for e in elements] == ["float32", "float16", "float32"]
    for element, (lo, hi) in zip(elements, [(-1, 1), (10, 20), (100, 200)]):  # nested per-element ranges
        assert lo <= element["min"] and element["max"] <= hi
    # case 2: a flat [0.5, 1] pair for the list applies to every element (the default compat "fixed"; the
    # official generator would drop it, see test_inputs.py); w is [0, 0]
    call2 = golden_log.calls("foreach_affine", scale=1.0)[0]
    assert all(e["min"] >= 0.5 and e["max"] <= 1 for e in call2["elements"])
    assert call2["w_min"] == call2["w_max"] == 0.0


# ------------------------------------------------------------------------------------------------
# dtype shorthand and a bare input_shape


def test_dtype_shorthand_and_bare_input_shape(pytester, task_tree, golden_log) -> None:
    task_tree("fmt_shorthand")
    reprec, cases = run_cases(pytester)
    reprec.assertoutcome(passed=3)
    calls = [c["inputs"] for c in golden_log.calls("mul_add") if c["inputs"][0][0] != "float64"]
    # [float16] expands to every input
    assert [["float16", [16, 32]]] * 3 in calls
    # [64, 32] is one shape, i.e. only the first input
    assert [["float16", [64, 32]], None, None] in calls
    # a bare dtype string
    assert [["bfloat16", [8, 8]], ["bfloat16", [8, 8]], None] in calls
    assert [cases[f"level1/mul_add_{i}"]["accuracy"][0]["dtype"] for i in (1, 2, 3)] == [
        "float16", "float16", "bfloat16"]
    warnings = task_warnings(reprec)
    assert len(warnings) == 1 and "case_id 2: input_shape is a bare shape" in warnings[0]


# ------------------------------------------------------------------------------------------------
# value_range forms and NaN/Inf inputs


def test_every_value_range_form(pytester, task_tree, golden_log) -> None:
    task_tree("fmt_value_range")
    reprec, cases = run_cases(pytester)
    reprec.assertoutcome(passed=6)
    native = {}
    for call in golden_log.calls("nan_guard"):
        if call["inputs"][0]["dtype"] == "float32":
            native.setdefault(call["tag"], call["inputs"])

    def finite_in(stats: dict, lo: float, hi: float) -> bool:
        clean = stats["nan"] == stats["posinf"] == stats["neginf"] == 0
        return clean and lo <= stats["min"] and stats["max"] <= hi

    def inf_laden(stats: dict) -> bool:  # first numel//20 elements -inf, last as many +inf, base in [-1, 1)
        n = max(1, stats["numel"] // 20)
        return (stats["neginf"] == stats["posinf"] == n and stats["first"] == "-inf" and stats["last"] == "inf"
                and stats["nan"] == 0 and -1 <= stats["min"] and stats["max"] < 1)

    def nan_laden(stats: dict) -> bool:  # about half NaN, the rest uniform in [-1, 1)
        return (0.25 * stats["numel"] < stats["nan"] < 0.75 * stats["numel"] and stats["posinf"] == 0
                and stats["neginf"] == 0 and -1 <= stats["min"] and stats["max"] < 1)

    def zeros(stats: dict) -> bool:
        return finite_in(stats, 0, 0)

    a, b, c, d = native[1]  # flat pair broadcast to every input
    assert all(finite_in(s, -2, 2) for s in (a, b, c, d))
    a, b, c, d = native[2]  # one pair per input
    assert finite_in(a, -1, 1) and finite_in(b, 2, 3) and finite_in(c, 4, 5) and finite_in(d, 6, 7)
    a, b, c, d = native[3]  # fewer entries than inputs: the last one repeats
    assert finite_in(a, -1, 1) and finite_in(b, 10, 11) and finite_in(c, 10, 11) and finite_in(d, 10, 11)
    a, b, c, d = native[4]  # null entry -> float default [0, 1); [0, 0] -> zeros
    assert finite_in(a, -1, 1) and finite_in(b, 0, 1) and zeros(c) and finite_in(d, 1, 2)
    a, b, c, d = native[5]  # YAML .nan / -.inf / .inf; [0.1, .inf] is inf-laden too (finite bound ignored)
    assert nan_laden(a) and inf_laden(b) and inf_laden(c) and finite_in(d, -1, 1)
    a, b, c, d = native[6]  # the same as strings
    assert nan_laden(a) and inf_laden(b) and inf_laden(c) and zeros(d)

    for tag in (5, 6):
        outputs = by_name(cases[f"level1/nan_guard_{tag}"]["accuracy"])
        assert outputs["y"]["passed"] and outputs["y"]["nan_count"] == 0 and outputs["y"]["inf_count"] == 0
        assert outputs["z"]["passed"] and outputs["z"]["nan_count"] > 0 and outputs["z"]["inf_count"] > 0


# ------------------------------------------------------------------------------------------------
# precision_thresholds


def test_precision_thresholds_override_decides_the_verdict(pytester, task_tree) -> None:
    task_tree("fmt_thresholds")
    reprec, cases = run_cases(pytester)
    reprec.assertoutcome(passed=2, failed=2)
    # same golden, same cases: the native-dtype golden (rounded through bfloat16) against an exact reference
    for dtype, case_id, override, default in (("float32", 1, 0.01, 2**-13), ("float16", 2, 0.05, 2**-10)):
        relaxed = cases[f"level2/coarse_scale_{case_id}"]
        strict = cases[f"level2/coarse_scale_strict_{case_id}"]
        assert relaxed["status"] == "passed"
        assert strict["status"] == "failed" and strict["failure_type"] == "precision_mismatch"
        (r,), (s,) = relaxed["accuracy"], strict["accuracy"]
        assert r["dtype"] == s["dtype"] == dtype
        assert r["threshold"] == pytest.approx(override) and s["threshold"] == pytest.approx(default)
        # the same golden error (different inputs: the case keys differ) is over the default, under the override
        assert default < r["mere"] < override and default < s["mere"] < override


# ------------------------------------------------------------------------------------------------
# compare: false and index_gather


def test_index_outputs_compare_false_and_index_gather(pytester, task_tree, golden_log) -> None:
    task_tree("fmt_index")
    reprec, cases = run_cases(pytester)
    reprec.assertoutcome(passed=5, failed=1)
    for key in ("level2/top2_select_1", "level2/top2_select_2"):
        outputs = by_name(cases[key]["accuracy"])
        assert cases[key]["status"] == "passed"
        assert outputs["values"]["compared"] is True and outputs["values"]["passed"]
        assert outputs["indices"]["compared"] is False and outputs["indices"]["rule"] == "not_compared"
    # case 1 is all ties: the candidate's indices differ from the golden's, and it still passes
    tied = {c["dtype"]: c["indices"] for c in golden_log.calls("top2_select", dim=1)}
    assert tied["float64"] != tied["float32"]

    assert all(cases[f"level2/arg_top_{i}"]["status"] == "passed" for i in (1, 2, 3))
    keepdim = {(c["dim"], c["keepdim"], tuple(c["shape"])) for c in golden_log.calls("arg_top")}
    assert keepdim == {(1, False, (6,)), (0, False, (8,)), (-1, True, (5, 1))}  # omitted keepdim -> False
    ties = {c["dtype"]: c["index"] for c in golden_log.calls("arg_top", dim=1)}
    assert ties["float64"] == [0] * 6 and ties["float32"] == [7] * 6

    # wrong indices are not compared (compare: false) but index_gather catches them
    bad = cases["level2/bad_top2_1"]
    assert bad["status"] == "failed" and bad["failure_type"] == "precision_mismatch"
    assert all(v["passed"] for v in bad["accuracy"])  # the value comparison alone would pass
    assert "index_gather[indices]: 8 of 8 indices do not point at the value in 'values'" in bad["message"]


# ------------------------------------------------------------------------------------------------
# hooks: get_input, get_output, <fn>_oracle, <fn>_bench


def test_golden_hooks(pytester, task_tree, golden_log) -> None:
    task_tree("fmt_hooks")
    floor = ("-o", "cann_golden_cache_min_free=0")  # the second run reads the cache, however full the disk is
    reprec, cases = run_cases(pytester, *floor)
    reprec.assertoutcome(passed=2)
    assert [cases[f"level3/box_area_{i}"]["status"] for i in (1, 2)] == ["passed", "passed"]

    # get_input: once per case, with the proto input names (generated tensors) and the case's attrs
    assert [c["kwargs"] for c in golden_log.calls("get_input")] == [
        {"boxes": [64, 4], "weights": [64], "scale": 2.0}, {"boxes": [16, 4], "weights": [16], "scale": 1.0}]
    for n in (64, 16):
        oracle = golden_log.calls("oracle", n=n)
        bench = golden_log.calls("bench", n=n)
        main = golden_log.calls("main", n=n)
        # the oracle is the fp64 truth, the bench hook the same-precision reference; main is only the candidate
        assert [c["dtype"] for c in oracle] == ["float64"]
        assert [c["dtype"] for c in bench] == ["float32"] and [c["dtype"] for c in main] == ["float32"]
        # everyone got get_input's well-formed boxes (uniform [-1, 1] inputs would not be)
        calls = oracle + bench + main
        assert all(c["well_formed"] for c in calls)
        assert len({(c["boxes_sum"], c["weights_sum"]) for c in calls}) == 1
    # get_output post-processes golden, native and candidate alike (main emits reversed areas natively)
    assert sorted(c["dtype"] for c in golden_log.calls("get_output")) == ["float32"] * 4 + ["float64"] * 2

    # second run: golden data from the cache, hooked inputs included; only the candidate is recomputed
    golden_log.clear()
    result = pytester.runpytest("--cann-tasks=tasks", *BASE_ARGS, *floor)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["golden outputs from cache: 2/2 cases"])
    assert golden_log.calls("get_input") == [] and golden_log.calls("oracle") == []
    main = golden_log.calls("main")
    assert sorted(c["n"] for c in main) == [16, 64] and all(c["well_formed"] for c in main)


# ------------------------------------------------------------------------------------------------
# annotation-driven binding


def test_tensors_bind_by_position_and_attrs_by_name(pytester, task_tree, golden_log) -> None:
    task_tree("fmt_binding")
    _reprec, cases = run_cases(pytester)
    assert {k: v["status"] for k, v in cases.items()} == {
        "level2/blend_list_1": "passed", "level2/blend_list_2": "passed", "level2/blend_list_3": "error"}
    calls = {c["mode"]: c for c in golden_log.calls("blend_list", dtype="float32")}
    # proto inputs x, others, bias -> golden params base, extras, bias (signature order, names differ);
    # `mode` (un-annotated, between tensor params) and `alpha` come by name
    assert calls["sum"] == {"event": "blend_list", "mode": "sum", "alpha": 0.25, "base": [4, 8],
                            "extras": [[4, 8]] * 3, "bias": [4, 8], "dtype": "float32"}
    assert calls["mean"] == {"event": "blend_list", "mode": "mean", "alpha": 0.5, "base": [2, 3],
                             "extras": [[2, 3]] * 2, "bias": None, "dtype": "float32"}
    missing = cases["level2/blend_list_3"]
    assert missing["status"] == "error" and missing["failure_type"] == "golden_error"
    assert "'mode' get no value" in missing["message"] and "case_id 3" in missing["message"]


# ------------------------------------------------------------------------------------------------
# golden function name: schema identifier, else name.lower()


def test_golden_function_name_comes_from_schema_else_lowercased_name(pytester, task_tree) -> None:
    root = task_tree("fmt_schema_name")
    assert load_operator(root / "level1/relu_shift", root).spec.function_name == "shifted_relu"
    assert load_operator(root / "level1/halve", root).spec.function_name == "halveit"
    # the decoys named after the directory (and name.lower() where a schema exists) raise if called
    reprec, cases = run_cases(pytester)
    reprec.assertoutcome(passed=3)
    assert set(cases) == {"level1/relu_shift_1", "level1/relu_shift_2", "level1/halve_1"}


# ------------------------------------------------------------------------------------------------
# bench root, metadata/ and the case key


def test_find_metadata_dir_walks_up(task_tree, tmp_path: Path) -> None:
    root = task_tree("fmt_metadata")
    op_dir = root / "level1/square_diff"
    assert find_metadata_dir(op_dir) == root / "metadata"
    assert find_metadata_dir(root / "level1") == root / "metadata"
    assert find_metadata_dir(root) == root / "metadata"
    assert find_metadata_dir(tmp_path) is None
    anchors = json.loads((find_metadata_dir(op_dir) / "910b2.json").read_text())
    rel_path = op_dir.relative_to(find_bench_root(op_dir)).as_posix()
    node = anchors
    for part in rel_path.split("/"):
        node = node[part]
    assert node["2"] == {"baseline_perf_us": 30.0, "t_hw_us": 3.0}


def _op(path: Path) -> Path:
    path.mkdir(parents=True)
    for name in ("proto.yaml", "cases.yaml", "golden.py"):
        (path / name).write_text("")
    return path


def test_find_bench_root_rules(tmp_path: Path) -> None:
    # nearest first: a suite with its own metadata/ below a far-away "tasks" keeps its own root
    (tmp_path / "a/tasks/suite/metadata").mkdir(parents=True)
    assert find_bench_root(_op(tmp_path / "a/tasks/suite/level1/op")) == tmp_path / "a/tasks/suite"
    # 1. an ancestor named tasks (the official rule)
    assert find_bench_root(_op(tmp_path / "a2/tasks/level1/op")) == tmp_path / "a2/tasks"
    assert find_bench_root(_op(tmp_path / "a3/tasks/op")) == tmp_path / "a3/tasks"
    # 2. else the nearest ancestor holding metadata/
    (tmp_path / "b/suite/metadata").mkdir(parents=True)
    assert find_bench_root(_op(tmp_path / "b/suite/level2/op")) == tmp_path / "b/suite"
    assert find_bench_root(_op(tmp_path / "b/suite/op")) == tmp_path / "b/suite"
    # 3. else the parent of a levelN directory
    assert find_bench_root(_op(tmp_path / "c/bench/level3/op")) == tmp_path / "c/bench"
    # 4. else the operator's parent (a flat suite)
    assert find_bench_root(_op(tmp_path / "d/flat/op")) == tmp_path / "d/flat"
    assert iter_operator_dirs(tmp_path / "c") == [tmp_path / "c/bench/level3/op"]


@pytest.mark.parametrize("dest", ["tasks", "suite"])
def test_case_key_does_not_depend_on_the_collected_path(pytester, task_tree, dest: str) -> None:
    task_tree("fmt_metadata", dest=dest)  # "suite" has no ancestor named tasks: metadata/ decides
    expected = [("level1/square_diff_1", "square_diff[01]"), ("level1/square_diff_2", "square_diff[02]")]
    for target in (dest, f"{dest}/level1", f"{dest}/level1/square_diff", f"{dest}/level1/square_diff/cases.yaml"):
        items, _ = pytester.inline_genitems(target, "-p", "no:cacheprovider")
        keys = [(dict(item.user_properties)["cann_case"], item.name) for item in items]
        assert keys == expected, target


# ------------------------------------------------------------------------------------------------
# cases.csv agreement


def test_cases_csv_agreement(pytester, task_tree) -> None:
    task_tree("fmt_csv")
    reprec = pytester.inline_run("--cann-tasks=tasks", "--collect-only", "-p", "no:cacheprovider")
    warnings = task_warnings(reprec)
    assert len(warnings) == 1, warnings
    (message,) = warnings
    assert "cases.csv disagrees with cases.yaml" in message
    assert "level1/csv_disagree/cases.csv" in message and "level1/csv_agree/" not in message
    assert "case_id 2: column 'value_range' is '[-1, 2]' but cases.yaml has [-1, 1]" in message


# ------------------------------------------------------------------------------------------------
# collection: node ids, selection, markers, xdist, --cann-tasks


@pytest.fixture
def mixed_tree(task_tree) -> Path:
    """level1/scaled_add (float32, float16), level1/mul_add (float16, bfloat16), level2/clamp_range."""
    for name in ("fmt_attrs", "fmt_shorthand", "fmt_anchors"):
        root = task_tree(name)
    return root


ALL_IDS = [f"tasks/level1/mul_add/cases.yaml::mul_add[0{i}]" for i in (1, 2, 3)] + [
    f"tasks/level1/scaled_add/cases.yaml::scaled_add[0{i}]" for i in (1, 2, 3)] + [
    f"tasks/level2/clamp_range/cases.yaml::clamp_range[0{i}]" for i in (1, 2, 3)]


def collect(pytester: pytest.Pytester, *args: str) -> list[str]:
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", *args)
    assert result.ret in (0, pytest.ExitCode.NO_TESTS_COLLECTED), result.stdout.str()
    return collected_ids(result)


def test_node_ids(pytester, mixed_tree) -> None:
    assert collect(pytester, "--cann-tasks=tasks") == ALL_IDS


def test_keyword_and_marker_selection(pytester, mixed_tree) -> None:
    assert collect(pytester, "--cann-tasks=tasks", "-k", "scaled_add") == ALL_IDS[3:6]
    assert collect(pytester, "--cann-tasks=tasks", "-k", "scaled_add and 02") == [ALL_IDS[4]]
    assert collect(pytester, "--cann-tasks=tasks", "-m", "level2") == ALL_IDS[6:]
    assert collect(pytester, "--cann-tasks=tasks", "-m", "level1 and cannbench") == ALL_IDS[:6]
    float16 = [ALL_IDS[0], ALL_IDS[1], ALL_IDS[4], ALL_IDS[7]]
    # -k matches keyword substrings, so "float16" alone also selects bfloat16 cases
    assert collect(pytester, "--cann-tasks=tasks", "-k", "float16 and not bfloat16") == float16
    assert collect(pytester, "--cann-tasks=tasks", "-k", "bfloat16") == [ALL_IDS[2]]
    assert set(float16) < set(collect(pytester, "--cann-tasks=tasks", "-k", "float16"))
    assert collect(pytester, "--cann-tasks=tasks", "-k", "Elementwise and level2") == ALL_IDS[6:]  # category


def test_markers_are_registered(pytester, mixed_tree) -> None:
    assert collect(pytester, "--cann-tasks=tasks", "--strict-markers", "-m", "level1") == ALL_IDS[:6]
    result = pytester.runpytest("--markers", "-p", "no:cacheprovider", "--cann-tasks=tasks")  # a cannbench run
    result.stdout.fnmatch_lines(["@pytest.mark.cannbench:*", *[f"@pytest.mark.level{n}:*" for n in range(1, 6)]])


def test_cann_tasks_is_used_only_without_paths(pytester, mixed_tree) -> None:
    assert collect(pytester, "--cann-tasks=tasks/level2") == ALL_IDS[6:]
    assert collect(pytester, "--cann-tasks=tasks/level2", "tasks/level1/mul_add") == ALL_IDS[:3]
    pytester.makeini("[pytest]\ncann_tasks = tasks/level1/scaled_add\n")
    assert collect(pytester) == ALL_IDS[3:6]
    assert collect(pytester, "tasks/level2") == ALL_IDS[6:]


def test_xdist_runs_every_case_once(pytester, mixed_tree) -> None:
    result = pytester.runpytest("--cann-tasks=tasks", *BASE_ARGS, "-n", "2")
    result.assert_outcomes(passed=9)
    result.stdout.fnmatch_lines(["*= cannbench =*", "3 operators, 9 cases: 9 passed"])


def test_without_self_check_cases_are_skipped(pytester, mixed_tree) -> None:
    result = pytester.runpytest("--cann-tasks=tasks", "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=9)
    result.stdout.fnmatch_lines(["3 operators, 9 cases: 9 skipped", "*no candidate to grade*"])

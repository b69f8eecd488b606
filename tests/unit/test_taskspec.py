"""Unit tests for the pure task-file parsers: taskspec, casescsv and taskdirs.

Every error test checks the three parts a task author needs: the file, the
field (``where``) and, where the parser offers one, the fix.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest

from pytest_cannbench.taskformat.casescsv import COLUMNS, compare_csv
from pytest_cannbench.taskformat.dirs import (
    find_bench_root,
    find_metadata_dir,
    is_operator_dir,
    iter_operator_dirs,
    looks_like_operator_dir,
)
from pytest_cannbench.taskformat.errors import TaskFormatError
from pytest_cannbench.taskformat.spec import (
    ATTR_TYPES,
    check_golden_source,
    load_operator,
    parse_cases,
    parse_proto,
)
from pytest_cannbench.taskformat.yaml_load import load_yaml


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


PROTO = """
operator:
  name: ScaleAdd
  category: Elementwise
  difficulty: L2
  schema: "scale_add(Tensor x, Tensor y, float alpha=1.0) -> Tensor z"
  attrs:
    - name: alpha
      type: float
      description: scale of y
      default: 1.0
  inputs:
    - name: x
      description: first
      dtype: [float16, float32]
    - name: y
      description: second
      dtype: float32
  outputs:
    - name: z
      description: x + alpha * y
      dtype: [float16, float32]
"""

GOLDEN = """
import torch


def scale_add(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    return x + alpha * y
"""


def proto_with(tmp_path: Path, text: str) -> Path:
    return write(tmp_path / "proto.yaml", text)


def spec_of(tmp_path: Path, text: str = PROTO):
    warnings: list[str] = []
    spec = parse_proto(proto_with(tmp_path, text), warnings)
    return spec, warnings


def format_error(call, *args) -> TaskFormatError:
    with pytest.raises(TaskFormatError) as info:
        call(*args)
    return info.value


# --------------------------------------------------------------------------------------------
# TaskFormatError


def test_task_format_error_message_has_path_where_problem_and_fix(tmp_path):
    exc = TaskFormatError(tmp_path / "proto.yaml", "operator.inputs[0]", "missing field 'dtype'", "add it")
    assert str(exc) == f"{tmp_path / 'proto.yaml'}: operator.inputs[0]: missing field 'dtype' (add it)"
    assert (exc.where, exc.problem, exc.fix) == ("operator.inputs[0]", "missing field 'dtype'", "add it")
    assert str(TaskFormatError(Path("p.yaml"), "", "bad")) == "p.yaml: bad"
    assert isinstance(exc, ValueError)


# --------------------------------------------------------------------------------------------
# proto.yaml


def test_parse_proto_valid(tmp_path):
    spec, warnings = spec_of(tmp_path)
    assert warnings == []
    assert (spec.name, spec.function_name, spec.category, spec.difficulty) == (
        "ScaleAdd", "scale_add", "Elementwise", "L2")
    assert spec.input_names == ["x", "y"]
    assert spec.output_names == ["z"]
    assert spec.inputs[0].dtypes == ("float16", "float32")
    assert spec.inputs[1].dtypes == ("float32",)  # a bare string is wrapped
    (alpha,) = spec.attrs
    assert (alpha.name, alpha.type, alpha.raw_type, alpha.has_default, alpha.default) == (
        "alpha", "float", "float", True, 1.0)
    assert spec.precision_thresholds == {}


def test_parse_proto_output_flags_and_thresholds(tmp_path):
    spec, _ = spec_of(tmp_path, """
        operator:
          name: TopK
          schema: "top_k(Tensor x, int k, int dim=-1) -> (Tensor values, Tensor indices)"
          precision_thresholds: {Float16: 0.01, float32: 0.005, bfloat16: 1}
          inputs:
            - {name: x, dtype: [float16]}
          outputs:
            - {name: values, dtype: [float16]}
            - name: indices
              dtype: [int64]
              compare: false
              index_gather: {input: x, dim_attr: dim, value_output: values}
        """)
    values, indices = spec.outputs
    assert values.compare is True and values.index_gather is None
    assert indices.compare is False
    assert indices.index_gather == {"input": "x", "dim_attr": "dim", "value_output": "values"}
    assert spec.precision_thresholds == {"float16": 0.01, "float32": 0.005, "bfloat16": 1.0}
    assert spec.attrs == ()


def test_function_name_falls_back_to_lower_case_name(tmp_path):
    spec, warnings = spec_of(tmp_path, """
        operator:
          name: SoftSign
          inputs: [{name: x, dtype: float32}]
          outputs: [{name: y, dtype: float32}]
        """)
    assert spec.function_name == "softsign" and warnings == []

    spec, warnings = spec_of(tmp_path, """
        operator:
          name: SoftSign
          schema: "returns a tensor"
          inputs: [{name: x, dtype: float32}]
          outputs: [{name: y, dtype: float32}]
        """)
    assert spec.function_name == "softsign"
    (warning,) = warnings
    assert "operator.schema" in warning and "using 'softsign'" in warning


@pytest.mark.parametrize("text, where, problem", [
    ("- just\n- a list\n", "", "top level must be a mapping with the key 'operator'"),
    ("op:\n  name: X\n", "", "top level must be a mapping with the key 'operator'"),
    ("operator: Exp\n", "", "top level must be a mapping with the key 'operator'"),
    ("operator:\n  category: X\n", "operator", "missing field 'name'"),
    ("operator:\n  name: '  '\n", "operator", "missing field 'name'"),
    ("operator:\n  name: X\n  schema: [x]\n", "operator.schema", "must be a string, got list"),
    ("operator:\n  name: X\n  inputs: {x: float32}\n  outputs: [{name: y, dtype: float32}]\n",
     "operator.inputs", "must be a list of mappings with 'name' and 'dtype'"),
    ("operator:\n  name: X\n  inputs: []\n  outputs: []\n",
     "operator.outputs", "must be a non-empty list of mappings"),
    ("operator:\n  name: X\n  inputs: [x]\n  outputs: [{name: y, dtype: float32}]\n",
     "operator.inputs[0]", "must be a mapping, got str"),
    ("operator:\n  name: X\n  inputs: [{name: x, dtype: float32}, {name: x, dtype: float32}]\n"
     "  outputs: [{name: y, dtype: float32}]\n", "operator.inputs[1]", "duplicate name 'x'"),
    ("operator:\n  name: X\n  inputs: [{name: x}]\n  outputs: [{name: y, dtype: float32}]\n",
     "operator.inputs[0] (x)", "missing field 'dtype'"),
    ("operator:\n  name: X\n  inputs: [{name: x, dtype: []}]\n  outputs: [{name: y, dtype: float32}]\n",
     "operator.inputs[0] (x)", "'dtype' must be a dtype name or a non-empty list, got []"),
    ("operator:\n  name: X\n  inputs: [{name: x, dtype: float32}]\n  outputs: [{name: y, dtype: [int33]}]\n",
     "operator.outputs[0] (y)", "unknown dtype 'int33'"),
    ("operator:\n  name: X\n  inputs: [{name: x, dtype: float32}]\n"
     "  outputs: [{name: y, dtype: int64, index_gather: {input: x, value_output: v}}]\n",
     "operator.outputs[0] (y).index_gather", "missing field 'dim_attr'"),
    ("operator:\n  name: X\n  inputs: [{name: x, dtype: float32}]\n  outputs: [{name: y, dtype: int64, "
     "index_gather: {input: x, dim_attr: d, value_output: v, value_reduce: amax}}]\n",
     "operator.outputs[0] (y).index_gather", "needs exactly one of 'value_output' and 'value_reduce'"),
    ("operator:\n  name: X\n  inputs: [{name: x, dtype: float32}]\n  outputs: [{name: y, dtype: int64, "
     "index_gather: {input: x, dim_attr: d, value_reduce: argmax}}]\n",
     "operator.outputs[0] (y).index_gather", "'value_reduce' must be amax or amin, got 'argmax'"),
    ("operator:\n  name: X\n  attrs: {alpha: 1}\n  inputs: [{name: x, dtype: float32}]\n"
     "  outputs: [{name: y, dtype: float32}]\n", "operator.attrs", "must be a list, got dict"),
    ("operator:\n  name: X\n  attrs: [{type: int}]\n  inputs: [{name: x, dtype: float32}]\n"
     "  outputs: [{name: y, dtype: float32}]\n", "operator.attrs[0]", "must be a mapping with a string 'name'"),
    ("operator:\n  name: X\n  precision_thresholds: [0.1]\n", "operator.precision_thresholds",
     "must be a mapping dtype -> threshold"),
    ("operator:\n  name: X\n  precision_thresholds: {float32: -0.1}\n",
     "operator.precision_thresholds.float32", "expected a known dtype mapped to a number >= 0"),
    ("operator:\n  name: X\n  precision_thresholds: {float32: true}\n",
     "operator.precision_thresholds.float32", "expected a known dtype mapped to a number >= 0"),
    ("operator:\n  name: X\n  precision_thresholds: {float99: 0.1}\n",
     "operator.precision_thresholds.float99", "expected a known dtype mapped to a number >= 0"),
])
def test_parse_proto_errors_name_file_and_field(tmp_path, text, where, problem):
    path = proto_with(tmp_path, text)
    exc = format_error(parse_proto, path, [])
    assert exc.path == path
    assert exc.where == where
    assert problem in exc.problem
    assert str(exc).startswith(f"{path}: ")


@pytest.mark.parametrize("field", ["name", "name: 3", "name: not an identifier"])
def test_input_without_valid_name_explains_the_fix(tmp_path, field):
    entry = "{dtype: float32}" if field == "name" else "{" + field + ", dtype: float32}"
    path = proto_with(tmp_path, f"operator:\n  name: X\n  inputs: [{{name: a, dtype: float32}}, {entry}]\n"
                                "  outputs: [{name: y, dtype: float32}]\n")
    exc = format_error(parse_proto, path, [])
    assert exc.where == "operator.inputs[1]"
    assert "missing or invalid field 'name'" in exc.problem
    assert exc.fix == "give every input and output a Python identifier as name"


def test_unknown_proto_dtype_lists_the_known_ones(tmp_path):
    path = proto_with(tmp_path, "operator:\n  name: X\n  inputs: [{name: x, dtype: [float32, float17]}]\n"
                                "  outputs: [{name: y, dtype: float32}]\n")
    exc = format_error(parse_proto, path, [])
    assert exc.where == "operator.inputs[0] (x)"
    assert exc.problem == "unknown dtype 'float17'"
    assert exc.fix.startswith("use one of ") and "bfloat16" in exc.fix and "int8" in exc.fix


def test_proto_dtype_names_ignore_case_but_take_no_aliases(tmp_path):
    spec, _ = spec_of(tmp_path, "operator:\n  name: X\n  inputs: [{name: x, dtype: [FLOAT16, BFloat16, float32]}]\n"
                                "  outputs: [{name: y, dtype: Float16}]\n")
    assert spec.inputs[0].dtypes == ("float16", "bfloat16", "float32")
    assert spec.outputs[0].dtypes == ("float16",)
    # an alias a case could not use is refused in the proto too
    path = proto_with(tmp_path, "operator:\n  name: X\n  inputs: [{name: x, dtype: [fp16]}]\n"
                                "  outputs: [{name: y, dtype: float16}]\n")
    exc = format_error(parse_proto, path, [])
    assert "unknown dtype 'fp16'" in exc.problem


def test_proto_yaml_syntax_error_names_line_and_column(tmp_path):
    path = proto_with(tmp_path, "operator:\n  name: X\n  inputs: [{name: x, dtype: float32}\n  outputs: []\n")
    exc = format_error(parse_proto, path, [])
    assert exc.where.startswith("line ") and ", column " in exc.where
    assert exc.problem.startswith("YAML syntax error: ")
    assert exc.fix == "fix the YAML syntax"


def test_unreadable_yaml_files(tmp_path):
    exc = format_error(load_yaml, tmp_path / "absent.yaml")
    assert "cannot read file" in exc.problem and exc.path == tmp_path / "absent.yaml"
    binary = tmp_path / "latin1.yaml"
    binary.write_bytes("name: caf\xe9\n".encode("latin-1"))
    exc = format_error(load_yaml, binary)
    assert "not UTF-8 text" in exc.problem and "byte 9" in exc.problem


# --------------------------------------------------------------------------------------------
# attr types


@pytest.mark.parametrize("raw, normal", [
    ("float", "float"), ("double", "float"), ("float32", "float"),
    ("int", "int"), ("Int", "int"), ("INT", "int"), ("int64", "int"), ("int64_t", "int"), ("int32_t", "int"),
    ("bool", "bool"), ("BOOL", "bool"), ("boolean", "bool"),
    ("string", "str"), ("String", "str"), ("str", "str"),
    ("ListInt", "list_int"), ("listInt", "list_int"), ("int[]", "list_int"), ("List[int]", "list_int"),
    ("list[int]", "list_int"), ("int_list", "list_int"), ("List [ int ]", "list_int"), ("ListInt64", "list_int"),
    ("ListFloat", "list_float"), ("list_float", "list_float"), ("float[]", "list_float"),
    ("ListBool", "list_bool"), ("bool[]", "list_bool"),
    ("Tensor", "tensor"),
])
def test_attr_types_are_normalised(tmp_path, raw, normal):
    spec, warnings = spec_of(tmp_path, f"""
        operator:
          name: X
          attrs:
            - name: a
              type: "{raw}"
          inputs: [{{name: x, dtype: float32}}]
          outputs: [{{name: y, dtype: float32}}]
        """)
    assert warnings == []
    assert spec.attrs[0].type == normal
    assert spec.attrs[0].raw_type == raw
    assert spec.attrs[0].has_default is False


def test_every_attr_type_normalises_to_a_small_vocabulary():
    assert set(ATTR_TYPES.values()) == {"float", "int", "bool", "str", "list_int", "list_float", "list_bool",
                                         "tensor"}
    assert all(key == key.lower().replace(" ", "") for key in ATTR_TYPES)


def test_unknown_attr_type_is_kept_with_a_warning(tmp_path):
    spec, warnings = spec_of(tmp_path, """
        operator:
          name: X
          attrs:
            - {name: shape, type: ListComplex, default: null}
            - {name: flag}
          inputs: [{name: x, dtype: float32}]
          outputs: [{name: y, dtype: float32}]
        """)
    shape, flag = spec.attrs
    assert (shape.type, shape.raw_type, shape.has_default, shape.default) == (
        "ListComplex", "ListComplex", True, None)
    assert flag.type == ""
    assert len(warnings) == 2
    assert f"{tmp_path / 'proto.yaml'}: operator.attrs[0] (shape): unknown attr type 'ListComplex'" in warnings[0]
    assert "operator.attrs[1] (flag): unknown attr type ''" in warnings[1]


# --------------------------------------------------------------------------------------------
# YAML 1.2 scalars


def test_yaml_12_floats_and_strings(tmp_path):
    data = load_yaml(write(tmp_path / "v.yaml", """
        exp_no_dot: 1e-06
        exp_upper: 2E+3
        exp_signed: -5e2
        exp_dot: 1.5e-3
        quoted: "1e-6"
        single_quoted: '3e2'
        plain_int: 12
        plain_float: 1.0
        inf: .inf
        ninf: -.inf
        nan: .nan
        string_inf: "inf"
        not_a_number: 1e-6x
        version: 1.0.0
        """))
    assert data["exp_no_dot"] == 1e-06 and isinstance(data["exp_no_dot"], float)
    assert data["exp_upper"] == 2000.0 and isinstance(data["exp_upper"], float)
    assert data["exp_signed"] == -500.0
    assert data["exp_dot"] == 1.5e-3
    assert data["quoted"] == "1e-6" and data["single_quoted"] == "3e2"
    assert data["plain_int"] == 12 and isinstance(data["plain_int"], int)
    assert data["plain_float"] == 1.0 and isinstance(data["plain_float"], float)
    assert data["inf"] == math.inf and data["ninf"] == -math.inf and math.isnan(data["nan"])
    assert data["string_inf"] == "inf"
    assert data["not_a_number"] == "1e-6x"
    assert data["version"] == "1.0.0"


def test_yaml_resolver_does_not_leak_into_pyyaml(tmp_path):
    import yaml

    load_yaml(write(tmp_path / "v.yaml", "a: 1e-06\n"))
    assert yaml.safe_load("a: 1e-06\n") == {"a": "1e-06"}  # PyYAML's own YAML 1.1 loader is untouched


def test_yaml_anchors_and_merge_keys(tmp_path):
    data = load_yaml(write(tmp_path / "cases.yaml", """
        shapes: &weights [[96, 64], [96, 32]]
        common: &common {dtype: [float32], value_range: [-0.1, 0.1]}
        cases:
          - case_id: 1
            input_shape: *weights
            <<: *common
          - case_id: 2
            input_shape: *weights
            <<: *common
            value_range: [-1, 1]
        """))
    first, second = data["cases"]
    assert first["input_shape"] == second["input_shape"] == [[96, 64], [96, 32]]
    assert first["dtype"] == ["float32"] and first["value_range"] == [-0.1, 0.1]
    assert second["value_range"] == [-1, 1]  # an explicit key wins over the merge


def test_yaml_rejects_python_tags(tmp_path):
    path = write(tmp_path / "evil.yaml", "x: !!python/object/apply:os.system ['true']\n")
    exc = format_error(load_yaml, path)
    assert exc.problem.startswith("YAML syntax error")


# --------------------------------------------------------------------------------------------
# golden.py


def test_check_golden_source_accepts_the_schema_function(tmp_path):
    spec, _ = spec_of(tmp_path)
    check_golden_source(write(tmp_path / "golden.py", GOLDEN), spec)


@pytest.mark.parametrize("source", [
    "def scaleadd(x, y, alpha=1.0):\n    return x + alpha * y\n",  # name.lower() fallback
    "from math import fsum as scale_add\n",
    "def _impl(x, y, alpha=1.0):\n    return x\n\nscale_add = _impl\n",
    "class scale_add:\n    pass\n",
    "async def scale_add(x, y):\n    return x\n",
])
def test_check_golden_source_finds_the_function_however_defined(tmp_path, source):
    spec, _ = spec_of(tmp_path)
    check_golden_source(write(tmp_path / "golden.py", source), spec)


def test_check_golden_source_missing_function(tmp_path):
    spec, _ = spec_of(tmp_path)
    path = write(tmp_path / "golden.py", "import torch\n\n\ndef scale_add_v2(x, y):\n    return x + y\n")
    exc = format_error(check_golden_source, path, spec)
    assert exc.path == path
    assert exc.problem == "defines no golden function 'scale_add' or 'scaleadd'"
    assert exc.fix == "name the golden after the identifier before '(' in proto.yaml's schema"


def test_check_golden_source_syntax_error_names_the_line(tmp_path):
    spec, _ = spec_of(tmp_path)
    path = write(tmp_path / "golden.py", "import torch\n\n\ndef scale_add(x, y:\n    return x\n")
    exc = format_error(check_golden_source, path, spec)
    assert exc.where == "line 4"
    assert exc.problem.startswith("Python syntax error: ")
    assert exc.fix == "fix the golden's syntax"


def test_check_golden_source_never_runs_the_golden(tmp_path):
    spec, _ = spec_of(tmp_path)
    marker = tmp_path / "ran"
    path = write(tmp_path / "golden.py", f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n"
                                         "def scale_add(x, y):\n    return x\n")
    check_golden_source(path, spec)
    assert not marker.exists()


def test_check_golden_source_unreadable(tmp_path):
    spec, _ = spec_of(tmp_path)
    exc = format_error(check_golden_source, tmp_path / "nope" / "golden.py", spec)
    assert "cannot read file" in exc.problem


# --------------------------------------------------------------------------------------------
# cases.yaml


def case_text(*cases: str) -> str:
    return "cases:\n" + "".join(textwrap.indent(textwrap.dedent(c).strip("\n"), "  ") + "\n" for c in cases)


GOOD = """
- operator: ScaleAdd
  case_id: {id}
  input_shape: [[2, 3], [2, 3]]
  dtype: [float16, float32]
  attrs: {{alpha: 0.5}}
  value_range: [-1, 1]
  note: S-tiny
"""


def good(case_id: int = 1) -> str:
    return GOOD.format(id=case_id)


def cases_of(tmp_path: Path, text: str):
    spec, _ = spec_of(tmp_path)
    path = write(tmp_path / "cases.yaml", text)
    return path, parse_cases(path, spec)


def test_parse_cases_valid(tmp_path):
    _, cases = cases_of(tmp_path, case_text(good(1), good(2)))
    assert [c.case_id for c in cases] == [1, 2]
    assert [c.index for c in cases] == [0, 1]
    assert all(c.error is None and c.warnings == [] for c in cases)
    assert cases[0].attrs == {"alpha": 0.5}
    assert cases[0].dtype_names == ["float16", "float32"]
    assert cases[0].raw["note"] == "S-tiny"


@pytest.mark.parametrize("text, problem", [
    ("- a\n- b\n", "top level must be a mapping with a list under 'cases'"),
    ("cases: {1: x}\n", "top level must be a mapping with a list under 'cases'"),
    ("operator: X\n", "top level must be a mapping with a list under 'cases'"),
])
def test_parse_cases_bad_top_level(tmp_path, text, problem):
    spec, _ = spec_of(tmp_path)
    path = write(tmp_path / "cases.yaml", text)
    exc = format_error(parse_cases, path, spec)
    assert exc.path == path and exc.problem == problem


def test_parse_cases_empty_list(tmp_path):
    spec, _ = spec_of(tmp_path)
    path = write(tmp_path / "cases.yaml", "cases: []\n")
    exc = format_error(parse_cases, path, spec)
    assert (exc.where, exc.problem, exc.fix) == ("cases", "the list is empty", "add at least one case")


def test_parse_cases_yaml_syntax_error(tmp_path):
    spec, _ = spec_of(tmp_path)
    path = write(tmp_path / "cases.yaml", "cases:\n  - case_id: 1\n   dtype: [float32]\n")
    exc = format_error(parse_cases, path, spec)
    assert exc.path == path and exc.where == "line 3, column 4"


@pytest.mark.parametrize("bad_id, shown", [("", "None"), ("case_id: -1", "-1"), ("case_id: true", "True"),
                                           ("case_id: '3'", "'3'"), ("case_id: 1.5", "1.5")])
def test_case_id_must_be_a_non_negative_int(tmp_path, bad_id, shown):
    broken = good(7).replace("case_id: 7", bad_id)
    path, cases = cases_of(tmp_path, case_text(good(1), broken))
    assert cases[0].error is None
    assert cases[1].case_id is None
    assert cases[1].error.startswith(f"{path}: ")
    assert cases[1].error.endswith(f": field 'case_id' must be a non-negative int, got {shown}")


def test_duplicate_case_id_fails_the_second_case_only(tmp_path):
    path, cases = cases_of(tmp_path, case_text(good(1), good(2), good(2), good(3)))
    assert [c.error for c in cases] == [None, None, f"{path}: case_id 2: duplicate case_id (also cases[1])", None]
    # the duplicate loses the id: keyed by it, it would replace case 2's result
    assert [c.case_id for c in cases] == [1, 2, None, 3]
    assert all(not c.warnings for c in cases)  # 1, 2, 3 stay contiguous


def test_case_not_a_mapping(tmp_path):
    path, cases = cases_of(tmp_path, case_text(good(1), "- just a string"))
    assert cases[1].case_id is None and cases[1].raw == {}
    assert cases[1].error == f"{path}: cases[1]: must be a mapping, got str"


@pytest.mark.parametrize("edit, error", [
    (("operator: ScaleAdd", "operator: ScaleSub"), "field 'operator' is 'ScaleSub' but proto.yaml names 'ScaleAdd'"),
    (("  input_shape: [[2, 3], [2, 3]]\n", ""), "missing field 'input_shape'"),
    (("  dtype: [float16, float32]\n", ""), "missing field 'dtype'"),
    (("attrs: {alpha: 0.5}", "attrs: [0.5]"), "field 'attrs' must be a mapping, got list"),
    (("attrs: {alpha: 0.5}", "attrs: alpha=0.5"), "field 'attrs' must be a mapping, got str"),
    (("dtype: [float16, float32]", "dtype: [float16, floot32]"), "field 'dtype': input 'y': unknown dtype 'floot32'"),
    (("input_shape: [[2, 3], [2, 3]]", "input_shape: [[2, 3], [2, 3], [2, 3]]"),
     "field 'input_shape': 3 shapes given but the operator declares 2 input(s) (x, y)"),
    (("input_shape: [[2, 3], [2, 3]]", "input_shape: [[2, -3], [2, 3]]"),
     "field 'input_shape': input 'x': negative dimension -3"),
    (("value_range: [-1, 1]", "value_range: ['-1', '1']"), "field 'value_range'"),
])
def test_case_errors_name_file_case_and_field(tmp_path, edit, error):
    text = case_text(good(1), good(2).replace(*edit))
    path, cases = cases_of(tmp_path, text)
    assert cases[0].error is None
    assert cases[1].case_id == 2
    assert cases[1].error.startswith(f"{path}: case_id 2: ")
    assert error in cases[1].error


def test_case_without_operator_field_is_accepted(tmp_path):
    _, cases = cases_of(tmp_path, case_text(good(1).replace("operator: ScaleAdd", "note2: x")))
    assert cases[0].error is None
    assert cases[0].warnings == [f"{tmp_path / 'cases.yaml'}: case_id 1: unknown field(s) 'note2' ignored"]


def test_case_warnings(tmp_path):
    legacy = good(1).replace("note: S-tiny", "note: S-tiny\n  baseline_perf_us: 12.5\n  t_hw_us: 1.0")
    undeclared = good(2).replace("attrs: {alpha: 0.5}", "attrs: {alpha: 0.5, beta: 2, x: null}")
    off_proto = good(3).replace("dtype: [float16, float32]", "dtype: [bfloat16, float32]")
    path, cases = cases_of(tmp_path, case_text(legacy, undeclared, off_proto))
    assert all(c.error is None for c in cases)
    assert cases[0].warnings == [
        f"{path}: case_id 1: field 'baseline_perf_us' is ignored (anchors live in metadata/<hw>.json)",
        f"{path}: case_id 1: field 't_hw_us' is ignored (anchors live in metadata/<hw>.json)",
    ]
    # attrs may name inputs (quant_matmul passes optional tensors as null attrs): only 'beta' warns
    assert cases[1].warnings == [f"{path}: case_id 2: attrs 'beta' are not declared in proto.yaml"]
    assert cases[2].warnings == [
        f"{path}: case_id 3: input 'x' has dtype 'bfloat16', not among proto's ['float16', 'float32']"]


def test_case_shape_warnings(tmp_path):
    spec, _ = spec_of(tmp_path, "operator:\n  name: Neg\n  inputs: [{name: x, dtype: float32}, "
                                "{name: w, dtype: float32, optional: true}]\n  outputs: [{name: y, dtype: float32}]\n")
    path = write(tmp_path / "cases.yaml", case_text(
        "- {case_id: 1, input_shape: [4, 4], dtype: [float32]}",
        "- {case_id: 2, input_shape: [[4], [4]], dtype: [float32, float32, float32]}",
        "- {case_id: 3, input_shape: [[4], null], dtype: [float32, null]}",
    ))
    cases = parse_cases(path, spec)
    assert all(c.error is None for c in cases)
    assert cases[0].warnings == [f"{path}: case_id 1: input_shape is a bare shape, read as [[...]] (one input)"]
    assert cases[1].warnings == [f"{path}: case_id 2: dtype has 3 entries for 2 input shapes"]
    assert cases[2].warnings == []


def test_non_contiguous_case_ids_warn_once(tmp_path):
    path, cases = cases_of(tmp_path, case_text(good(1), good(2), good(5)))
    assert cases[0].warnings == [f"{path}: case ids are not contiguous (1..5, 3 cases)"]
    assert cases[1].warnings == cases[2].warnings == []
    _, cases = cases_of(tmp_path, case_text(good(0), good(1)))  # starting at 0 is contiguous
    assert cases[0].warnings == []


# --------------------------------------------------------------------------------------------
# the operator directory


def make_operator(op_dir: Path, proto: str = PROTO, cases: str = "", golden: str = GOLDEN) -> Path:
    write(op_dir / "proto.yaml", proto)
    write(op_dir / "cases.yaml", cases or case_text(good(1)))
    if golden is not None:
        write(op_dir / "golden.py", golden)
    return op_dir


def test_load_operator(tmp_path):
    root = tmp_path / "tasks"
    op_dir = make_operator(root / "level2" / "scale_add", cases=case_text(good(1), good(2)))
    task = load_operator(op_dir, root)
    assert task.rel_path == "level2/scale_add"
    assert task.level == 2
    assert task.case_key(1) == "level2/scale_add_1"
    assert [c.case_id for c in task.cases] == [1, 2]
    assert task.warnings == []


def test_load_operator_level_from_difficulty_when_flat(tmp_path):
    op_dir = make_operator(tmp_path / "suite" / "scale_add")
    task = load_operator(op_dir, tmp_path / "suite")
    assert task.rel_path == "scale_add" and task.level == 2  # difficulty: L2
    task = load_operator(op_dir, op_dir)
    assert task.rel_path == "scale_add"


def test_load_operator_keeps_proto_warnings(tmp_path):
    proto = PROTO.replace("type: float\n", "type: quaternion\n")
    task = load_operator(make_operator(tmp_path / "op", proto=proto), tmp_path)
    (warning,) = task.warnings
    assert "operator.attrs[0] (alpha): unknown attr type 'quaternion'" in warning


@pytest.mark.parametrize("absent, listed", [
    (["golden.py"], "missing golden.py"),
    (["cases.yaml", "golden.py"], "missing cases.yaml, golden.py"),
])
def test_load_operator_missing_files(tmp_path, absent, listed):
    op_dir = make_operator(tmp_path / "op")
    for name in absent:
        (op_dir / name).unlink()
    exc = format_error(load_operator, op_dir, tmp_path)
    assert exc.path == op_dir
    assert exc.problem == listed
    assert exc.fix == "an operator directory needs proto.yaml, cases.yaml and golden.py"


def test_load_operator_checks_files_in_order(tmp_path):
    op_dir = make_operator(tmp_path / "op", proto="operator: [\n", golden="def (:\n")
    assert format_error(load_operator, op_dir, tmp_path).path == op_dir / "proto.yaml"
    write(op_dir / "proto.yaml", PROTO)
    assert format_error(load_operator, op_dir, tmp_path).path == op_dir / "golden.py"
    write(op_dir / "golden.py", GOLDEN)
    write(op_dir / "cases.yaml", "cases: [\n")
    assert format_error(load_operator, op_dir, tmp_path).path == op_dir / "cases.yaml"


# --------------------------------------------------------------------------------------------
# cases.csv


def csv_row(case: dict) -> list[str]:
    """What the official exporter writes: JSON for the list/dict columns, special floats as strings."""
    def special(value):
        if isinstance(value, float) and not math.isfinite(value):
            return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        if isinstance(value, list):
            return [special(v) for v in value]
        if isinstance(value, dict):
            return {k: special(v) for k, v in value.items()}
        return value

    return [str(case["operator"]), str(case["case_id"]), *(json.dumps(special(case[c]))
            for c in ("input_shape", "dtype", "attrs", "value_range")), case["note"]]


def write_csv(path: Path, rows: list[list[str]], header: list[str] = COLUMNS) -> Path:
    import csv

    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


YAML_CASES = [
    {"operator": "Clamp", "case_id": 1, "input_shape": [[4, 4]], "dtype": ["float16"],
     "attrs": {"lo": -1.0, "hi": math.inf, "mode": "fast", "flag": True, "none": None},
     "value_range": [-math.inf, math.inf], "note": "S-fp16 | baseline_kernels: Clamp×1"},
    {"operator": "Clamp", "case_id": 2, "input_shape": [[8]], "dtype": ["float32"],
     "attrs": {"lo": 0, "hi": 1}, "value_range": [[math.nan, math.nan]], "note": "S-fp32-nan"},
]


def test_compare_csv_agrees(tmp_path):
    path = write_csv(tmp_path / "cases.csv", [csv_row(c) for c in YAML_CASES])
    assert compare_csv(path, YAML_CASES) == []


def test_compare_csv_special_floats_in_every_spelling(tmp_path):
    row = csv_row(YAML_CASES[0])
    row[5] = "[-Infinity, Infinity]"  # json.dumps of the floats themselves
    row2 = csv_row(YAML_CASES[1])
    row2[5] = '[["NaN", ".nan"]]'
    path = write_csv(tmp_path / "cases.csv", [row, row2])
    assert compare_csv(path, YAML_CASES) == []
    # and a YAML string "inf" equals a CSV float/strings "inf"
    cases = [dict(YAML_CASES[0], value_range=["-inf", "inf"])]
    assert compare_csv(write_csv(tmp_path / "c2.csv", [csv_row(YAML_CASES[0])]), cases) == []


def test_compare_csv_numbers_compare_by_value(tmp_path):
    row = csv_row(YAML_CASES[1])
    row[4] = '{"lo": 0.0, "hi": 1.0}'  # ints in YAML, floats in CSV
    path = write_csv(tmp_path / "cases.csv", [csv_row(YAML_CASES[0]), row])
    assert compare_csv(path, YAML_CASES) == []


def test_compare_csv_disagreeing_column(tmp_path):
    row = csv_row(YAML_CASES[1])
    row[5] = "[[0, 1]]"
    path = write_csv(tmp_path / "cases.csv", [csv_row(YAML_CASES[0]), row])
    (problem,) = compare_csv(path, YAML_CASES)
    assert problem.startswith(f"{path}: case_id 2: column 'value_range' is '[[0, 1]]' but cases.yaml has ")
    nan_vs_zero = csv_row(YAML_CASES[0])
    nan_vs_zero[5] = '["nan", "inf"]'
    (problem,) = compare_csv(write_csv(tmp_path / "c2.csv", [nan_vs_zero, csv_row(YAML_CASES[1])]), YAML_CASES)
    assert "case_id 1: column 'value_range'" in problem


def test_compare_csv_note_and_operator(tmp_path):
    row = csv_row(YAML_CASES[0])
    row[0], row[6] = "Clip", "another note"
    problems = compare_csv(write_csv(tmp_path / "cases.csv", [row, csv_row(YAML_CASES[1])]), YAML_CASES)
    assert len(problems) == 2
    assert "case_id 1: column 'operator' is 'Clip'" in problems[0]
    assert problems[1].endswith("case_id 1: column 'note' differs from cases.yaml")


def test_compare_csv_missing_and_extra_ids(tmp_path):
    extra = csv_row(YAML_CASES[1])
    extra[1] = "9"
    path = write_csv(tmp_path / "cases.csv", [csv_row(YAML_CASES[0]), extra])
    assert compare_csv(path, YAML_CASES) == [
        f"{path}: case_id 2 in cases.yaml but not in cases.csv",
        f"{path}: case_id 9 in cases.csv but not in cases.yaml",
    ]


def test_compare_csv_bad_header(tmp_path):
    header = ["operator", "case_id", "shape", "dtype", "attrs", "value_range", "note"]
    path = write_csv(tmp_path / "cases.csv", [csv_row(c) for c in YAML_CASES], header=header)
    (problem,) = compare_csv(path, YAML_CASES)
    assert problem == f"{path}: header is {header}, expected the columns {COLUMNS}"


def test_compare_csv_any_column_order(tmp_path):
    """bench_lab's exports put case_id first: the same columns in another order agree."""
    order = [1, 0, 2, 3, 4, 5, 6]
    rows = [[csv_row(c)[i] for i in order] for c in YAML_CASES]
    assert compare_csv(write_csv(tmp_path / "cases.csv", rows, header=[COLUMNS[i] for i in order]), YAML_CASES) == []


def test_compare_csv_column_not_json(tmp_path):
    row = csv_row(YAML_CASES[0])
    row[4] = "{'lo': -1.0"  # neither JSON nor a Python literal
    (problem,) = compare_csv(write_csv(tmp_path / "cases.csv", [row, csv_row(YAML_CASES[1])]), YAML_CASES)
    assert problem.endswith("case_id 1: column 'attrs' is neither JSON nor a Python literal")


def test_compare_csv_python_literal_columns(tmp_path):
    """A Python-literal column (bench_lab's roi_pooling: ``['float16', 'float16']``) is read as the literal: a
    dict that differs is a disagreement, one that agrees is none."""
    row = csv_row(YAML_CASES[0])
    row[4] = "{'lo': -1.0}"
    (problem,) = compare_csv(write_csv(tmp_path / "cases.csv", [row, csv_row(YAML_CASES[1])]), YAML_CASES)
    assert "case_id 1: column 'attrs' is \"{'lo': -1.0}\" but cases.yaml has" in problem
    row = csv_row(YAML_CASES[1])
    row[3] = repr(YAML_CASES[1]["dtype"])
    assert compare_csv(write_csv(tmp_path / "cases.csv", [csv_row(YAML_CASES[0]), row]), YAML_CASES) == []


def test_compare_csv_unreadable(tmp_path):
    assert "cannot read" in compare_csv(tmp_path / "absent.csv", YAML_CASES)[0]
    path = tmp_path / "latin1.csv"
    path.write_bytes(",".join(COLUMNS).encode() + b"\nX,1,[],[],{},[],caf\xe9\n")
    assert "cannot read" in compare_csv(path, YAML_CASES)[0]


# --------------------------------------------------------------------------------------------
# task directories


def op(path: Path, golden: bool = True) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name in ("proto.yaml", "cases.yaml") + (("golden.py",) if golden else ()):
        (path / name).write_text("")
    return path


def test_find_bench_root_official_layout(tmp_path):
    root = tmp_path / "tasks"
    (root / "metadata").mkdir(parents=True)
    assert find_bench_root(op(root / "level1" / "exp")) == root.resolve()
    assert find_bench_root(op(root / "mish")) == root.resolve()  # an operator right under tasks/


def test_find_bench_root_is_the_nearest_match(tmp_path):
    far = tmp_path / "tasks" / "checkout"
    suite = far / "bench_lab" / "kernel_bench"
    (suite / "metadata").mkdir(parents=True)
    assert find_bench_root(op(suite / "attn")) == suite.resolve()  # metadata/ nearer than tasks/
    assert find_bench_root(op(suite / "level5" / "attn")) == suite.resolve()  # levelN: its parent
    assert find_bench_root(op(far / "plain" / "level2" / "gather")) == (far / "plain").resolve()
    assert find_bench_root(op(far / "ops" / "tasks" / "softmax")) == (far / "ops" / "tasks").resolve()


def test_find_bench_root_flat_suite(tmp_path):
    assert find_bench_root(op(tmp_path / "flat" / "mish")) == (tmp_path / "flat").resolve()


def test_find_metadata_dir(tmp_path):
    meta = tmp_path / "suite" / "metadata"
    meta.mkdir(parents=True)
    deep = tmp_path / "suite" / "level1" / "exp"
    deep.mkdir(parents=True)
    assert find_metadata_dir(deep) == meta.resolve()
    assert find_metadata_dir(tmp_path / "suite") == meta.resolve()
    found = find_metadata_dir(tmp_path / "elsewhere")
    assert found is None or tmp_path.resolve() not in found.parents


def test_operator_dir_predicates_and_iteration(tmp_path):
    root = tmp_path / "tasks"
    b = op(root / "level1" / "b")
    a = op(root / "level2" / "a", golden=False)
    (root / "level2" / "stray").mkdir()
    (root / "level2" / "stray" / "proto.yaml").write_text("")
    assert is_operator_dir(b) and not is_operator_dir(a)
    assert looks_like_operator_dir(a) and not looks_like_operator_dir(root / "level2" / "stray")
    assert iter_operator_dirs(root) == [b.resolve(), a.resolve()]  # sorted by path: level1 first
    assert iter_operator_dirs(a) == [a.resolve()]


def test_index_gather_true_parses_and_fails_every_case(tmp_path):
    """bench_lab writes `index_gather: true`: the operator collects, each case fails naming what to declare."""
    op = tmp_path / "op"
    op.mkdir()
    (op / "proto.yaml").write_text("operator:\n  name: Idx\n  inputs: [{name: x, dtype: float32}]\n"
                                   "  outputs: [{name: y, dtype: int64, compare: false, index_gather: true}]\n")
    (op / "cases.yaml").write_text("cases:\n- {operator: Idx, case_id: 1, input_shape: [[4]], dtype: [float32], "
                                   "attrs: {}, value_range: [0, 1]}\n")
    (op / "golden.py").write_text("def idx(x):\n    return x.argmax()\n")
    task = load_operator(op, tmp_path)
    assert task.spec.outputs[0].index_gather is None
    assert "'index_gather' is True, not a mapping" in task.spec.outputs[0].index_gather_error
    assert "declare {input, dim_attr, value_output}" in (task.cases[0].error or "")

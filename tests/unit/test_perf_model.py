"""Unit tests for perf_model.py: the expression language, its defaults, and what it refuses.

Hostile expressions must fail at parse time (collection) with an error naming the proto file and
the field, and must fail fast: nothing here may evaluate a huge power or call a builtin.
"""

from __future__ import annotations

import re
import time

import pytest
import yaml

from pytest_cannbench.taskformat import perf_model
from pytest_cannbench.taskformat.errors import TaskFormatError
from pytest_cannbench.taskformat.perf_model import (
    PerfModel,
    PerfModelError,
    TensorFacts,
    default_bytes,
    estimate_work,
    parse_perf_model,
)

SOURCE = "tasks/level1/op/proto.yaml"
INPUTS = ("x", "w", "xs", "opt")
OUTPUTS = ("y",)
ATTRS = ("k", "dims", "flag", "mode", "scale", "zero", "neg", "unset")

TENSORS = {
    "x": TensorFacts((2, 3, 4), 2),  # numel 24, nbytes 48
    "w": TensorFacts((4, 5), 4),  # numel 20, nbytes 80
    "xs": [TensorFacts((3,), 4), TensorFacts((2, 2), 4)],  # a TensorList: numel 7, nbytes 28
    "opt": None,  # an optional input this case omits
    "y": TensorFacts((2, 3, 5), 2),  # numel 30, nbytes 60
}
CASE_ATTRS = {"k": 5, "dims": [3, 4], "flag": True, "mode": "fast", "scale": 1e10, "zero": 0, "neg": -8}


def parse(expr, field: str = "bytes") -> PerfModel:
    model = parse_perf_model({field: expr}, SOURCE, inputs=INPUTS, outputs=OUTPUTS, attrs=ATTRS)
    assert model is not None
    return model


@pytest.mark.parametrize("expr, value", [
    ("x.numel", 24),
    ("x.nbytes", 48),
    ("x.itemsize", 2),
    ("x.ndim", 3),
    ("x.shape[0]", 2),
    ("x.shape[-1]", 4),
    ("x.count", 1),
    ("y.nbytes", 60),  # outputs' facts
    ("prod(x.shape[1:])", 12),
    ("prod(x.shape[:-1])", 6),
    ("sum(x.shape)", 9),
    ("len(x.shape)", 3),
    ("max(x.shape)", 4),
    ("min(x.shape[0], k)", 2),
    ("max(1, 2, k)", 5),
    ("k ** 2", 25),
    ("2 ** -1", 0.5),
    ("7 // 2", 3),
    ("7 % 4", 3),
    ("7 / 2", 3.5),
    ("-(-3)", 3),
    ("+3", 3),
    ("(1 + 2) * 3", 9),
    ("2.5e3", 2500),
    ("dims[0] * 2", 6),
    ("dims[-1]", 4),
    ("prod(dims)", 12),
    ("len(dims)", 2),
    ("flag * 10", 10),  # a bool attr counts as 0/1
    ("xs.count", 2),
    ("xs.numel", 7),
    ("xs.nbytes", 28),
    ("xs.itemsize", 4),
    ("xs[1].shape[0] + xs[0].numel", 5),
    ("xs[-1].ndim", 2),
    ("opt.nbytes + opt.numel + opt.count", 0),  # omitted optional input: empty
    ("x.shape[dims[0] - 2]", 3),
    ("sum(x.shape[k - 5:])", 9),
    ("zero", 0),
    ("2 * x.shape[0] * x.shape[1] * x.shape[2] * w.shape[-1]", 240),  # matmul-style flops
])
def test_evaluate(expr: str, value: float) -> None:
    bytes_, flops = parse(expr).evaluate(TENSORS, CASE_ATTRS)
    assert bytes_ == value and isinstance(bytes_, float)
    assert flops is None
    _, flops = parse(expr, "flops").evaluate(TENSORS, CASE_ATTRS)
    assert flops == value


def test_no_perf_model_defaults_to_all_tensor_bytes() -> None:
    assert parse_perf_model(None, SOURCE) is None
    assert default_bytes(TENSORS) == 48 + 80 + 28 + 60
    assert estimate_work(None, TENSORS, {}) == (216.0, None)
    # a model with only flops keeps the default bytes
    only_flops = parse_perf_model({"flops": "x.numel"}, SOURCE, inputs=INPUTS, outputs=OUTPUTS)
    assert estimate_work(only_flops, TENSORS, {}) == (216.0, 24.0)


def test_plain_numbers_and_both_fields() -> None:
    model = parse_perf_model({"bytes": 1024, "flops": 0}, SOURCE)
    assert model is not None and model.evaluate({}, {}) == (1024.0, 0.0)
    assert model.bytes_expr == "1024" and model.flops_expr == "0"


def test_docstring_examples_parse_and_evaluate() -> None:
    """The three examples in the module docstring are valid and give the documented work."""
    blocks = re.findall(r"^    (perf_model:.*?)(?=\n\n|\n    #|\Z)", perf_model.__doc__, re.S | re.M)
    models = [yaml.safe_load(block.replace("\n    ", "\n"))["perf_model"] for block in blocks]
    assert len(models) == 3
    f = TensorFacts
    elementwise = {"x": f((8, 16), 2), "y": f((8, 16), 2), "z": f((8, 16), 2)}
    matmul = {"x": f((2, 8, 16), 4), "w": f((16, 32), 4), "y": f((2, 8, 32), 4)}
    reduction = {"x": f((8, 16), 4), "y": f((8,), 4)}
    expected = [(elementwise, 3 * 256.0, 128.0), (matmul, 1024 + 2048 + 2048.0, 2 * 16 * 16 * 32.0),
                (reduction, 512 + 32.0, 120.0)]
    for raw, (tensors, bytes_, flops) in zip(models, expected):
        names = list(tensors)
        model = parse_perf_model(raw, SOURCE, inputs=names[:-1], outputs=names[-1:], attrs=["dim"])
        assert model is not None and model.evaluate(tensors, {"dim": 1}) == (bytes_, flops)


@pytest.mark.parametrize("expr, problem", [
    ("__import__('os')", "only the functions"),
    ("__import__('os').system('true')", "only the functions"),
    ("open('/etc/passwd')", "only the functions"),
    ("getattr(x, 'numel')", "only the functions"),
    ("x.__class__", "unknown fact '__class__'"),
    ("x.shape.__class__", "unknown fact '__class__'"),
    ("(1).real", "unknown fact 'real'"),
    ("k.numel", "is an attr, not a tensor"),
    ("(x.numel).numel", "applies to an input or output name"),
    ("lambda: 1", "Lambda is not allowed"),
    ("[i for i in x.shape]", "ListComp is not allowed"),
    ("sum(i for i in x.shape)", "GeneratorExp is not allowed"),
    ("{1: 2}", "Dict is not allowed"),
    ("(1, 2)", "Tuple is not allowed"),
    ("x.numel if k else 1", "IfExp is not allowed"),
    ("k < 3", "Compare is not allowed"),
    ("k << 3", "LShift is not allowed"),
    ("~k", "Invert is not allowed"),
    ("(y := 1)", "NamedExpr is not allowed"),
    ("f'{k}'", "JoinedStr is not allowed"),
    ("2**10**10", "exponent 10000000000 exceeds 64"),
    ("9**9**9", "exponent 387420489 exceeds 64"),
    ("10**100", "exponent 100 exceeds 64"),
    ("x.numel ** 65", "exponent 65 exceeds 64"),
    ("max(1, 2) ** 100", "exponent 100 exceeds 64"),
    ("(10 ** 20) ** 2", "out of range"),
    ("(-8) ** 0.5", "fractional power"),
    ("1e400", "literal out of range"),
    ("1 / 0", "division by zero"),
    ("7 % (2 - 2)", "division by zero"),
    ("'a' * 3", "only numbers are allowed"),
    ("True + 1", "only numbers are allowed"),
    ("None", "only numbers are allowed"),
    ("1j", "only numbers are allowed"),
    ("x", "'x' is a tensor"),
    ("xs[0]", "is a tensor"),
    ("nope + 1", "unknown name 'nope'"),
    ("sum", "'sum' is a function"),
    ("x.shape", "is a sequence, not a number"),
    ("x.shape[1:]", "is a sequence, not a number"),
    ("x.shape + 1", "arithmetic on a sequence"),
    ("-x.shape", "arithmetic on a sequence"),
    ("max(x.shape, 3)", "not a mix"),
    ("len(3)", "len() takes one sequence"),
    ("len(x.shape, x.shape)", "len() takes one sequence"),
    ("min()", "needs at least one argument"),
    ("sum(x.shape, start=1)", "plain positional arguments"),
    ("max(*x.shape)", "plain positional arguments"),
    ("x.shape[::2]", "no step"),
    ("x.shape[x.shape]", "index must be a number"),
    ("x.numel[0]", "only a shape or a list attr can be indexed"),
    ("xs[0:1].numel", "one index, not a slice"),
    ("import os", "syntax error"),
    ("x.numel; 1", "syntax error"),
    ("x.numel = 1", "syntax error"),
    ("", "syntax error"),
    ("1" * 2001, "longer than 2000 characters"),
    ("-" * 1000 + "1", "too long"),
    ("+".join(["x.numel"] * 250), "too long"),
])
def test_rejected_at_parse_time(expr: str, problem: str) -> None:
    start = time.perf_counter()
    with pytest.raises(PerfModelError) as info:
        parse(expr, "flops")
    assert time.perf_counter() - start < 1.0
    message = str(info.value)
    assert message.startswith(f"{SOURCE}: operator.perf_model.flops: "), message
    assert problem in message, message
    assert isinstance(info.value, TaskFormatError)


@pytest.mark.parametrize("raw, problem", [
    ("x.nbytes", "must be a mapping"),
    ([{"bytes": "1"}], "must be a mapping"),
    ({}, "is empty"),
    ({"flop": "x.numel"}, "unknown key(s) 'flop'"),
    ({"bytes": ["x.nbytes"]}, "must be an expression string or a number"),
    ({"bytes": True}, "must be an expression string or a number"),
])
def test_rejected_structure(raw, problem: str) -> None:
    with pytest.raises(PerfModelError) as info:
        parse_perf_model(raw, SOURCE, inputs=INPUTS)
    assert str(info.value).startswith(f"{SOURCE}: operator.perf_model") and problem in str(info.value)


@pytest.mark.parametrize("expr, tensors, problem", [
    ("k / zero", TENSORS, "division by zero"),
    ("2 ** (k * 20)", TENSORS, "exponent 100 exceeds 64"),
    ("scale ** 4", TENSORS, "out of range"),
    ("x.numel * 1e29 * 1e29", TENSORS, "out of range"),
    ("neg ** 0.5", TENSORS, "fractional power"),
    ("x.shape[5]", TENSORS, "index 5 out of range"),
    ("x.shape[k / 2]", TENSORS, "an index must be an integer"),
    ("opt.shape[0]", TENSORS, "opt is absent in this case"),
    ("xs.shape[0]", TENSORS, "xs is a tensor list: use xs[i].shape"),
    ("xs[2].numel", TENSORS, "index 2 out of range"),
    ("x[0].numel", TENSORS, "x is not a tensor list"),
    ("mode * 2", TENSORS, "attr 'mode' is 'fast', not a number"),
    ("unset + 1", TENSORS, "attr 'unset' has no value"),
    ("k - 10", TENSORS, "must be a finite number >= 0"),
    ("-x.numel", TENSORS, "must be a finite number >= 0"),
    ("y.nbytes", {"x": TENSORS["x"]}, "no facts were given for 'y'"),
    ("dims * 2", TENSORS, "expected a number"),
])
def test_rejected_at_evaluation(expr: str, tensors, problem: str) -> None:
    model = parse(expr, "flops")
    with pytest.raises(PerfModelError) as info:
        model.evaluate(tensors, CASE_ATTRS)
    message = str(info.value)
    assert message.startswith(f"{SOURCE}: operator.perf_model.flops: ") and problem in message, message


def test_mixed_itemsize_list_has_no_single_itemsize() -> None:
    tensors = dict(TENSORS, xs=[TensorFacts((3,), 4), TensorFacts((3,), 2)])
    with pytest.raises(PerfModelError, match="xs is a tensor list"):
        parse("xs.itemsize").evaluate(tensors, CASE_ATTRS)


def test_names_are_checked_against_the_proto() -> None:
    with pytest.raises(PerfModelError, match="unknown name 'k'"):
        parse_perf_model({"flops": "k * x.numel"}, SOURCE, inputs=["x"])
    with pytest.raises(PerfModelError, match="'y' is an attr, not a tensor"):
        parse_perf_model({"bytes": "y.nbytes"}, SOURCE, inputs=["x"], attrs=["y"])
    model = parse_perf_model({"flops": "k * x.numel"}, SOURCE, inputs=["x"], attrs=["k"])
    assert model is not None and model.evaluate({"x": TensorFacts((4,), 4)}, {"k": 3}) == (16.0, 12.0)


def test_tensor_facts_of_a_torch_tensor() -> None:
    torch = pytest.importorskip("torch")
    facts = TensorFacts.of(torch.zeros(3, 5, dtype=torch.float16))
    assert facts == TensorFacts((3, 5), 2) and facts.numel == 15 and facts.nbytes == 30
    assert TensorFacts.of(torch.zeros((), dtype=torch.float64)).nbytes == 8  # a 0-d tensor: one element

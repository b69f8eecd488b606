"""Unit tests for pytest_cannbench.judge.index_checks: the tie-order-free ``index_gather`` checks."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_cannbench.judge.index_checks import check_index_gather

NAN = math.nan

PAIR = {"input": "x", "dim_attr": "dim", "value_output": "y"}
REDUCE = {"input": "input", "dim_attr": "dim", "value_reduce": "amax", "keepdim_attr": "keepdim"}
L = torch.tensor


def pair(x, y, idx, dim=-1, spec=PAIR):
    return check_index_gather(spec, inputs={"x": x}, attrs={"dim": dim},
                              outputs={"y": y, "idx": idx}, index_output="idx")


def reduce(x, idx, attrs, spec=REDUCE):
    return check_index_gather(spec, inputs={"input": x}, attrs=attrs, outputs={"indices": idx},
                              index_output="indices")


@pytest.mark.parametrize("x, y, idx, dim, ok, part", [
    # top_k with a tie: either order of the tied indices is valid
    (L([[1.0, 3.0, 3.0, 2.0]]), L([[3.0, 3.0]]), L([[2, 1]]), -1, True, "all 2 indices"),
    (L([[1.0, 3.0, 3.0, 2.0]]), L([[3.0, 3.0]]), L([[1, 2]]), 1, True, "all 2 indices"),
    (L([[1.0, 3.0, 3.0, 2.0]]), L([[3.0, 3.0]]), L([[1, 3]]), -1, False, "1 of 2 indices do not point"),
    # cummin
    (L([3.0, 1.0, 2.0]), L([3.0, 1.0, 1.0]), L([0, 1, 1]), 0, True, "all 3"),
    # out of bounds, both sides
    (L([[1.0, 3.0, 3.0, 2.0]]), L([[3.0, 3.0]]), L([[4, 1]]), -1, False, "index out of bounds: range [1, 4]"),
    (L([[1.0, 3.0, 3.0, 2.0]]), L([[3.0, 3.0]]), L([[-1, 1]]), -1, False, "index out of bounds"),
    # NaN ties: a NaN value is matched by an index pointing at any NaN
    (L([[NAN, 1.0, NAN]]), L([[NAN]]), L([[2]]), -1, True, "all 1"),
    (L([[NAN, 1.0, NAN]]), L([[NAN]]), L([[1]]), -1, False, "do not point"),
    # shape problems
    (L([[1.0, 2.0]]), L([[2.0]]), L([[1, 0]]), -1, False, "index shape (1, 2) != value output shape (1, 1)"),
    (L([[1.0, 2.0]]), L([2.0]), L([1]), -1, False, "index has 1 dims, input has 2"),
    (L([[1.0, 2.0]]), L([[2.0]]), L([[1]]), 2, False, "dim 2 out of range"),
    (L([[1.0, 2.0]]), L([[2.0]]), L([[1.0]]), -1, False, "not an integer dtype"),
])
def test_index_gather_pairing(x, y, idx, dim, ok, part):
    result, msg = pair(x, y, idx, dim)
    assert result is ok
    assert part in msg and msg.startswith("index_gather[idx]: ")


X = L([[5.0, 1.0, 5.0], [0.0, 2.0, 2.0]])


@pytest.mark.parametrize("x, idx, attrs, spec, ok, part", [
    (X, L([0, 1]), {"dim": 1}, REDUCE, True, "all 2 indices point at a slice amax"),
    (X, L([2, 2]), {"dim": 1, "keepdim": False}, REDUCE, True, "amax"),                    # ties
    (X, L([1, 1]), {"dim": 1}, REDUCE, False, "1 of 2 indices do not point at a slice amax"),
    (X, L([[0], [2]]), {"dim": 1, "keepdim": True}, REDUCE, True, "amax"),
    (X, L([[0], [2]]), {"dim": 1}, REDUCE, False, "keepdim=False expects a 1-d index, got 2-d"),
    (X, L([0, 2]), {"dim": 1, "keepdim": True}, REDUCE, False, "keepdim=True expects a 2-d index"),
    (X, L([0, 0, 0]), {"dim": 1}, REDUCE, False, "index shape (3, 1) != amax result shape (2, 1)"),
    (X, L([1, 0]), {"dim": 1}, {**REDUCE, "value_reduce": "amin"}, True, "amin"),
    (X, L([0, 3]), {"dim": 1}, REDUCE, False, "index out of bounds: range [0, 3]"),
    (X, L([1, 1, 1]), {"dim": 0}, REDUCE, False, "2 of 3"),                                 # cols 0 and 2
    (X, L([0, 1, 0]), {"dim": 0}, {k: v for k, v in REDUCE.items() if k != "keepdim_attr"}, True, "amax"),
    (L([[1.0, NAN, NAN]]), L([2]), {"dim": -1}, REDUCE, True, "amax"),                     # NaN ties
    (L([[1.0, NAN, NAN]]), L([0]), {"dim": -1}, REDUCE, False, "do not point"),
    (X, L([0, 1]), {}, REDUCE, False, "case attrs lack the dim attribute 'dim'"),
    (X, L([0, 1]), {"dim": "1"}, REDUCE, False, "must be an int"),
])
def test_index_gather_reduce(x, idx, attrs, spec, ok, part):
    result, msg = reduce(x, idx, attrs, spec)
    assert result is ok
    assert part in msg


@pytest.mark.parametrize("spec, field", [
    (True, "spec must be a mapping"),
    ({"dim_attr": "dim", "value_output": "y"}, "field 'input' is required"),
    ({"input": "x", "value_output": "y", "value_reduce": "amax"}, "'value_output' and 'value_reduce'"),
    ({"input": "x"}, "'value_output' and 'value_reduce'"),
    ({"input": "x", "value_reduce": "max"}, "field 'value_reduce' must be 'amax' or 'amin'"),
    ({"input": "x", "value_ouput": "y"}, "unknown field(s) ['value_ouput']"),
    ({"input": "x", "value_output": "y", "keepdim_attr": "keepdim"}, "'keepdim_attr' only applies"),
    ({"input": "x", "dim_attr": 1, "value_output": "y"}, "field 'dim_attr' must be a non-empty string"),
])
def test_index_gather_malformed_spec(spec, field):
    ok, msg = pair(L([1.0]), L([1.0]), L([0]), 0, spec=spec)
    assert not ok
    assert msg.startswith("index_gather[idx]: malformed spec: ") and field in msg


def test_index_gather_missing_tensors():
    ok, msg = check_index_gather(PAIR, inputs={}, attrs={"dim": 0}, outputs={"idx": L([0])}, index_output="idx")
    assert not ok and "input 'x' is not a tensor" in msg
    ok, msg = check_index_gather(PAIR, inputs={"x": L([1.0])}, attrs={"dim": 0}, outputs={"idx": L([0])},
                                 index_output="idx")
    assert not ok and "value output 'y' is missing" in msg
    ok, msg = check_index_gather(PAIR, inputs={"x": L([1.0])}, attrs={"dim": 0}, outputs={},
                                 index_output="idx")
    assert not ok and "index output 'idx' is missing" in msg

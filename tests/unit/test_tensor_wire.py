"""Unit tests of pytest_cannbench.workers.tensor_wire: tensors between the judge and the worker through shared memory.

One process plays both sides: the judge plans and writes a call, ``read_args`` is the worker's view,
``write_outputs`` the worker's reply and ``decode_outputs`` the judge's validated view of it.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from pytest_cannbench.judge.precision import compare_outputs
from pytest_cannbench.outcome import STRUCTURAL
from pytest_cannbench.workers.tensor_wire import (
    DTYPE_NAMES,
    MAX_NDIM,
    MAX_OUTPUTS,
    MIN_REGION,
    OutputProblem,
    Region,
    decode_outputs,
    flatten,
    plan_call,
    read_args,
    write_inputs,
    write_outputs,
)

TORCH_DTYPES = [getattr(torch, n) for n in DTYPE_NAMES if hasattr(torch, n)]


@pytest.fixture
def region():
    r = Region()
    yield r
    r.close()


def _make(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        t = torch.randn(shape, generator=g) * 10
        if t.numel() >= 4:  # special values travel too
            flat = t.view(-1)
            flat[0], flat[1], flat[2], flat[3] = float("nan"), float("inf"), float("-inf"), -0.0
        return t.to(dtype)
    low = 0 if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64) else -100
    return torch.randint(low, 100, shape, generator=g).to(dtype)


def _bits(t):
    """The raw bytes of ``t`` in logical order (bit-exact comparison that also covers NaN and -0.0)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def _same(a, b):
    assert isinstance(a, torch.Tensor) and type(a) is torch.Tensor
    assert a.dtype == b.dtype
    assert tuple(a.shape) == tuple(b.shape)
    assert torch.equal(_bits(a), _bits(b))


def _call(region, kwargs, expected_out_bytes=0):
    """The judge's side of a call: plan it and write its inputs; returns the layout and the worker's view."""
    layout, writes = plan_call(kwargs, expected_out_bytes)
    write_inputs(region, layout, writes)
    return layout, read_args(region.mm, layout.args, "cpu")


def _reply(region, layout, outputs):
    """The worker's reply then the judge's decoded view of it."""
    descriptions = write_outputs(region.mm, region.size, outputs, layout.out_offset, layout.out_capacity)
    return descriptions, decode_outputs(descriptions, region, layout, "cpu")


# ------------------------------------------------------------------ inputs and outputs of every dtype

SHAPES = [(), (0,), (3, 0, 2), (7,), (4, 5), (2, 3, 1, 2, 2)]


@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=[str(d).replace("torch.", "") for d in TORCH_DTYPES])
def test_round_trip_every_dtype(region, dtype, shape):
    x = _make(dtype, shape)
    layout, args = _call(region, {"x": x}, x.numel() * x.element_size())
    _same(args["x"], x)
    _, (y,) = _reply(region, layout, [args["x"]])
    _same(y, x)


def test_dtype_table_covers_the_common_dtypes():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
                  torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128):
        assert dtype in TORCH_DTYPES


NON_CONTIGUOUS = {
    "transposed": lambda: _make(torch.float32, (3, 5)).t(),
    "stepped": lambda: _make(torch.int32, (10, 4))[::3, 1:],
    "expanded": lambda: _make(torch.float16, (1, 4)).expand(3, 4),
    "permuted_5d": lambda: _make(torch.bfloat16, (2, 3, 4, 1, 2)).permute(4, 2, 0, 3, 1),
    "complex_transposed": lambda: _make(torch.complex64, (2, 3)).mT,
    "requires_grad": lambda: torch.linspace(-1, 1, 6).reshape(2, 3).requires_grad_(),
}


@pytest.mark.parametrize("make", NON_CONTIGUOUS.values(), ids=NON_CONTIGUOUS.keys())
def test_non_contiguous_inputs_arrive_with_the_same_values(region, make):
    x = make()
    _layout, args = _call(region, {"x": x}, 64)
    assert args["x"].is_contiguous()
    _same(args["x"], x.detach())


def test_several_tensors_keep_their_own_slots(region):
    xs = {f"x{i}": _make(dtype, (i + 1, 3), seed=i)
          for i, dtype in enumerate([torch.float32, torch.int8, torch.float64, torch.bool, torch.float16])}
    layout, args = _call(region, xs, 64)
    assert list(args) == list(xs)
    for name, x in xs.items():
        _same(args[name], x)
        assert layout.args[name][1]["offset"] % 64 == 0
        assert layout.args[name][1]["offset"] + x.numel() * x.element_size() <= layout.out_offset


def test_tensor_list_with_none(region):
    a, b = _make(torch.float32, (2, 3)), _make(torch.int64, (4,), seed=1)
    c = _make(torch.float16, (3, 2), seed=2).t()
    layout, args = _call(region, {"xs": [a, None, b, c], "only_none": [None, None], "scale": 2.0}, 64)
    assert layout.args["xs"][0] == "l"
    got = args["xs"]
    assert isinstance(got, list) and len(got) == 4 and got[1] is None
    _same(got[0], a)
    _same(got[2], b)
    _same(got[3], c)
    assert args["only_none"] == [None, None]
    assert args["scale"] == 2.0


def test_tuple_of_tensors_becomes_a_list(region):
    a, b = _make(torch.float32, (3,)), _make(torch.float32, (0, 2), seed=1)
    _, args = _call(region, {"xs": (a, b)}, 64)
    assert isinstance(args["xs"], list)
    _same(args["xs"][0], a)
    _same(args["xs"][1], b)


PLAIN_VALUES = {
    "int": 3, "negative_int": -7, "big_int": 2 ** 62, "bool": True, "none": None, "float": 0.25,
    "inf": float("inf"), "minus_inf": float("-inf"), "string": "mean", "empty_string": "",
    "int_list": [1, 2, 3], "empty_list": [], "tuple": (2, 2), "nested": [[1, 2], [3]],
    "float_list": [0.5, float("inf")], "dict": {"k": 1},
}


@pytest.mark.parametrize("value", PLAIN_VALUES.values(), ids=PLAIN_VALUES.keys())
def test_plain_values_pass_through(region, value):
    expected = copy.deepcopy(value)
    layout, args = _call(region, {"x": torch.ones(2), "v": value}, 64)
    assert layout.args["v"] == ("v", value)
    assert args["v"] == expected and type(args["v"]) is type(expected)
    _same(args["x"], torch.ones(2))


def test_nan_passes_through(region):
    _layout, args = _call(region, {"v": float("nan"), "vs": [1.0, float("nan")]}, 64)
    assert math.isnan(args["v"])
    assert args["vs"][0] == 1.0 and math.isnan(args["vs"][1])


def test_list_mixing_tensors_and_values_is_a_plain_value(region):
    t = torch.ones(2)
    layout, args = _call(region, {"v": [t, 3]}, 64)
    assert layout.args["v"][0] == "v"
    assert args["v"][0] is t and args["v"][1] == 3


# ------------------------------------------------------------------ region growth


def test_region_starts_at_min_size_and_grows(region):
    assert region.size == MIN_REGION
    layout, _ = _call(region, {"x": torch.zeros(1 << 20)}, 8 << 20)
    assert region.size >= layout.size > MIN_REGION


def test_larger_call_after_smaller_keeps_earlier_views(region):
    # call 1: 512 KiB of input, so its outputs live past the small inputs of call 2
    x1 = _make(torch.float32, (128, 1024))
    layout1, args1 = _call(region, {"x": x1}, 4096)
    out1 = _make(torch.float64, (16, 16), seed=3)
    _, (y1,) = _reply(region, layout1, [out1])
    _same(y1, out1)
    size1, mm1 = region.size, region.mm

    # call 2: small input, room for large outputs -> the region is remapped, larger
    x2 = _make(torch.int16, (8,), seed=4)
    layout2, args2 = _call(region, {"x": x2}, 16 << 20)
    assert region.size > size1 and region.mm is not mm1
    assert layout2.out_offset + 16 * 16 * 8 < layout1.out_offset  # call 2 leaves call 1's outputs alone
    _same(args2["x"], x2)
    out2 = _make(torch.float64, (16, 16), seed=6)
    _, (y2,) = _reply(region, layout2, [out2])
    _same(y2, out2)

    # the earlier views still map the old mapping and read the same values
    _same(y1, out1)
    _same(args1["x"][1:], x1[1:])  # row 0 lies where call 2 wrote its input and output

    # and the grown region takes outputs that did not fit before
    big = _make(torch.float32, (3 << 20,), seed=5)  # 12 MiB
    _, (y3,) = _reply(region, layout2, [big])
    _same(y3, big)


def test_region_grows_geometrically(region):
    sizes = [region.size]
    for _ in range(4):
        region.ensure(region.size + 1)
        sizes.append(region.size)
    assert all(b >= a * 3 // 2 for a, b in zip(sizes, sizes[1:]))
    region.ensure(10)
    assert region.size == sizes[-1]  # never shrinks


def test_ensure_keeps_contents_and_old_views(region):
    x = _make(torch.float32, (1000,))
    layout, args = _call(region, {"x": x}, 64)
    old_view = args["x"]
    region.ensure(region.size * 4)
    _same(old_view, x)
    _same(read_args(region.mm, layout.args, "cpu")["x"], x)  # the new mapping shows the same file


# ------------------------------------------------------------------ outputs


class _MyTensor(torch.Tensor):
    pass


def test_none_output_is_none(region):
    layout, _ = _call(region, {}, 64)
    descriptions, decoded = _reply(region, layout, [None, torch.ones(2), None])
    assert descriptions[0] == {"kind": "none"}
    assert decoded[0] is None and decoded[2] is None
    _same(decoded[1], torch.ones(2))


BAD_OUTPUTS = {
    "dict": (lambda: {"y": torch.ones(2)}, ["torch.Tensor", "dict"]),
    "float": (lambda: 1.5, ["torch.Tensor", "float"]),
    "string": (lambda: "result", ["torch.Tensor", "str"]),
    "subclass": (lambda: torch.ones(2).as_subclass(_MyTensor), ["_MyTensor", "subclass"]),
    "parameter": (lambda: torch.nn.Parameter(torch.ones(2)), ["Parameter", "subclass"]),
    "sparse": (lambda: torch.eye(3).to_sparse(), ["sparse_coo", "not torch.strided"]),
    "sparse_csr": (lambda: torch.eye(3).to_sparse_csr(), ["sparse_csr", "not torch.strided"]),
}


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("make, words", BAD_OUTPUTS.values(), ids=BAD_OUTPUTS.keys())
def test_non_tensor_outputs_are_problems(region, make, words):
    layout, _ = _call(region, {}, 64)
    _, (decoded,) = _reply(region, layout, [make()])
    assert isinstance(decoded, OutputProblem)
    for word in words:
        assert word in decoded.message


@pytest.mark.parametrize("make", [
    lambda: _make(torch.float32, (4, 6)).t(),
    lambda: _make(torch.float64, (2, 3, 4)).permute(2, 0, 1),
    lambda: _make(torch.int32, (5, 3)).mT,
], ids=["transposed", "permuted", "int_mT"])
def test_transposed_output_keeps_values_and_layout(region, make):
    y = make()
    assert not y.is_contiguous()
    layout, _ = _call(region, {}, 1024)
    _, (decoded,) = _reply(region, layout, [y])
    assert type(decoded) is torch.Tensor
    assert not decoded.is_contiguous()
    assert decoded.stride() == y.stride()
    _same(decoded, y)


@pytest.mark.parametrize("make", [
    lambda: torch.ones(1, 4).expand(3, 4),
    lambda: torch.tensor(2.0).expand(5, 5),
    lambda: torch.arange(3).reshape(3, 1).expand(3, 7),
], ids=["row", "scalar", "column"])
def test_expanded_output_is_not_contiguous_problem(region, make):
    y = make()
    layout, _ = _call(region, {}, 1024)
    _, (decoded,) = _reply(region, layout, [y])
    assert isinstance(decoded, OutputProblem)
    assert "not contiguous" in decoded.message


def test_output_far_larger_than_the_area(region):
    layout, _ = _call(region, {"x": torch.ones(4)}, 16)
    y = torch.zeros(600_000)  # 2.4 MB into a ~1 MiB output area
    descriptions, (decoded,) = _reply(region, layout, [y])
    assert descriptions[0]["written"] is False
    assert isinstance(decoded, OutputProblem)
    assert "larger" in decoded.message
    assert "600000" in decoded.message and "float32" in decoded.message


def test_outputs_that_fit_before_one_that_does_not(region):
    layout, _ = _call(region, {}, 64)
    small, huge = torch.arange(10.0), torch.zeros(1 << 20)
    _, decoded = _reply(region, layout, [small, huge, small * 2])
    _same(decoded[0], small)
    assert isinstance(decoded[1], OutputProblem)
    _same(decoded[2], small * 2)


def test_empty_output(region):
    layout, _ = _call(region, {}, 64)
    _, decoded = _reply(region, layout, [torch.empty(0, 3), torch.empty(2, 0, dtype=torch.int8)])
    _same(decoded[0], torch.empty(0, 3))
    _same(decoded[1], torch.empty(2, 0, dtype=torch.int8))


@pytest.mark.parametrize("claimed, expected", [("cuda:0", "cpu"), ("cuda", "cpu"), ("npu:1", "cpu"), ("cpu", "npu:0"),
                                               ("meta", "cpu")])
def test_device_mismatch_is_a_problem(region, claimed, expected):
    layout, _ = _call(region, {}, 64)
    descriptions = write_outputs(region.mm, region.size, [torch.ones(3)], layout.out_offset, layout.out_capacity)
    descriptions[0]["device"] = claimed
    (decoded,) = decode_outputs(descriptions, region, layout, expected)
    assert isinstance(decoded, OutputProblem)
    assert claimed in decoded.message


def test_flatten():
    a, b, c = torch.ones(1), torch.zeros(1), torch.ones(2)
    assert flatten(a) == [a]
    assert flatten(None) == [None]
    flat = flatten((a, [b, c], None))
    assert len(flat) == 4 and flat[0] is a and flat[1] is b and flat[2] is c and flat[3] is None


# ------------------------------------------------------------------ hostile descriptions


@pytest.fixture
def valid(region):
    """A call with one valid float32 (2, 3) output: (layout, description)."""
    layout, _ = _call(region, {"x": torch.ones(100)}, 256)
    y = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    (description,) = write_outputs(region.mm, region.size, [y], layout.out_offset, layout.out_capacity)
    return layout, description


def test_valid_description_decodes(region, valid):
    layout, description = valid
    assert description == {"kind": "tensor", "dtype": "float32", "shape": [2, 3], "stride": [3, 1], "device": "cpu",
                           "offset": layout.out_offset, "nbytes": 24, "written": True}
    (decoded,) = decode_outputs([description], region, layout, "cpu")
    _same(decoded, torch.arange(6, dtype=torch.float32).reshape(2, 3))


@pytest.mark.parametrize("descriptions", [
    None, "[]", {"kind": "none"}, ({"kind": "none"},), 5, b"[]",
    [{"kind": "none"}] * (MAX_OUTPUTS + 1),
], ids=["None", "str", "dict", "tuple", "int", "bytes", "too_many"])
def test_invalid_output_list(region, valid, descriptions):
    layout, _ = valid
    decoded = decode_outputs(descriptions, region, layout, "cpu")
    assert len(decoded) == 1 and isinstance(decoded[0], OutputProblem)
    assert "invalid output list" in decoded[0].message


def test_max_outputs_is_accepted(region, valid):
    layout, _ = valid
    assert decode_outputs([{"kind": "none"}] * MAX_OUTPUTS, region, layout, "cpu") == [None] * MAX_OUTPUTS


def _with(**changes):
    def mutate(d, lo, hi):
        d.update({k: v(lo, hi) if callable(v) else v for k, v in changes.items()})
    return mutate


def _without(key):
    def mutate(d, lo, hi):
        del d[key]
    return mutate


HOSTILE = {
    # kind
    "kind_missing": _without("kind"),
    "kind_unknown": _with(kind="tensorx"),
    "kind_upper": _with(kind="Tensor"),
    "kind_list": _with(kind=["tensor"]),
    "kind_none": _with(kind=None),
    # dtype
    "dtype_injection": _with(dtype="float32); import os"),
    "dtype_Tensor": _with(dtype="Tensor"),
    "dtype_int": _with(dtype=5),
    "dtype_torch_prefix": _with(dtype="torch.float32"),
    "dtype_attr": _with(dtype="__class__"),
    "dtype_list": _with(dtype=["float32"]),
    "dtype_missing": _without("dtype"),
    # shape
    "shape_negative": _with(shape=[-2, -3]),
    "shape_one_negative": _with(shape=[6, -1], stride=[1, 1]),
    "shape_float": _with(shape=[2.0, 3]),
    "shape_string": _with(shape=["2", "3"]),
    "shape_bool": _with(shape=[True, 6], stride=[6, 1]),
    "shape_bools": _with(shape=[True, True], stride=[1, 1], nbytes=4),
    "shape_not_list": _with(shape=(2, 3)),
    "shape_str": _with(shape="2,3"),
    "shape_none": _with(shape=None),
    "shape_too_many_dims": _with(shape=[1] * (MAX_NDIM + 1), stride=[1] * (MAX_NDIM + 1), nbytes=4),
    # stride
    "stride_short": _with(stride=[1]),
    "stride_long": _with(stride=[3, 1, 1]),
    "stride_bool": _with(stride=[3, True]),
    "stride_float": _with(stride=[3.0, 1]),
    "stride_missing": _without("stride"),
    "stride_too_many_dims": _with(stride=[1] * (MAX_NDIM + 1)),
    "stride_negative": _with(stride=[-3, -1]),
    "stride_far": _with(stride=[1 << 40, 1]),
    "stride_spread": _with(stride=[1 << 16, 1]),  # a layout spanning far more memory than its elements
    # nbytes / offset types
    "nbytes_too_big": _with(nbytes=28),
    "nbytes_too_small": _with(nbytes=20),
    "nbytes_zero": _with(nbytes=0),
    "nbytes_bool": _with(shape=[1], stride=[1], nbytes=True, dtype="bool"),
    "nbytes_float": _with(nbytes=24.0),
    "nbytes_str": _with(nbytes="24"),
    "nbytes_missing": _without("nbytes"),
    "offset_float": _with(offset=lambda lo, hi: float(lo)),
    "offset_str": _with(offset=lambda lo, hi: str(lo)),
    "offset_bool": _with(offset=True),
    "offset_missing": _without("offset"),
    # offset outside the output area
    "offset_zero_inputs": _with(offset=0),
    "offset_in_inputs": _with(offset=lambda lo, hi: lo - 64),
    "offset_straddles_inputs": _with(offset=lambda lo, hi: lo - 4),
    "offset_negative": _with(offset=-24),
    "offset_at_end": _with(offset=lambda lo, hi: hi),
    "offset_straddles_end": _with(offset=lambda lo, hi: hi - 8),
    "offset_huge": _with(offset=1 << 70),
    # device / written
    "device_cuda": _with(device="cuda:0"),
    "device_missing": _without("device"),
    "device_list": _with(device=["cpu"]),
    "written_false": _with(written=False),
    "written_missing": _without("written"),
    "written_zero": _with(written=0),
    "written_none": _with(written=None),
}


@pytest.mark.parametrize("mutate", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_description_is_a_problem(region, valid, mutate):
    layout, description = valid
    d = dict(description)
    lo, hi = layout.out_offset, min(layout.out_offset + layout.out_capacity, region.size)
    mutate(d, lo, hi)
    (decoded,) = decode_outputs([d], region, layout, "cpu")
    assert isinstance(decoded, OutputProblem), decoded
    assert decoded.message


@pytest.mark.parametrize("entry", ["tensor", 5, [("kind", "tensor")], ("tensor",), b"{}"],
                         ids=["str", "int", "list", "tuple", "bytes"])
def test_entry_that_is_not_a_dict_is_a_problem(region, valid, entry):
    layout, _ = valid
    (decoded,) = decode_outputs([entry], region, layout, "cpu")
    assert isinstance(decoded, OutputProblem)
    assert "invalid output description" in decoded.message


@pytest.mark.parametrize("shape", [
    [0, 1 << 63],
    [0] + [1 << 40] * (MAX_NDIM - 1),
], ids=["beyond_int64", "stride_overflow"])
def test_hostile_empty_shape_with_huge_sizes_is_a_problem(region, valid, shape):
    """numel 0 and nbytes 0 pass the size checks; the sizes themselves must still be bounded."""
    layout, description = valid
    d = dict(description, shape=shape, stride=[1] * len(shape), nbytes=0)
    (decoded,) = decode_outputs([d], region, layout, "cpu")
    assert isinstance(decoded, OutputProblem)


def test_hostile_descriptions_in_a_list_with_valid_ones(region, valid):
    layout, description = valid
    entries = [description, dict(description, dtype="float32); import os"), {"kind": "none"},
               dict(description, offset=0), description]
    decoded = decode_outputs(entries, region, layout, "cpu")
    assert type(decoded[0]) is torch.Tensor and type(decoded[4]) is torch.Tensor
    assert isinstance(decoded[1], OutputProblem) and isinstance(decoded[3], OutputProblem)
    assert decoded[2] is None


def test_hostile_type_names_are_cut(region, valid):
    layout, _ = valid
    decoded = decode_outputs([{"kind": "object", "type": "x" * 10_000}, {"kind": "subclass", "type": None},
                              {"kind": "layout", "layout": "y" * 10_000}], region, layout, "cpu")
    assert all(isinstance(p, OutputProblem) for p in decoded)
    assert all(len(p.message) < 300 for p in decoded)


# ------------------------------------------------------------------ a 4 MB call


def test_four_megabyte_round_trip_is_bit_exact(region):
    x = _make(torch.float32, (1 << 20,), seed=7)  # 4 MiB with NaN, +-inf and -0.0
    x[100:110] = torch.tensor([1e-45, -1e-45, 3.4028235e38, -3.4028235e38, 1.17549435e-38] * 2)
    layout, args = _call(region, {"x": x}, x.numel() * 4)
    _same(args["x"], x)
    _, (y,) = _reply(region, layout, [args["x"]])
    _same(y, x)
    assert y.data_ptr() != args["x"].data_ptr()  # the output is its own copy in the output area


# ------------------------------------------------------------------ precision: OutputProblem -> structural


@pytest.mark.parametrize("compare", [True, False])
def test_compare_outputs_reports_output_problem(compare):
    problem = OutputProblem("output is not contiguous (shape (3, 4), stride (0, 1))", "Tensor")
    golden = torch.zeros(3, 4, dtype=torch.float64)
    (verdict,) = compare_outputs([problem], [golden], None, names=["y"], compare_flags=[compare])
    assert verdict.passed is False
    assert verdict.failure_type == STRUCTURAL
    assert problem.message in verdict.message
    assert verdict.message.startswith("y:")
    assert verdict.dtype == "Tensor"


def test_compare_outputs_decoded_problem_next_to_good_output(region):
    layout, _ = _call(region, {}, 1024)
    good = torch.linspace(0, 1, 12, dtype=torch.float32).reshape(3, 4)
    _, decoded = _reply(region, layout, [good, torch.ones(1, 4).expand(3, 4), {"not": "a tensor"}])
    goldens = [good.double(), torch.ones(3, 4, dtype=torch.float64), torch.ones(2, dtype=torch.float64)]
    verdicts = compare_outputs(decoded, goldens, [good, torch.ones(3, 4), torch.ones(2)], names=["a", "b", "c"])
    assert verdicts[0].passed, verdicts[0].message
    for verdict, problem in zip(verdicts[1:], decoded[1:]):
        assert isinstance(problem, OutputProblem)
        assert not verdict.passed and verdict.failure_type == STRUCTURAL
        assert problem.message in verdict.message
    assert "not contiguous" in verdicts[1].message
    assert "dict" in verdicts[2].message

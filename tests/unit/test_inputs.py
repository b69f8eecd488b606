"""Unit tests for pytest_cannbench.taskformat.inputs.

Generation tests recompute the expected tensors step by step from the
official algorithm with their own torch.Generator and compare bit patterns
(so NaN payloads and signed zeros count).  The digest tests pin outputs that
were checked against the official CANN Bench generator.
"""

from __future__ import annotations

import hashlib
import math
import pickle
import subprocess
import sys

import pytest
import torch

from pytest_cannbench.taskformat.errors import CaseFormatError
from pytest_cannbench.taskformat.generate import generate_inputs
from pytest_cannbench.taskformat.inputs import DTYPES, InputPlan, TensorPlan, case_seed, plan_inputs

INF, NAN = math.inf, math.nan


def gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8)


def assert_same(actual, expected) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert torch.equal(bits(actual), bits(expected))


def uniform(g, shape, lo, hi, dtype):
    fi = torch.finfo(dtype)
    x = torch.rand(shape, dtype=torch.float64, generator=g) * (hi - lo) + lo
    return torch.clamp(x, fi.min, fi.max).to(dtype)


def one(plans, **kw):
    (out,) = generate_inputs(plans, kw.pop("seed", 7), **kw)
    return out


# --------------------------------------------------------------------------
# seeds
# --------------------------------------------------------------------------


def ref_seed(key: str, offset: int = 0) -> int:
    h = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % 2**31
    return (offset + h) % 2**31


def test_seed_of_exp_1_matches_official():
    assert case_seed("level1/exp_1") == 895033750
    assert case_seed("level1/exp_1", 0) == ref_seed("level1/exp_1")


@pytest.mark.parametrize(
    "key, offset",
    [("level4/gru_20", 0), ("level2/scatter_12", 7), ("level3/nms_16", 2**31 - 1), ("level1/exp_1", 2**40)],
)
def test_seed_matches_hashlib(key, offset):
    assert case_seed(key, offset) == ref_seed(key, offset)
    assert 0 <= case_seed(key, offset) < 2**31


def test_seed_offsets_differ_and_wrap():
    assert case_seed("level1/exp_1", 1) == 895033751
    assert case_seed("level1/exp_1", 2**31) == 895033750


@pytest.mark.parametrize("bad", [-1, -5, 1.5, True])
def test_seed_rejects_bad_offsets(bad):
    with pytest.raises(ValueError):
        case_seed("level1/exp_1", bad)


# --------------------------------------------------------------------------
# generation, bit for bit against a hand replay of the algorithm
# --------------------------------------------------------------------------


def test_float16_uniform():
    out = one(plan_inputs(["x"], [[3, 5]], ["float16"], [-1, 1]), seed=1234)
    assert_same(out, uniform(gen(1234), (3, 5), -1.0, 1.0, torch.float16))
    assert out.min() >= -1 and out.max() <= 1


def test_bfloat16_flat_range_reaches_every_input():
    q, k = generate_inputs(plan_inputs(["q", "k"], [[4, 6], [5]], ["bfloat16"], [-2, 3]), 99)
    g = gen(99)
    assert_same(q, uniform(g, (4, 6), -2.0, 3.0, torch.bfloat16))
    assert_same(k, uniform(g, (5,), -2.0, 3.0, torch.bfloat16))
    assert k.min() < 0  # not the non-negative default the old harness gave input 1


def test_float_range_is_clamped_to_the_dtype():
    out = one(plan_inputs(["x"], [[64]], ["float16"], [-1e6, 1e6]), seed=3)
    g = gen(3)
    lo, hi = -65504.0, 65504.0  # bounds clamp to the finite range before scaling
    assert_same(out, torch.clamp(torch.rand(64, dtype=torch.float64, generator=g) * (hi - lo) + lo, lo, hi).half())


def test_int32_and_default_int_range():
    plans = plan_inputs(["idx", "n", "z"], [[7, 3], [4], [5]], ["int32", "int64", "int32"],
                        [[-5, 7], None, [0.2, 0.9]])
    idx, n, z = generate_inputs(plans, 5)
    g = gen(5)
    assert_same(idx, torch.randint(-5, 8, (7, 3), generator=g, dtype=torch.int32))
    assert_same(n, torch.randint(0, 101, (4,), generator=g, dtype=torch.int64))
    # unequal raw bounds truncating to 0 and 0: still one randint draw
    assert_same(z, torch.randint(0, 1, (5,), generator=g, dtype=torch.int32))


def test_bool_after_float():
    plans = plan_inputs(["logits", "finished", "always"], [[4, 3], [8], [2]], ["float32", "bool", "bool"],
                        [[-1, 1], [0, 1], [1, 1]])
    logits, finished, always = generate_inputs(plans, 11)
    g = gen(11)
    assert_same(logits, uniform(g, (4, 3), -1.0, 1.0, torch.float32))
    assert_same(finished, torch.randint(0, 2, (8,), generator=g, dtype=torch.int64).to(torch.bool))
    assert_same(always, torch.ones(2, dtype=torch.bool))


def test_nan_range():
    out = one(plan_inputs(["x"], [[6, 7]], ["float32"], [[NAN, NAN]]), seed=21)
    g = gen(21)
    exp = (torch.rand((6, 7), dtype=torch.float32, generator=g) * 2 - 1).to(torch.float32)
    mask = torch.rand((6, 7), dtype=torch.float32, generator=g) < 0.5
    exp[mask] = float("nan")
    assert_same(out, exp)
    assert 0 < int(out.isnan().sum()) < out.numel()


@pytest.mark.parametrize("rng", [["-inf", "inf"], [-INF, INF], [0.1, INF], ["-Infinity", 3]])
def test_inf_range(rng):
    out = one(plan_inputs(["x"], [[5, 9]], ["float16"], [rng]), seed=8)
    g = gen(8)
    exp = (torch.rand((5, 9), dtype=torch.float32, generator=g) * 2 - 1).to(torch.float16)
    flat = exp.view(-1)
    n = max(1, 45 // 20)
    flat[:n] = -INF
    flat[-n:] = INF
    assert_same(out, exp)
    assert int(out.isinf().sum()) == 4


def test_nan_with_finite_bound_is_plain_base_values():
    out = one(plan_inputs(["x"], [[10]], ["float32"], [[NAN, 1.0]]), seed=2)
    assert_same(out, torch.rand(10, dtype=torch.float32, generator=gen(2)) * 2 - 1)


def test_constant_range_consumes_no_random_numbers():
    a, b = generate_inputs(plan_inputs(["a", "b"], [[3], [4]], ["float32"], [[0, 0], [-1, 1]]), 42)
    assert_same(a, torch.zeros(3))
    assert_same(b, uniform(gen(42), (4,), -1.0, 1.0, torch.float32))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_distribution(dtype):
    out = one(plan_inputs(["x"], [[100]], [dtype], [0.1, 0.7]), seed=17, dist="normal")
    g = gen(17)
    lo, hi = 0.1, 0.7
    x = torch.randn(100, dtype=torch.float64, generator=g) * ((hi - lo) / 6.0) + (lo + (hi - lo) / 2.0)
    assert_same(out, torch.clamp(x, lo, hi).to(getattr(torch, dtype)))


def test_tensorlist_in_both_compat_modes():
    plans = plan_inputs(["x"], [[[2, 3], [4]]], ["float32"], [[-5, -4]])
    assert plans[0].kind == "list"
    assert plans[0].compat_ranges == (None, None)
    fixed = one(plans, seed=9, compat="fixed")
    g = gen(9)
    assert [t.shape for t in fixed] == [(2, 3), (4,)]
    assert_same(fixed[0], uniform(g, (2, 3), -5.0, -4.0, torch.float32))
    assert_same(fixed[1], uniform(g, (4,), -5.0, -4.0, torch.float32))
    official = one(plans, seed=9, compat="official")
    g = gen(9)
    assert_same(official[0], uniform(g, (2, 3), 0.0, 1.0, torch.float32))  # declared range dropped
    assert_same(official[1], uniform(g, (4,), 0.0, 1.0, torch.float32))


def test_truncated_and_null_inputs_skip_the_generator():
    plans = plan_inputs(["a", "b", "c", "d"], [[2, 2], None, [3]], ["float16", None, "int8"],
                        [[-1, 1], None, [-128, 127]])
    out = generate_inputs(plans, 31)
    assert out[1] is None and out[3] is None
    g = gen(31)
    assert_same(out[0], uniform(g, (2, 2), -1.0, 1.0, torch.float16))
    assert_same(out[2], torch.randint(-128, 128, (3,), generator=g, dtype=torch.int8))


def test_float8_is_generated():
    plans = plan_inputs(["x", "y"], [[16], [40]], ["float8_e4m3fn", "float8_e5m2"], [[-1, 1], [NAN, NAN]])
    x, y = generate_inputs(plans, 1)
    assert x.dtype == torch.float8_e4m3fn and y.dtype == torch.float8_e5m2
    assert x.float().abs().max() <= 1
    assert y.float().isnan().any()


def test_generate_rejects_unknown_modes():
    plans = plan_inputs(["x"], [[2]], ["float32"], None)
    with pytest.raises(ValueError, match="dist"):
        generate_inputs(plans, 0, dist="gaussian")
    with pytest.raises(ValueError, match="compat"):
        generate_inputs(plans, 0, compat="bug-for-bug")


# --------------------------------------------------------------------------
# digests checked against the official generator
# --------------------------------------------------------------------------

# These cases mimic official ones at small size.  Each digest was produced by
# running the official kernel_eval DataGenerator (hicann/cann-bench d59d44c,
# loader normalisation included) with the same seed, and this module matched it
# bit for bit (compat="official"; for all but foreach_like also "fixed").
OFFICIAL_LIKE = {
    "quant_matmul_like": (
        "level3/quant_matmul_2",
        ["x1", "x2", "scale", "offset", "pertoken_scale", "bias"],
        [[16, 32], [32, 48], [48], None, None, [48]],
        ["int8", "int8", "float32", None, None, "int32"],
        [[-128, 127], [-128, 127], [0.001, 0.01], None, None, [-100, 100]],
        "373ba6afe1e769f856c242b621e102721b2c5a08a63462e1c235785501d5f052",
    ),
    "foreach_like": (
        "level1/foreach_addcdiv_scalar_12",
        ["x1", "x2", "x3"],
        [[[8, 8], [3]], [[8, 8], [3]], [[8, 8], [3]]],
        ["bfloat16"],
        [[-INF, INF], [NAN, NAN], [0.1, 1.0]],
        "9baa1a8e4e1901d141a024e29f5bdfa73aaf49dfb583345c24efeef7cb41d539",
    ),
    "gru_like": (
        "level4/gru_12",
        ["x", "w_ih", "w_hh", "b_ih", "b_hh", "h0"],
        [[4, 3, 8], [[12, 8], [12, 4]], [[12, 4], [12, 4]], None, None, [1, 3, 4]],
        ["float16", ["float16", "float16"], ["float16", "float16"], None, None, "float16"],
        [[-1.2, 1.2], [[-0.5, 0.5], [-0.25, 0.25]], [[-0.5, 0.5], [-0.5, 0.5]], None, None, ["-inf", "inf"]],
        "7b8917006d4922505f4a6bdedee0d72b4d2741477405809e69cb25b1cd3f85d5",
    ),
    "mixed_like": (
        "level3/add_rms_norm_dynamic_quant_16",
        ["x1", "x2", "gamma", "finished"],
        [[6, 40], [6, 40], [40], [6]],
        ["float16", "bfloat16", "float32", "bool"],
        [["nan", "nan"], [0, 0], [-3, 6]],
        "6824ca5aeb541067e0d1b753b82bf901b600cc74be9dcd0564bb6d94b2755538",
    ),
}
NORMAL_DIGEST_GRU_LIKE = "3046f8c143179c4c349538af2a8fad798492aea40f80bd60b54d99f1dd2d6114"


def digest(items) -> str:
    h = hashlib.sha256()

    def add(x):
        if x is None:
            h.update(b"N")
        elif isinstance(x, list):
            h.update(b"[")
            for y in x:
                add(y)
            h.update(b"]")
        else:
            h.update(str(x.dtype).encode())
            h.update(str(tuple(x.shape)).encode())
            h.update(bits(x).numpy().tobytes())

    for x in items:
        add(x)
    return h.hexdigest()


def official_like(name, dist="uniform", compat="official"):
    key, names, shapes, dtypes, ranges, _ = OFFICIAL_LIKE[name]
    out = generate_inputs(plan_inputs(names, shapes, dtypes, ranges), case_seed(key), dist=dist, compat=compat)
    given = len(shapes)  # the official generator returns only the inputs that have a shape entry
    assert all(x is None for x in out[given:])
    return out[:given]


@pytest.mark.parametrize("name", sorted(OFFICIAL_LIKE))
def test_digest_matches_official_generator(name):
    assert digest(official_like(name)) == OFFICIAL_LIKE[name][-1]


@pytest.mark.parametrize("name", ["quant_matmul_like", "gru_like", "mixed_like"])
def test_fixed_mode_equals_official_without_flat_tensorlist_ranges(name):
    assert digest(official_like(name, compat="fixed")) == OFFICIAL_LIKE[name][-1]


def test_fixed_mode_differs_for_flat_tensorlist_ranges():
    fixed = official_like("foreach_like", compat="fixed")
    assert digest(fixed) != OFFICIAL_LIKE["foreach_like"][-1]
    x1, x2, x3 = fixed
    assert all(t.isinf().any() for t in x1)  # the declared ±inf case really has infinities
    assert all(t.isnan().any() for t in x2)
    assert all(t.float().min() >= 0.1 for t in x3)


def test_normal_digest_matches_official_generator():
    assert digest(official_like("gru_like", dist="normal")) == NORMAL_DIGEST_GRU_LIKE


# --------------------------------------------------------------------------
# planning: accepted forms
# --------------------------------------------------------------------------


def ranges(plan: InputPlan):
    return tuple(t.value_range for t in plan.tensors)


def test_bare_single_shape_is_wrapped():
    (p,) = plan_inputs(["x"], [1024, 1024], ["float16"], [-1, 1])
    assert p == InputPlan("x", "tensor", (TensorPlan((1024, 1024), "float16", (-1, 1)),), ((-1, 1),))


def test_truncated_input_shape_and_null_placeholders():
    plans = plan_inputs(["a", "b", "c", "d"], [[2], None, [3]], ["int8", None, "float32"], None)
    assert [p.kind for p in plans] == ["tensor", "none", "tensor", "none"]
    assert plans[1] == InputPlan("b", "none", (), ())
    assert plans[2].tensors[0] == TensorPlan((3,), "float32", None)


def test_empty_input_shape_means_no_inputs():
    assert [p.kind for p in plan_inputs(["a"], [], [], None)] == ["none"]


def test_zero_sized_dimension_is_allowed():
    assert plan_inputs(["x"], [[0, 4]], ["float32"], None)[0].tensors[0].numel == 0


def test_tensorlist_with_nested_and_scalar_dtypes():
    plans = plan_inputs(
        ["x", "w", "b"], [[2, 8], [[12, 8], [12, 4]], [[12], [12]]],
        ["float16", ["float16", "bfloat16"], "float32"], [[-1, 1], [[-0.5, 0.5], None], None],
    )
    assert [p.kind for p in plans] == ["tensor", "list", "list"]
    assert [(t.shape, t.dtype) for t in plans[1].tensors] == [((12, 8), "float16"), ((12, 4), "bfloat16")]
    assert ranges(plans[1]) == ((-0.5, 0.5), None)
    assert [t.dtype for t in plans[2].tensors] == ["float32", "float32"]
    assert ranges(plans[2]) == (None, None)


def test_tensorlist_nested_lists_repeat_last_and_ignore_extras():
    (p,) = plan_inputs(["w"], [[[2], [3], [4]]], [["int8"]], [[[0, 1], [2, 3]]])
    assert [t.dtype for t in p.tensors] == ["int8"] * 3
    assert ranges(p) == ((0, 1), (2, 3), (2, 3))
    (p,) = plan_inputs(["w"], [[[2]]], [["int8", "int32"]], [[[0, 1], [2, 3]]])
    assert [t.dtype for t in p.tensors] == ["int8"] and ranges(p) == ((0, 1),)


@pytest.mark.parametrize(
    "dtype, expected",
    [
        (["float16"], ["float16"] * 3),  # shorthand
        ("bfloat16", ["bfloat16"] * 3),  # bare string
        (None, ["float32"] * 3),
        ([], ["float32"] * 3),
        (["Float16", "INT32"], ["float16", "int32", "int32"]),  # case-insensitive, last repeated
        (["int8", None, "bool", "int64", "uint8"], ["int8", "float32", "bool"]),  # null entry, extras ignored
    ],
)
def test_dtype_forms(dtype, expected):
    plans = plan_inputs(["a", "b", "c"], [[2], [2], [2]], dtype, None)
    assert [p.tensors[0].dtype for p in plans] == expected


def test_null_and_unknown_dtype_ignored_for_absent_inputs():
    plans = plan_inputs(["a", "b"], [[2], None], ["int32", "null"], [[0, 5], None])
    assert [p.kind for p in plans] == ["tensor", "none"]


def test_every_documented_dtype_is_accepted():
    for name in DTYPES:
        (p,) = plan_inputs(["x"], [[2]], [name], None)
        assert p.tensors[0].dtype == name


@pytest.mark.parametrize(
    "value_range, expected",
    [
        ([-1, 1], [(-1, 1)] * 3),  # flat pair broadcast to every input
        ([[-1, 1], [-2, 2], [0, 0]], [(-1, 1), (-2, 2), (0, 0)]),
        ([[-1, 1], None, [3, 4]], [(-1, 1), None, (3, 4)]),
        ([[-1, 1]], [(-1, 1)] * 3),  # fewer entries: last repeated
        ([[-1, 1], [5, 6]], [(-1, 1), (5, 6), (5, 6)]),
        ([[1, 2], [3, 4], [5, 6], [7, 8]], [(1, 2), (3, 4), (5, 6)]),  # extras ignored
        (None, [None] * 3),
        ([], [None] * 3),
        ([True, 3], [(1, 3)] * 3),
    ],
)
def test_value_range_forms(value_range, expected):
    plans = plan_inputs(["a", "b", "c"], [[2], [2], [2]], ["float32"], value_range)
    assert [p.tensors[0].value_range for p in plans] == expected
    assert [p.compat_ranges[0] for p in plans] == expected


def test_special_float_bounds():
    plans = plan_inputs(
        ["a", "b", "c", "d", "e"], [[2]] * 5, ["float16"],
        [[-INF, INF], ["-inf", "inf"], ["nan", "nan"], ["-Infinity", "NaN"], [0.1, "inf"]],
    )
    got = [p.tensors[0].value_range for p in plans]
    assert got[0] == got[1] == (-INF, INF)
    assert all(math.isnan(b) for b in got[2])
    assert got[3][0] == -INF and math.isnan(got[3][1])
    assert got[4] == (0.1, INF)


def test_compat_ranges_for_tensorlists():
    # flat numeric pair: the official generator drops it for a TensorList
    (p,) = plan_inputs(["x"], [[[2], [2]]], ["float32"], [-1.0, 1.0])
    assert ranges(p) == ((-1.0, 1.0),) * 2 and p.compat_ranges == (None, None) and p.ranges_differ
    (p,) = plan_inputs(["x"], [[[2], [2]]], ["float32"], [[NAN, NAN]])
    assert p.compat_ranges == (None, None)
    # string-first pair: indexed per element by the official code
    (p,) = plan_inputs(["x"], [[[2], [2], [2]]], ["float32"], [["-inf", "inf"]])
    assert ranges(p) == ((-INF, INF),) * 3
    assert p.compat_ranges == ((-INF, -INF), (INF, INF), (-INF, INF))
    # nested per-element pairs work officially too
    (p,) = plan_inputs(["x"], [[[2], [2]]], ["float32"], [[[-0.1, 0.1], [0, 0]]])
    assert p.compat_ranges == ranges(p) == ((-0.1, 0.1), (0, 0)) and not p.ranges_differ
    # plain tensors never differ
    (p,) = plan_inputs(["x"], [[2]], ["float32"], [-1.0, 1.0])
    assert not p.ranges_differ


def test_tensor_plan_sizes():
    t = TensorPlan((3, 4), "bfloat16", None)
    assert t.numel == 12 and t.nbytes == 24


def test_planning_does_not_import_torch():
    code = (
        "import sys; from pytest_cannbench.taskformat.inputs import plan_inputs, case_seed;"
        "plan_inputs(['x'], [[2, 3]], ['float16'], [-1, 1]); case_seed('k');"
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


# --------------------------------------------------------------------------
# planning: errors
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "names, shape, dtype, value_range, field, fragment",
    [
        (["x"], [[2], [3]], ["float32"], None, "input_shape", "2 shapes given"),
        (["x"], [[2, -1]], ["float32"], None, "input_shape", "input 'x': negative dimension -1"),
        (["x"], [[2, 1.5]], ["float32"], None, "input_shape", "input 'x': dimension 1.5"),
        (["x"], [[2, None]], ["float32"], None, "input_shape", "use null for the whole shape"),
        (["x"], [[True, 2]], ["float32"], None, "input_shape", "not an integer"),
        (["x"], [["4"]], ["float32"], None, "input_shape", "not an integer"),
        (["x"], [[]], ["float32"], None, "input_shape", "empty shape"),
        (["x"], None, ["float32"], None, "input_shape", "expected a list"),
        (["x"], {"x": [2]}, ["float32"], None, "input_shape", "expected a list"),
        (["x", "y"], [[2], 5], ["float32"], None, "input_shape", "input 'y'"),
        (["x"], [[[2], None]], ["float32"], None, "input_shape", "element 1"),
        (["x"], [[[[2]]]], ["float32"], None, "input_shape", "nested deeper"),
        (["x"], [[[2], []]], ["float32"], None, "input_shape", "element 1: empty shape"),
        (["x"], [[2]], ["fp16"], None, "dtype", "input 'x': unknown dtype 'fp16'"),
        (["x"], [[2]], ["hifloat8"], None, "dtype", "'hifloat8'"),
        (["x"], [[2]], [5], None, "dtype", "unknown dtype 5"),
        (["x"], [[2]], {"x": "float16"}, None, "dtype", "expected a dtype name"),
        (["x"], [[2]], [["float16", "float32"]], None, "dtype", "needs one dtype"),
        (["x"], [[[2], [2]]], [[]], None, "dtype", "empty dtype list"),
        (["x"], [[[2], [2]]], [["float16", "fp8"]], None, "dtype", "element 1: unknown dtype 'fp8'"),
        (["x"], [[2]], ["float32"], [["0.5", 1]], "value_range", "quoted number"),
        (["x"], [[2]], ["float32"], [["abc", 1]], "value_range", "'abc' is not a number"),
        (["x"], [[2]], ["float32"], [1, 2, 3], "value_range", "expected a [lo, hi] pair"),
        (["x"], [[2]], ["float32"], [["nan"]], "value_range", "expected a [lo, hi] pair"),
        (["x"], [[2]], ["float32"], [[None, 1]], "value_range", "'x': bound None"),
        (["x"], [[2]], ["float32"], [[[-1, 1]]], "value_range", "nested value_range"),
        (["x", "y"], [[2], [2]], ["float32"], [[-1, 1], 5], "value_range", "input 'y'"),
        (["x"], [[2]], ["int32"], [[NAN, NAN]], "value_range", "not finite"),
        (["x"], [[2]], ["int64"], [["-inf", "inf"]], "value_range", "not finite"),
        (["x"], [[2]], ["bool"], [[0, INF]], "value_range", "not finite"),
        (["x"], [[2]], ["int8"], [[0, 300]], "value_range", "exceeds the dtype bounds"),
        (["x"], [[2]], ["uint8"], [[-1, -1]], "value_range", "exceeds the dtype bounds"),
        (["x"], [[2]], ["int32"], [[5, 1]], "value_range", "empty integer range"),
        (["x"], [[2]], ["float16"], [[70000, 70000]], "value_range", "does not fit"),
        (["x"], [[2]], ["float32"], {"y": [-1, 1]}, "value_range", "names 'y'"),
        (["x"], [[[2], [2]]], ["float32"], [[]], "value_range", "input 'x'"),
        (["x"], [[[2], [2]]], ["int8"], [[[0, 1], [0, 999]]], "value_range", "element 1 (int8)"),
        (["x"], [[[2], [2]]], ["float32"], [[[0, 1], 3]], "value_range", "element 1"),
    ],
)
def test_case_format_errors(names, shape, dtype, value_range, field, fragment):
    with pytest.raises(CaseFormatError) as info:
        plan_inputs(names, shape, dtype, value_range)
    err = info.value
    assert err.field == field
    assert fragment in err.message
    assert str(err) == f"field {field!r}: {err.message}"


def test_case_format_error_is_a_value_error_and_pickles():
    err = CaseFormatError("dtype", "input 'x': unknown dtype 'fp16'")
    assert isinstance(err, ValueError)
    back = pickle.loads(pickle.dumps(err))
    assert (back.field, back.message, str(back)) == (err.field, err.message, str(err))


@pytest.mark.parametrize("numel", [0, 1, 17, (1 << 18) - 1, (1 << 18) + 5, 3 * (1 << 18)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_chunked_uniform_draw_matches_one_whole_tensor_draw(numel: int, dtype: str) -> None:
    """Inputs are drawn chunk by chunk into their own dtype: the bits, and the generator's state after, are
    those of one float64 draw of the whole tensor, scaled, clamped and cast (the official algorithm)."""
    plan = plan_inputs(["x", "y"], [[numel], [3]], [dtype, dtype], [[-2.5, 7.0], [0, 1]])
    got = generate_inputs(plan, 1234)
    gen = torch.Generator()
    gen.manual_seed(1234)
    tdt = getattr(torch, dtype)
    fi = torch.finfo(tdt)
    want = [torch.clamp(torch.rand([numel], dtype=torch.float64, generator=gen) * 9.5 - 2.5, fi.min, fi.max).to(tdt),
            torch.clamp(torch.rand([3], dtype=torch.float64, generator=gen), fi.min, fi.max).to(tdt)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g.view(torch.int16), w.view(torch.int16)) if g.element_size() == 2 else \
            torch.equal(g.view(torch.int32), w.view(torch.int32))


def test_value_range_mapping_forms():
    """bench_lab's two mapping forms: a mapping by input name (cv_agent_matmul_bench; the official generator fails on
    it) is one entry per input; an entry that is a mapping ({name: nd, mean, std}: kernel_bench) is no range, as the
    official generator reads it."""
    by_name = plan_inputs(["a", "b", "c"], [[2], [2], [2]], ["float32", "int32", "float32"],
                          {"b": [3, 4], "a": [-1, 1]})
    assert [p.tensors[0].value_range for p in by_name] == [(-1, 1), (3, 4), None]
    with pytest.raises(CaseFormatError, match=r"names 'z', which proto\.yaml's inputs"):
        plan_inputs(["a"], [[2]], ["float32"], {"z": [0, 1]})
    mapped = plan_inputs(["a", "b"], [[2], [2]], ["float32", "float32"],
                         [{"name": "nd", "mean": [-100, 100], "std": [1, 25]}, [5, 6]])
    assert [p.tensors[0].value_range for p in mapped] == [None, (5, 6)]

"""Unit tests of pytest_cannbench.submission.interfaces: the name rules mapping an operator to a callable."""

from __future__ import annotations

import pytest

from pytest_cannbench.submission.interfaces import (
    MAX_INTERFACES,
    Interface,
    call_candidates,
    provider,
    snake_case_candidates,
    validate_names,
)

# ------------------------------------------------------------------ snake_case_candidates / call_candidates

SNAKE_CASES = [
    # name, expected snake-case candidates (in order)
    ("GridSampler3D", ["grid_sampler3_d", "grid_sampler_3_d", "grid_sampler_3d"]),
    ("AdaptiveAvgPool3D", ["adaptive_avg_pool3_d", "adaptive_avg_pool_3_d", "adaptive_avg_pool_3d"]),
    ("ROIAlign", ["r_o_i_align", "roi_align"]),
    ("NMS", ["n_m_s", "nms"]),
    ("Mish", ["mish"]),
    ("SwiGlu", ["swi_glu"]),
    ("RmsScale", ["rms_scale"]),
]


@pytest.mark.parametrize("name, expected", SNAKE_CASES, ids=[c[0] for c in SNAKE_CASES])
def test_snake_case_candidates(name, expected):
    assert snake_case_candidates(name) == expected


CALL_CASES = [
    # name, schema function name, expected lookup order
    ("GridSampler3D", "grid_sampler_3d",
     ["grid_sampler3_d", "grid_sampler_3_d", "grid_sampler_3d", "gridsampler3d", "GridSampler3D"]),
    ("GridSampler3D", None,
     ["grid_sampler3_d", "grid_sampler_3_d", "grid_sampler_3d", "gridsampler3d", "GridSampler3D"]),
    ("GridSampler3D", "grid_sample_3d_fwd",
     ["grid_sampler3_d", "grid_sampler_3_d", "grid_sampler_3d", "gridsampler3d", "GridSampler3D",
      "grid_sample_3d_fwd"]),
    ("ROIAlign", "roi_align", ["r_o_i_align", "roi_align", "roialign", "ROIAlign"]),
    ("ROIAlign", None, ["r_o_i_align", "roi_align", "roialign", "ROIAlign"]),
    ("NMS", None, ["n_m_s", "nms", "NMS"]),
    ("NMS", "nms", ["n_m_s", "nms", "NMS"]),
    ("Mish", "mish", ["mish", "Mish"]),
    ("SwiGlu", "swi_glu", ["swi_glu", "swiglu", "SwiGlu"]),
    ("AdaptiveAvgPool3D", "adaptive_avg_pool3d",
     ["adaptive_avg_pool3_d", "adaptive_avg_pool_3_d", "adaptive_avg_pool_3d", "adaptiveavgpool3d",
      "AdaptiveAvgPool3D", "adaptive_avg_pool3d"]),
    ("RmsScale", "", ["rms_scale", "rmsscale", "RmsScale"]),
]


@pytest.mark.parametrize("name, function_name, expected", CALL_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CALL_CASES])
def test_call_candidates_order(name, function_name, expected):
    assert call_candidates(name, function_name) == expected


@pytest.mark.parametrize("name, function_name", [(c[0], c[1]) for c in CALL_CASES])
def test_call_candidates_unique_and_start_with_snake_case(name, function_name):
    names = call_candidates(name, function_name)
    assert len(names) == len(set(names))
    assert names[:len(snake_case_candidates(name))] == snake_case_candidates(name)
    assert name in names and name.lower() in names
    if function_name:
        assert function_name in names


def test_snake_case_candidates_of_empty_name():
    assert snake_case_candidates("") == []
    assert call_candidates("", None) == []


# ------------------------------------------------------------------ provider

PROVIDER_CASES = [
    # discovered interfaces, operator, schema function name, expected provider
    ([Interface("gridsampler3d", "module")], "GridSampler3D", None, "gridsampler3d"),
    ([Interface("GRIDSAMPLER3D", "module")], "GridSampler3D", None, "GRIDSAMPLER3D"),
    ([Interface("Grid_Sampler_3D", "module")], "GridSampler3D", None, "Grid_Sampler_3D"),
    ([Interface("grid_sampler_3d", "torch.ops")], "GridSampler3D", None, "grid_sampler_3d"),
    ([Interface("grid_sampler3_d", "module")], "GridSampler3D", None, "grid_sampler3_d"),
    ([Interface("roi_align", "torch.ops")], "ROIAlign", None, "roi_align"),
    ([Interface("roialign", "torch.ops+module")], "ROIAlign", None, "roialign"),
    ([Interface("nms", "torch.ops")], "NMS", None, "nms"),
    ([Interface("Mish", "module")], "Mish", None, "Mish"),
    ([Interface("swiglu_fwd", "module")], "SwiGlu", "swiglu_fwd", "swiglu_fwd"),
    ([Interface("SWIGLU_FWD", "torch.ops")], "SwiGlu", "swiglu_fwd", "SWIGLU_FWD"),
    ([Interface("swi_glu", "module")], "SwiGlu", "swi_glu", "swi_glu"),
    ([Interface("swiglufwd", "module")], "SwiGlu", "SwiGluFwd", "swiglufwd"),
    ([Interface("rms_scale", "torch.ops")], "RmsScale", None, "rms_scale"),
    # earlier candidates win over later ones
    ([Interface("GridSampler3D", "module"), Interface("grid_sampler_3d", "torch.ops")], "GridSampler3D", None,
     "grid_sampler_3d"),
    ([Interface("swiglu_fwd", "module"), Interface("swiglu", "module")], "SwiGlu", "swiglu_fwd", "swiglu"),
    # missing
    ([], "GridSampler3D", "grid_sampler_3d", None),
    ([Interface("grid_sampler_2d", "module"), Interface("gridsampler", "torch.ops")], "GridSampler3D", None, None),
    ([Interface("swiglu_fwd", "module")], "SwiGlu", None, None),
    ([Interface("roi_align_v2", "module")], "ROIAlign", "roi_align", None),
    ([Interface("mish_", "module")], "Mish", None, None),
]


@pytest.mark.parametrize("interfaces, name, function_name, expected", PROVIDER_CASES)
def test_provider(interfaces, name, function_name, expected):
    assert provider(interfaces, name, function_name) == expected


def test_provider_accepts_any_iterable():
    found = provider((Interface(n, "module") for n in ["other", "rms_scale"]), "RmsScale", None)
    assert found == "rms_scale"


# ------------------------------------------------------------------ validate_names


def test_validate_names_merges_and_sorts():
    raw = [["zeta", "module"], ["alpha", "torch.ops"], ["mid", "torch.ops"], ["alpha", "module"],
           ["zeta", "module"]]
    assert validate_names(raw) == [Interface("alpha", "torch.ops+module"), Interface("mid", "torch.ops"),
                                   Interface("zeta", "module")]


@pytest.mark.parametrize("raw, expected", [
    ([], []),
    ([["op", "torch.ops"]], [Interface("op", "torch.ops")]),
    ([["op", "module"]], [Interface("op", "module")]),
    ([["op", "torch.ops"], ["op", "module"]], [Interface("op", "torch.ops+module")]),
    ([["op", "module"], ["op", "torch.ops"]], [Interface("op", "torch.ops+module")]),
    ([["op", "module"], ["op", "module"]], [Interface("op", "module")]),
    ([["b", "module"], ["B", "module"], ["a", "module"]],
     [Interface("B", "module"), Interface("a", "module"), Interface("b", "module")]),
    ([["_private", "module"], ["x" * 200, "torch.ops"], ["a1_B2", "module"]],
     [Interface("_private", "module"), Interface("a1_B2", "module"), Interface("x" * 200, "torch.ops")]),
])
def test_validate_names_accepts(raw, expected):
    assert validate_names(raw) == expected


@pytest.mark.parametrize("raw", [None, "op", 5, {"op": "module"}, (["op", "module"],), b"op"],
                         ids=["None", "str", "int", "dict", "tuple", "bytes"])
def test_validate_names_rejects_non_lists(raw):
    with pytest.raises(ValueError):
        validate_names(raw)


@pytest.mark.parametrize("entry", [
    ["op"], ["op", "module", "x"], [], ("op", "module"), "op", None, {"op": "module"},
    ["op", 5], [5, "module"], [None, "module"], ["op", None], [b"op", "module"],
])
def test_validate_names_rejects_malformed_entries(entry):
    with pytest.raises(ValueError):
        validate_names([["fine", "module"], entry])


@pytest.mark.parametrize("name", [
    "a b", "x; import os", "", "x" * 201, "1abc", "a-b", "a.b", "os.system", "__import__('os')", " op", "op ",
    "op\tx", "\nop",
])
def test_validate_names_rejects_non_identifiers(name):
    with pytest.raises(ValueError):
        validate_names([[name, "module"]])


def test_validate_names_rejects_trailing_newline():
    """``$`` also matches before a final newline: the name pattern must be used with fullmatch."""
    with pytest.raises(ValueError):
        validate_names([["op\n", "module"]])


@pytest.mark.parametrize("source", ["torch.ops+module", "Module", "TORCH.OPS", "", "cann_bench", "torch_ops",
                                    "module "])
def test_validate_names_rejects_unknown_sources(source):
    with pytest.raises(ValueError):
        validate_names([["op", source]])


def test_validate_names_truncates_at_max_interfaces():
    raw = [[f"op{i:05d}", "module"] for i in range(MAX_INTERFACES + 5)]
    raw.append(["not an identifier", "module"])  # past the limit: never looked at
    raw.append("not even an entry")
    out = validate_names(raw)
    assert len(out) == MAX_INTERFACES
    assert out[0] == Interface("op00000", "module")
    assert out[-1] == Interface(f"op{MAX_INTERFACES - 1:05d}", "module")
    assert Interface(f"op{MAX_INTERFACES:05d}", "module") not in out


def test_validate_names_checks_entries_up_to_the_limit():
    raw = [[f"op{i}", "module"] for i in range(MAX_INTERFACES - 1)] + [["bad name", "module"]]
    with pytest.raises(ValueError):
        validate_names(raw)

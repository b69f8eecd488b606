"""Unit tests for anchors.py: the alias table, both metadata nestings, the 910b2 fallback and its warnings.

The fixtures under ``tests/fixtures/metadata_anchors`` are small hand-written metadata files, not
copies of the official ones, so these tests do not depend on a CANN Bench checkout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_cannbench.taskformat.metadata import (
    A3_HARDWARE,
    DEFAULT_HARDWARE,
    Anchor,
    MetadataAnchors,
    MetadataError,
    canonical_hardware,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metadata_anchors"
NESTED = FIXTURES / "nested" / "metadata"
FLAT = FIXTURES / "flat" / "metadata"
NO_DEFAULT = FIXTURES / "no_default" / "metadata"


@pytest.mark.parametrize("name, key", [
    ("Ascend910_9362", "910b2"),
    ("Ascend910_9362B", "910b2"),
    ("Ascend910B2", "910b2"),
    ("Ascend910B2C", "910b2"),  # longest prefix: Ascend910B2
    ("Atlas-A2", "910b2"),
    ("910b2", "910b2"),
    ("Ascend910_9361", "910b1"),
    ("Ascend910B1", "910b1"),
    ("Ascend310P3", "310p"),
    ("Ascend950PR_9599", "950pr"),
    ("Ascend910_9391", A3_HARDWARE),  # A3: not in the official table
    ("Ascend910_9372", A3_HARDWARE),
    ("Ascend910_9382", A3_HARDWARE),
    ("  Ascend910B2\n", "910b2"),
    ("Ascend910B3", "Ascend910B3"),  # unknown: unchanged
    ("cpu", "cpu"),
    ("NVIDIA H200", "NVIDIA H200"),
])
def test_canonical_hardware(name: str, key: str) -> None:
    assert canonical_hardware(name) == key


# (rel_path, case_id, baseline_us, t_hw_us, source or None when the lookup is None)
B2 = "metadata:910b2"
FROM_950 = "metadata:910b2 (fallback from 950pr)"
LOOKUPS_910B2 = [
    ("level1/exp", 1, 10.0, 1.0, B2),
    ("level1/exp", 2, 20.0, 2.0, B2),  # {hardware: value} mapping, int t_hw
    ("level1/exp", 3, 30.0, 3.0, B2),  # extra key scale_alg ignored
    ("level1/exp", 4, None, 4.0, B2),  # baseline 0 -> missing (the scorer's proxy applies)
    ("level1/exp", 5, 50.0, None, B2),  # negative t_hw -> missing
    ("level1/exp", 6, None, None, None),  # empty entry
    ("level1/exp", 7, None, 0.5, B2),  # "12.5" is a string, not a number
    ("level1/exp", 9, None, None, None),  # mapping without this hardware, null baseline
    ("level1/exp", 99, None, None, None),  # no such case
    ("level1/nope", 1, None, None, None),  # no such operator
    ("exp", 1, None, None, None),  # missing level layer does not match
    ("level2/scatter", 12, 6.83, 6.83, B2),
]

LOOKUPS_950PR = [
    ("level1/exp", 1, 4.0, 0.5, "metadata:950pr"),
    ("level1/exp", 2, 20.0, 2.0, FROM_950),  # the fallback reads the mapping's 910b2 value
    ("level1/exp", 3, 30.0, 1.5, "metadata:950pr (baseline_perf_us from metadata:910b2, fallback)"),
    ("level1/exp", 8, 9.0, 0.25, "metadata:950pr"),
    ("level1/exp", 9, None, None, None),
    ("level1/exp", 5, 50.0, None, FROM_950),
]


def _check(anchors: MetadataAnchors, rel_path: str, case_id: int, baseline, t_hw, source) -> None:
    anchor = anchors.lookup(rel_path, case_id)
    if source is None:
        assert anchor is None
    else:
        assert anchor is not None
        assert (anchor.baseline_us, anchor.t_hw_us, anchor.source) == (baseline, t_hw, source)


@pytest.mark.parametrize("rel_path, case_id, baseline, t_hw, source", LOOKUPS_910B2)
def test_lookup_910b2_nested(rel_path, case_id, baseline, t_hw, source) -> None:
    _check(MetadataAnchors(NESTED, "Ascend910B2"), rel_path, case_id, baseline, t_hw, source)


@pytest.mark.parametrize("rel_path, case_id, baseline, t_hw, source", LOOKUPS_950PR)
def test_lookup_950pr_falls_back_field_by_field(rel_path, case_id, baseline, t_hw, source) -> None:
    _check(MetadataAnchors(NESTED, "Ascend950PR_9599"), rel_path, case_id, baseline, t_hw, source)


@pytest.mark.parametrize("rel_path, case_id, baseline, t_hw, source", [
    ("flash_attention", 1, 120.0, 12.0, B2),
    ("flash_attention", 2, None, 30.0, B2),
    ("level1/flash_attention", 1, None, None, None),
    ("flash_attention", 3, None, None, None),
])
def test_lookup_flat_suite(rel_path, case_id, baseline, t_hw, source) -> None:
    _check(MetadataAnchors(FLAT), rel_path, case_id, baseline, t_hw, source)


def test_values_are_floats() -> None:
    anchor = MetadataAnchors(NESTED).lookup("level1/exp", 2)
    assert anchor is not None and type(anchor.t_hw_us) is float


def test_own_file_without_fallbacks_warns_only_about_invalid_values() -> None:
    anchors = MetadataAnchors(NESTED, "910b2")
    for case_id in (1, 2, 3, 4, 5, 6, 8, 99):
        anchors.lookup("level1/exp", case_id)
    assert anchors.warnings == [] and anchors.fallback_cases == []
    anchors.lookup("level1/exp", 7)
    anchors.lookup("level1/exp", 7)
    assert len(anchors.warnings) == 1
    assert "910b2.json" in anchors.warnings[0] and "'12.5'" in anchors.warnings[0]


@pytest.mark.parametrize("device, why", [
    ("Ascend910B1", "910b1.json not found"),
    ("Ascend910_9391", "Ascend 910_93 (Atlas A3) has no anchors"),
    ("NVIDIA H200", "NVIDIA H200.json not found"),
])
def test_missing_hardware_file_falls_back_with_one_warning(device: str, why: str) -> None:
    anchors = MetadataAnchors(NESTED, device)
    assert anchors.file is None and anchors.fallback_file == NESTED / "910b2.json"
    assert len(anchors.warnings) == 1
    assert why in anchors.warnings[0] and "910b2.json" in anchors.warnings[0]
    first = anchors.lookup("level1/exp", 1)
    assert first == Anchor(10.0, 1.0, f"metadata:910b2 (fallback from {canonical_hardware(device)})")
    for case_id in (1, 2, 3, 4, 5, 6, 8, 9):  # 7 is invalid: a warning of its own kind
        anchors.lookup("level1/exp", case_id)
    assert len(anchors.warnings) == 1  # once per session, not once per case
    assert "level1/exp_1" in anchors.fallback_cases


def test_cases_missing_in_own_file_warn_once() -> None:
    anchors = MetadataAnchors(NESTED, "950pr")
    assert anchors.warnings == []
    anchors.lookup("level1/exp", 1)  # present: no warning
    assert anchors.warnings == []
    for case_id in (2, 3, 5, 2):
        anchors.lookup("level1/exp", case_id)
    assert len(anchors.warnings) == 1
    assert "950pr.json" in anchors.warnings[0] and "level1/exp_2" in anchors.warnings[0]
    assert anchors.fallback_cases == ["level1/exp_2", "level1/exp_3", "level1/exp_5", "level1/exp_2"]


def test_no_default_file() -> None:
    own = MetadataAnchors(NO_DEFAULT, "950pr")
    assert own.warnings == [] and own.fallback_file is None
    assert own.lookup("level1/exp", 1) == Anchor(4.0, 0.5, "metadata:950pr")
    assert own.lookup("level1/exp", 2) is None
    default = MetadataAnchors(NO_DEFAULT, DEFAULT_HARDWARE)
    assert not default.available
    assert len(default.warnings) == 1 and "no baseline_perf_us/t_hw_us" in default.warnings[0]
    assert default.lookup("level1/exp", 1) is None


@pytest.mark.parametrize("case_id, relation", [(12, "equals"), (13, "exceeds")])
def test_t_hw_not_below_baseline_is_kept_and_flagged(case_id: int, relation: str) -> None:
    anchors = MetadataAnchors(NESTED)
    anchor = anchors.lookup("level2/scatter", case_id)
    assert anchor is not None and anchor.t_hw_us is not None and anchor.baseline_us is not None
    assert len(anchor.flags) == 1 and relation in anchor.flags[0]
    anchors.lookup("level2/scatter", case_id)
    assert len(anchors.warnings) == 1 and f"level2/scatter_{case_id}" in anchors.warnings[0]
    assert anchors.lookup("level1/exp", 1).flags == ()


def test_metadata_found_upward_from_bench_root(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "nested", tmp_path / "tasks")
    deep = tmp_path / "tasks" / "level1" / "exp"
    deep.mkdir(parents=True)
    for start in (tmp_path / "tasks", deep):
        anchors = MetadataAnchors.from_bench_root(start)
        assert anchors.metadata_dir == (tmp_path / "tasks" / "metadata").resolve()
        assert anchors.hardware == DEFAULT_HARDWARE and anchors.warnings == []
        assert anchors.lookup("level1/exp", 1) == Anchor(10.0, 1.0, B2)
    assert MetadataAnchors.from_bench_root(deep, "Ascend950PR_9599").hardware == "950pr"


def test_no_metadata_dir_means_no_anchors_and_no_warnings(tmp_path: Path) -> None:
    anchors = MetadataAnchors.from_bench_root(tmp_path)
    assert anchors.metadata_dir is None and not anchors.available
    assert anchors.lookup("level1/exp", 1) is None and anchors.warnings == []


@pytest.mark.parametrize("text, problem", [
    ('{"level1": {', "JSON syntax error"),
    ('[1, 2]', "top level must be a mapping"),
    (b"\xff\xfe{}", "not UTF-8"),
])
def test_broken_metadata_file_names_file(tmp_path: Path, text, problem: str) -> None:
    path = tmp_path / "metadata" / "910b2.json"
    path.parent.mkdir()
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(MetadataError) as info:
        MetadataAnchors(path.parent)
    assert str(path) in str(info.value) and problem in str(info.value)


def test_pure_python_modules_do_not_import_torch() -> None:
    code = ("import sys; import pytest_cannbench.taskformat.metadata, pytest_cannbench.taskformat.perf_model, "
            "pytest_cannbench.timing.roofline; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_hardware_name_cannot_leave_metadata_dir(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "nested", tmp_path / "tasks")
    (tmp_path / "tasks" / "evil.json").write_text('{"level1": {"exp": {"1": {"baseline_perf_us": 1e6}}}}')
    anchors = MetadataAnchors(tmp_path / "tasks" / "metadata", "../evil")
    assert anchors.file is None and len(anchors.warnings) == 1
    assert anchors.lookup("level1/exp", 1) == Anchor(10.0, 1.0, "metadata:910b2 (fallback from ../evil)")


# --- T_HW checked against the trusted live baseline (issue 20) ---------------------------------------------


def test_a_roofline_the_baseline_never_beat_stands() -> None:
    from pytest_cannbench.timing.anchors import check_t_hw

    assert check_t_hw(100.0, 40.0, 250.0).t_hw_us == 100.0 and check_t_hw(100.0, 40.0, 250.0).flag is None
    assert check_t_hw(100.0, 40.0, 100.0).flag is None  # equal is not faster
    assert check_t_hw(100.0, None, 50.0).flag is None  # metadata or KernelBench: no written-bytes bound
    assert check_t_hw(100.0, 40.0, None).flag is None  # no live baseline


def test_a_baseline_faster_than_the_roofline_falls_back_to_the_bytes_written() -> None:
    from pytest_cannbench.timing.anchors import check_t_hw

    gather = check_t_hw(800.0, 12.0, 95.0)  # a gather reads a few rows of a large table: the model over-counts
    assert gather.t_hw_us == 12.0 and gather.flag == "t_hw_outputs_only" and gather.source_suffix
    assert "95.0 us" in str(gather.note) and "800.0 us" in str(gather.note) and "12.0 us" in str(gather.note)
    no_lower = check_t_hw(800.0, 900.0, 95.0)  # the outputs alone bound it higher: nothing to fall back to
    assert no_lower.t_hw_us == 800.0 and no_lower.flag is None

"""The case key the controller of an interrupted xdist session reads from a node id (``nodes.keys.key_from_nodeid``)
is the key collection gives the item: one definition, read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_cannbench.nodes.keys import key_from_nodeid


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for op in ("tasks/level1/exp", "flat/relu"):
        (tmp_path / op).mkdir(parents=True)
        (tmp_path / op / "cases.yaml").write_text("cases: []\n")
    (tmp_path / "kb" / "level1").mkdir(parents=True)
    (tmp_path / "kb" / "level1" / "19_ReLU.py").write_text("")
    return tmp_path


@pytest.mark.parametrize("nodeid, key", [
    ("tasks/level1/exp/cases.yaml::exp[03]", "level1/exp_3"),
    ("tasks/level1/exp/cases.yaml::exp[03#2]", "level1/exp_3"),
    ("tasks/level1/exp/cases.yaml::exp[#4]", "level1/exp_#4"),
    ("tasks/level1/exp/cases.yaml::exp[task]", "level1/exp_task"),
    ("tasks/level1/exp/cases.yaml::hidden-07", "level1/exp#hidden-07"),
    ("tasks/level1/exp/cases.yaml::exp[01][cand=run1_s0]", "cand=run1_s0/level1/exp_1"),
    ("flat/relu/cases.yaml::relu[12]", "relu_12"),
    ("kb/level1/19_ReLU.py::19_ReLU[trial2]", "level1/19_ReLU.py_2"),
    ("kb/level1/19_ReLU.py::19_ReLU[timed][cand=honest_s0]", "cand=honest_s0/level1/19_ReLU.py_6"),
    ("tests/test_x.py::test_y", None),
    ("tests/test_x.py::test_y[1]", None),
    ("tasks/level1/exp/cases.yaml::exp[x]", None),
    ("tasks/level1/exp/cases.yaml", None),
])
def test_keys_from_node_ids(tree: Path, nodeid: str, key: str | None) -> None:
    assert key_from_nodeid(nodeid, tree, kb_trials=5) == key

"""Split scores and the hidden gate (issue 18) on hand-made outcomes."""

from __future__ import annotations

import pytest

from pytest_cannbench.report.leaderboard import score_cases
from pytest_cannbench.report.markdown import render
from pytest_cannbench.report.splits import junit_properties


def outcome(rel: str, key: str, status: str, split: str = "public", failure_type: str | None = None) -> dict:
    return {"key": key, "rel_path": rel, "operator": rel.split("/")[-1], "case_id": None, "status": status,
            "failure_type": failure_type, "split": split, "timing": {}}


def run(hidden_status: str, *, gate: bool = True, public_status: str = "passed",
        failure: str | None = "precision_mismatch") -> dict:
    op = "level1/exp"
    cases = [outcome(op, f"{op}_{i}", public_status, failure_type=None if public_status == "passed" else failure)
             for i in (1, 2)]
    cases.append(outcome(op, f"{op}#hidden-01", "passed", "hidden"))
    cases.append(outcome(op, f"{op}#hidden-02", hidden_status, "hidden",
                         None if hidden_status == "passed" else failure))
    cases.append(outcome(op, f"{op}#hidden-03", "skipped", "hidden", "hidden_dropped"))
    cases.append(outcome("level2/other", "level2/other_1", "passed"))
    return score_cases(cases, gate=gate)


def test_all_passing_scores_the_same_on_every_split():
    board = run("passed")
    op = board["operators"][0]
    assert op["splits"]["public"]["score"] == op["splits"]["hidden"]["score"] == op["score"] == pytest.approx(50.0)
    assert op["cases_total"] == 4 and op["splits"]["dropped"] == 1  # the dropped case is never scored
    assert board["splits"]["dropped"] == 1 and board["splits"]["hidden_cases"] == 2
    assert board["splits"]["function_rate_gap"] == pytest.approx(0.0)
    assert board["levels"]["level1"]["hidden_score"] == pytest.approx(50.0)
    assert board["splits"]["combined_score"] == board["total_score"] == pytest.approx(100.0)
    assert all("split" in c for o in board["operators"] for c in o["cases"])


def test_public_passes_hidden_fails_is_not_ranked_and_scores_zero_combined():
    board = run("failed")
    op = board["operators"][0]
    assert op["status"] == "not_ranked" and op["not_ranked_reason"] == "fails held-out cases"
    assert op["score"] == 0.0 and op["splits"]["combined"]["ungated_score"] > 0
    assert op["splits"]["public"]["score"] == pytest.approx(50.0) and op["splits"]["hidden"]["score"] < 50
    assert op["splits"]["function_rate_gap"] == pytest.approx(0.5)
    assert board["splits"]["not_ranked"] == ["level1/exp"]
    assert board["total_score"] == pytest.approx(50.0)  # level2/other only
    text = render({**board, "weights": {}})
    assert "### Public and hidden splits" in text and "not ranked: fails held-out cases" in text
    props = dict(junit_properties(board))
    assert props["cann_combined_score"] == pytest.approx(50.0) and props["cann_not_ranked"] == "level1/exp"


@pytest.mark.parametrize("kwargs", [
    {"gate": False},  # the gate is off
    {"public_status": "failed"},  # not fitted to the public cases: simply worse
    {"failure": "golden_error"},  # the harness's failure, not the candidate's
])
def test_the_gate_only_catches_a_candidate_failing_held_out_cases_only(kwargs):
    board = run("failed" if "failure" not in kwargs else "error", **kwargs)
    op = board["operators"][0]
    assert op["status"] != "not_ranked" and op["splits"]["ranked"]
    assert op["score"] == op["splits"]["combined"]["score"]


def test_a_run_without_hidden_cases_has_no_split_fields():
    board = score_cases([outcome("level1/exp", "level1/exp_1", "passed")])
    assert "splits" not in board and "splits" not in board["operators"][0]
    assert board["levels"]["level1"] == {"score": pytest.approx(50.0), "operators": 1}

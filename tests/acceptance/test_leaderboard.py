"""The leaderboard, results.jsonl, --cann-resume and junit-xml from real inner sessions."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from inner import run_inner

from pytest_cannbench.figures import hap

QUICK = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-repeat=2",
         "--cann-warmup=0")
KEYS = {"level1/softplus_1", "level1/softplus_2", "level1/softplus_3", "level1/softplus_4", "level2/rms_scale_1",
        "level2/rms_scale_2"}


def board_of(root: Path) -> dict:
    return json.loads((root / "reports" / "leaderboard.json").read_text())


def hand_operator_score(op: dict) -> float:
    """Eq.4 recomputed from the board's own case entries, independently of scoring.py's operator_score."""
    n = len(op["cases"])
    if op["score_error"]:
        return 0.0
    passed = [c for c in op["cases"] if c["status"] == "passed"]
    runtime = [c for c in op["cases"] if c["status"] != "passed" and c["failure_type"] != "precision_mismatch"]
    perf = 0.0
    for c in passed:
        tb, tc, th = c["t_baseline_us"], c["t_cand_us"], c["t_hw_us"]
        if tc is not None:
            perf += (tb - th) / ((tc - th) + (tb - th))
    return 20 * (n - len(runtime)) / n + 30 * len(passed) / n + 50 * perf / n


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_leaderboard_of_a_run_with_a_crashing_case(xdist, pytester, capsys, task_tree, prebuilt):
    tasks = task_tree("submission")
    run = run_inner(pytester, capsys, tasks, *QUICK, f"--cann-source={prebuilt('broken/segfault')}",
                    "--junitxml=junit.xml", *xdist)
    board = board_of(pytester.path)
    assert board["schema"] == "pytest-cannbench/leaderboard/1"
    cases = {c["key"]: (op, c) for op in board["operators"] for c in op["cases"]}
    assert set(cases) == KEYS  # every collected case exactly once
    op, crashed = cases["level1/softplus_2"]
    assert (crashed["status"], crashed["failure_type"]) == ("crashed", "candidate_crashed")
    assert "SIGSEGV" in crashed["message"] and crashed["hap"] is None
    for key in KEYS - {"level1/softplus_2"}:
        entry = cases[key][1]
        assert entry["status"] == "passed" and entry["t_cand_us"] > 0 and entry["anchor_source"]["baseline"] == "live"
        assert entry["hap"] == pytest.approx(hap(entry["t_baseline_us"], entry["t_cand_us"], entry["t_hw_us"])[0])
    for op in board["operators"]:
        assert op["score"] == pytest.approx(hand_operator_score(op)), op["rel_path"]
    softplus = next(o for o in board["operators"] if o["rel_path"] == "level1/softplus")
    assert softplus["compile_score"] == pytest.approx(20 * 3 / 4)
    assert softplus["function_score"] == pytest.approx(30 * 3 / 4)
    assert board["total_score"] == pytest.approx(sum(o["score"] for o in board["operators"]))
    assert board["levels"]["level1"]["score"] == pytest.approx(softplus["score"])
    assert board["submission"]["status"] == "ok" and len(board["submission"]["wheel_sha256"]) == 64
    assert board["config"]["repeat"] == 2 and board["weights"]["performance"] == 0.5
    assert board["environment"]["device"] == "cpu" and board["environment"]["torch"]
    assert "total score" in run.text and "written:" in run.text

    # junit: properties on every case, no warnings about record_property
    props = {}
    for tc in ET.parse(pytester.path / "junit.xml").getroot().iter("testcase"):
        found = {p.get("name"): p.get("value") for p in tc.iter("property")}
        props[found["cann_case"]] = found
    assert set(props) == KEYS
    assert props["level1/softplus_1"]["cann_status"] == "passed" and float(props["level1/softplus_1"]["cann_hap"]) > 0
    assert props["level1/softplus_2"]["cann_failure_type"] == "candidate_crashed"
    assert "PytestWarning" not in run.text and "record_property" not in run.text


def test_results_jsonl_and_resume(pytester, capsys, task_tree, prebuilt):
    tasks = task_tree("submission")
    source = f"--cann-source={prebuilt('broken/missing_op')}"
    first = run_inner(pytester, capsys, tasks, *QUICK, source)
    journal = pytester.path / "reports" / "results.jsonl"
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert {entry["outcome"]["key"] for entry in lines} == KEYS
    assert len({entry["run"] for entry in lines}) == 1
    # each graded case says where its time went (pytest_cannbench.phases), measured where the work happened
    seconds = next(e["outcome"]["seconds"] for e in lines if e["outcome"]["key"] == "level1/softplus_1")
    for phase in ("inputs", "golden", "native", "inputs_judge", "transfer", "call", "contract", "compare", "timing"):
        assert seconds[phase] >= 0 and seconds[f"{phase}_cpu"] >= 0, phase
    assert seconds["timing"] > seconds["compare"] > 0 and seconds["golden_peak_mib"] > 0
    first_board = board_of(pytester.path)

    # a resumed identical run skips every recorded case and reports the same scores
    second = run_inner(pytester, capsys, tasks, *QUICK, source, "--cann-resume")
    assert all(c.outcome == "skipped" for c in second.cases.values())
    assert "resumed from results.jsonl: 6 cases" in second.text
    board = board_of(pytester.path)
    assert board["total_score"] == pytest.approx(first_board["total_score"])
    assert board["config"]["resumed_cases"] == 6

    # a recorded case this version cannot read (a status it does not know) is graded again, never resumed
    text = journal.read_text()
    journal.write_text(text.replace('"key": "level1/softplus_1", "rel_path": "level1/softplus", "operator": '
                                    '"Softplus", "case_id": 1, "status": "passed"', '"key": "level1/softplus_1", '
                                    '"rel_path": "level1/softplus", "operator": "Softplus", "case_id": 1, '
                                    '"status": "exploded"', 1))
    assert journal.read_text() != text
    regraded = run_inner(pytester, capsys, tasks, *QUICK, source, "--cann-resume")
    assert regraded.cases["softplus[01]"].outcome == "passed" and regraded.cases["softplus[02]"].outcome == "skipped"
    assert "resumed from results.jsonl: 5 cases" in regraded.text

    # another configuration is another run: nothing is skipped
    third = run_inner(pytester, capsys, tasks, *QUICK, source, "--cann-resume", "--cann-seed=5")
    assert third.cases["softplus[01]"].outcome == "passed"
    assert first.ret == 0


def test_a_resume_regrades_after_any_result_changing_setting_and_keeps_what_did_not(pytester, capsys, task_tree):
    """The resume identity is every setting declared to change results, on the command line or ini-only; a
    setting that does not (a timeout) keeps the recorded cases, and a previous release's spelling of a setting is
    the same run as its new spelling."""
    tasks = task_tree("submission")
    base = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-source=@golden",
            "--cann-no-perf")
    assert run_inner(pytester, capsys, tasks, *base).ret == 0

    def resumed(*args: str) -> int:
        run = run_inner(pytester, capsys, tasks, *base, "--cann-resume", *args)
        assert run.ret == 0 and set(run.cases) >= {"softplus[01]", "rms_scale[02]"}, run.text[-2000:]
        skipped = {name for name, case in run.cases.items() if case.outcome == "skipped"}
        assert skipped in (set(), set(run.cases)), skipped  # all kept, or all graded again
        return len(skipped)

    assert resumed("--cann-case-timeout=200") == 6  # a resource bound: not part of the identity
    assert resumed("--cann-guard=strict") == 0  # the KernelBench guard rule
    assert resumed("--cann-timing-target=5") == 0
    assert resumed("-o", "cann_timing_isolation=off") == 0  # ini-only settings count too
    assert resumed("-o", "cann_hap_target=0.05") == 0
    assert resumed("--cann-kb-guard=cann") == 6  # the previous spelling of --cann-guard=strict: graded above
    assert resumed() == 6


def test_a_killed_session_keeps_what_it_finished(pytester, task_tree, prebuilt):
    """pytest killed mid-run (SIGKILL): results.jsonl still holds the cases that finished."""
    import signal
    import subprocess
    import sys
    import time

    task_tree("submission")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *QUICK, f"--cann-source={prebuilt('broken/hang')}",
                             "--cann-case-timeout=600", "-p", "no:randomly"], cwd=pytester.path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = pytester.path / "reports" / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # softplus[01] passes, softplus[02] hangs forever
        if journal.is_file() and "level1/softplus_1" in journal.read_text():
            break
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    keys = [json.loads(line)["outcome"]["key"] for line in journal.read_text().splitlines()]
    assert keys == ["level1/softplus_1"]
    assert not (pytester.path / "reports" / "leaderboard.json").exists()


def test_merged_shards_score_like_the_unsharded_run(pytester, capsys, task_tree, prebuilt, tmp_path):
    """Accuracy-only (deterministic) runs: the whole tree, then two shards merged by `cannbench merge`."""
    import subprocess
    import sys

    tasks = task_tree("submission")
    base = ("--cann-tasks=tasks", "-p", "no:cacheprovider", "--cann-golden-cache=off", "--cann-no-perf",
            f"--cann-source={prebuilt('broken/segfault')}")
    run_inner(pytester, capsys, tasks, *base, "-o", f"cann_leaderboard={tmp_path / 'whole.json'}")
    shards = []
    for k in (1, 2):
        out = tmp_path / f"shard{k}.json"
        run_inner(pytester, capsys, tasks, *base, f"--cann-shard={k}/2", "-o", f"cann_leaderboard={out}")
        shards.append(json.loads(out.read_text()))
    ops = [{o["rel_path"] for o in board["operators"]} for board in shards]
    assert ops[0] | ops[1] == {"level1/softplus", "level2/rms_scale"} and not ops[0] & ops[1]
    merged = tmp_path / "merged.json"
    done = subprocess.run([sys.executable, "-m", "pytest_cannbench.cli", "merge", str(merged),
                           str(tmp_path / "shard1.json"), str(tmp_path / "shard2.json")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    whole, joined = json.loads((tmp_path / "whole.json").read_text()), json.loads(merged.read_text())
    assert joined["total_score"] == pytest.approx(whole["total_score"]) and whole["total_score"] > 0
    assert joined["levels"].keys() == whole["levels"].keys()
    for level, entry in whole["levels"].items():
        assert joined["levels"][level]["operators"] == entry["operators"]
        assert joined["levels"][level]["score"] == pytest.approx(entry["score"])
    for a, b in zip(joined["operators"], whole["operators"]):
        assert (a["rel_path"], a["status"]) == (b["rel_path"], b["status"])
        assert a["score"] == pytest.approx(b["score"])
        assert [(c["key"], c["status"]) for c in a["cases"]] == [(c["key"], c["status"]) for c in b["cases"]]

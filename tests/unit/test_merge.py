"""``cannbench merge``: boards and results.jsonl files of several runs into one board, every score recomputed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from synth_outcomes import all_outcomes, board_of, outcome, timed

from pytest_cannbench.cli import main
from pytest_cannbench.nodes.sharding import in_shard
from pytest_cannbench.report import leaderboard
from pytest_cannbench.report.eval_report import to_eval_report
from pytest_cannbench.report.merge import outcomes_from_board

ROOT = Path(__file__).resolve().parents[2]


def _write_board(path: Path, outcomes: list[dict[str, Any]], **kwargs: Any) -> Path:
    leaderboard.write(path, board_of(outcomes, **kwargs))
    return path


def _write_jsonl(path: Path, outcomes: list[dict[str, Any]], run: str = "abc123", extra: tuple[str, ...] = ()) -> Path:
    lines = [leaderboard.dumps({"run": run, "outcome": o}) for o in outcomes]
    path.write_text("\n".join(lines + list(extra)) + "\n", encoding="utf-8")
    return path


def _scores(board: dict[str, Any]) -> dict[str, Any]:
    return {"total": board["total_score"], "levels": board["levels"], "cases_total": board["cases_total"],
            "counts": board["counts"], "failure_types": board["failure_types"],
            "operators": [(op["rel_path"], op["name"], op["status"], op["score"], op["compile_score"],
                           op["function_score"], op["performance_score"], op["cases_passed"], op["cases_total"],
                           op["speedup_geomean"], [(c["key"], c["status"], c["hap"], c["flags"]) for c in op["cases"]])
                          for op in board["operators"]]}


def _merge(tmp_path: Path, *inputs: Path, extra: tuple[str, ...] = ()) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "out" / "merged.json"
    rc = main(["merge", str(out), *map(str, inputs), *extra])
    return rc, (json.loads(out.read_text()) if rc == 0 else {})


def test_two_shard_boards_merge_into_the_whole_board(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = all_outcomes()
    halves = [[o for o in outcomes if in_shard(o["rel_path"], k, 2)] for k in (1, 2)]
    assert all(halves) and sum(map(len, halves)) == len(outcomes)
    a = _write_board(tmp_path / "a.json", halves[0], config={"seed": 0, "shard": [1, 2], "run_identity": "abc123"})
    b = _write_board(tmp_path / "b.json", halves[1], config={"seed": 0, "shard": [2, 2], "run_identity": "abc123"})
    rc, merged = _merge(tmp_path, a, b)
    assert rc == 0
    whole = board_of(outcomes)
    assert _scores(merged) == _scores(whole)
    assert merged["submission"] == whole["submission"] and merged["environment"] == whole["environment"]
    assert merged["config"] == {"seed": 0, "shard": None, "run_identity": "abc123"}
    assert merged["schema"] == leaderboard.SCHEMA
    assert [m["cases"] for m in merged["merged_from"]] == [len(halves[0]), len(halves[1])]
    err = capsys.readouterr().err
    assert "warning" not in err and "duplicate" not in err  # shard and paths legitimately differ


def test_an_operator_split_across_inputs_is_scored_as_one(tmp_path: Path) -> None:
    outcomes = all_outcomes()
    first, second = outcomes[::2], outcomes[1::2]  # every operator's cases land in both inputs
    rc, merged = _merge(tmp_path, _write_board(tmp_path / "a.json", first), _write_board(tmp_path / "b.json", second))
    assert rc == 0 and _scores(merged) == _scores(board_of(outcomes))


def test_scores_are_recomputed_not_copied(tmp_path: Path) -> None:
    path = _write_board(tmp_path / "a.json", all_outcomes())
    board = json.loads(path.read_text())
    board["total_score"] = 1e9
    for op in board["operators"]:
        op["score"] = 1e6
        for case in op["cases"]:
            case["hap"] = 99.0
    path.write_text(json.dumps(board))
    rc, merged = _merge(tmp_path, path)
    assert rc == 0 and _scores(merged) == _scores(board_of(all_outcomes()))


def test_outcomes_from_board_round_trip() -> None:
    outcomes = all_outcomes()
    back = outcomes_from_board(json.loads(leaderboard.dumps(board_of(outcomes))))
    assert sorted(o["key"] for o in back) == sorted(o["key"] for o in outcomes)
    by_key = {o["key"]: o for o in back}
    for o in outcomes:
        got = by_key[o["key"]]
        for name in ("rel_path", "operator", "case_id", "status", "failure_type", "message", "accuracy", "timing"):
            assert got[name] == o[name], (o["key"], name)


def test_results_jsonl_and_boards_merge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = all_outcomes()
    board = _write_board(tmp_path / "leaderboard.json", outcomes[:6])
    jsonl = _write_jsonl(tmp_path / "results.jsonl", outcomes[6:],
                         extra=('{"run": "abc123", "outcome": {"key": "level1/x_1"', '{"hello": 1}', "[1, 2]"))
    rc, merged = _merge(tmp_path, board, jsonl)
    assert rc == 0 and _scores(merged) == _scores(board_of(outcomes))
    assert merged["submission"] == board_of([])["submission"]  # from the leaderboard input, not the jsonl
    err = capsys.readouterr().err
    assert err.count("; ignored") == 3 and "results.jsonl:" in err and "warning" not in err


def test_jsonl_only_merge(tmp_path: Path) -> None:
    outcomes = all_outcomes()
    rc, merged = _merge(tmp_path, _write_jsonl(tmp_path / "r1.jsonl", outcomes[:5]),
                        _write_jsonl(tmp_path / "r2.jsonl", outcomes[5:]))
    assert rc == 0 and _scores(merged) == _scores(board_of(outcomes))
    assert merged["submission"] is None and merged["environment"] == {} and merged["config"] == {}
    assert merged["weights"]["hap_cap"] is False


def test_hap_cap_follows_the_first_board_or_the_flag(tmp_path: Path) -> None:
    fast = [outcome("level1/exp", "Exp", 1, timing=timed(1.0, t_base=20.0, t_hw=2.0))]  # HAP > 1
    path = tmp_path / "capped.json"
    leaderboard.write(path, leaderboard.build(fast, submission=None, environment={}, config={}, cap=True))
    rc, merged = _merge(tmp_path, path)
    assert rc == 0 and merged["weights"]["hap_cap"] is True and merged["operators"][0]["cases"][0]["hap"] == 1.0
    rc, merged = _merge(tmp_path, path, extra=("--no-hap-cap",))
    case = merged["operators"][0]["cases"][0]
    assert rc == 0 and merged["weights"]["hap_cap"] is False
    assert case["hap"] == 1.0 and "implausible_time" in case["flags"]  # below T_HW: never above 1 (issue 16)


def test_non_finite_times_survive_the_round_trip(tmp_path: Path) -> None:
    outcomes = [outcome("level1/exp", "Exp", 1, timing=timed(10.0, t_base=float("nan"))),
                outcome("level1/exp", "Exp", 2, timing=timed(10.0, t_hw=float("inf"))),
                outcome("level1/exp", "Exp", 3)]
    board = _write_board(tmp_path / "a.json", outcomes)
    assert '"nan"' in board.read_text()
    jsonl = _write_jsonl(tmp_path / "r.jsonl", outcomes)
    for path in (board, jsonl):
        rc, merged = _merge(tmp_path, path)
        assert rc == 0 and _scores(merged) == _scores(board_of(outcomes))


def test_the_later_input_wins_a_duplicate_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = all_outcomes()
    fixed = [dict(o, status="passed", failure_type=None, message="", timing=timed(5.0))
             for o in outcomes if o["key"] == "level1/relu_3"]
    a = _write_board(tmp_path / "a.json", outcomes)
    b = _write_jsonl(tmp_path / "b.jsonl", fixed)
    rc, merged = _merge(tmp_path, a, b)
    relu = next(op for op in merged["operators"] if op["rel_path"] == "level1/relu")
    assert rc == 0 and relu["cases_passed"] == 3 and merged["cases_total"] == len(outcomes)
    expected = [o for o in outcomes if o["key"] != "level1/relu_3"] + fixed
    assert _scores(merged) == _scores(board_of(expected))
    assert f"duplicate case level1/relu_3: {b} replaces {a}" in capsys.readouterr().err
    rc, merged = _merge(tmp_path, b, a)  # the other order: the board's failure stands
    assert rc == 0 and _scores(merged) == _scores(board_of(outcomes))


def test_many_duplicates_are_counted_not_all_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    many = [outcome(f"level1/op{i:02d}", "Op", 1) for i in range(30)]
    a, b = _write_jsonl(tmp_path / "a.jsonl", many), _write_jsonl(tmp_path / "b.jsonl", many)
    rc, merged = _merge(tmp_path, a, b)
    err = capsys.readouterr().err
    assert rc == 0 and merged["cases_total"] == 30
    assert err.count("duplicate case level1/") == 20 and "and 10 more duplicate cases" in err


def test_repeated_lines_in_one_jsonl_keep_the_last(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    failed = outcome("level1/exp", "Exp", 1, "failed", "precision_mismatch", "bad")
    passed = outcome("level1/exp", "Exp", 1)
    rc, merged = _merge(tmp_path, _write_jsonl(tmp_path / "r.jsonl", [failed, passed]))
    assert rc == 0 and merged["operators"][0]["cases"][0]["status"] == "passed"
    assert "1 cases recorded more than once" in capsys.readouterr().err


def test_disagreeing_inputs_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = all_outcomes()
    a = _write_board(tmp_path / "a.json", outcomes[:6])
    other = dict(board_of([])["submission"], wheel_sha256="cd" * 32)
    b = _write_board(tmp_path / "b.json", outcomes[6:], submission=other,
                     config={"seed": 7, "checker": "relative_error", "shard": [2, 2], "hap_cap": False,
                             "run_identity": "def456"})
    rc, merged = _merge(tmp_path, a, b)
    err = capsys.readouterr().err
    assert rc == 0 and merged["submission"]["wheel_sha256"] == "ab" * 32
    assert "graded a different wheel (sha256 cdcdcdcdcdcd)" in err
    assert "ran with other options" in err and "seed=7 (not 0)" in err and "shard" not in err.split("options")[1]
    assert "different runs" not in err  # the run identity hashes wheel and options: already said


def test_merge_compares_what_the_declarations_say_jobs_share(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Real settings' as_dict(): a result-changing setting (the KernelBench guard rule, the timing target) or a
    per-session one (the HAP cap) differing is reported; paths, the shard and the machine's memory are not."""
    import dataclasses

    from pytest_cannbench.options import Settings

    outcomes = all_outcomes()
    base = Settings(report_dir="/a/reports", golden_cache="/a/cache", leaderboard="/a/reports/leaderboard.json")
    a = _write_board(tmp_path / "a.json", outcomes[:6], config=base.as_dict())
    per_job = dataclasses.replace(base, report_dir="/b/reports", golden_cache=None, shard=(2, 2), device_ids=(1,),
                                  session_memory_gib=8.0, memory_pool=2.0, leaderboard="/b/l.json", resume=True)
    b = _write_board(tmp_path / "b.json", outcomes[6:], config=per_job.as_dict())
    assert _merge(tmp_path, a, b)[0] == 0
    assert "other options" not in capsys.readouterr().err
    for change in ({"kb_guard": "cann"}, {"timing_target": 0.05}, {"hap_cap": True}, {"cuda_graph": "auto"}):
        c = _write_board(tmp_path / "c.json", outcomes[6:], config=dataclasses.replace(base, **change).as_dict())
        assert _merge(tmp_path, a, c)[0] == 0
        (name,) = change
        assert f"ran with other options than {a}: {name}=" in capsys.readouterr().err, change


def test_results_of_different_runs_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = all_outcomes()
    rc, _ = _merge(tmp_path, _write_jsonl(tmp_path / "r1.jsonl", outcomes[:4], run="abc123"),
                   _write_jsonl(tmp_path / "r2.jsonl", outcomes[4:], run="def456"))
    err = capsys.readouterr().err
    assert rc == 0 and "different runs" in err
    assert "abc123 (4 cases)" in err and f"def456 ({len(outcomes) - 4} cases)" in err


@pytest.mark.parametrize("content, words", [
    (None, "no such file"),
    ("[1, 2, 3]", "neither a leaderboard nor a results.jsonl line"),
    ('{"schema": "something/else", "operators": []}', "neither a results.jsonl nor a pytest-cannbench leaderboard"),
    ('{"schema": "pytest-cannbench/leaderboard/1", "operators": [{"rel_path": "level1/exp", "cases": [{}]}]}',
     "a case without a key or status"),
    ('{"schema": "pytest-cannbench/leaderboard/1", "operators": 3}', "without an 'operators' list"),
    ("not json\nat all\n", "neither a leaderboard nor a results.jsonl with any case outcome"),
    ("", "no case outcomes"),
])
def test_bad_inputs_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: Any, words: str) -> None:
    path = tmp_path / "input.json"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "merged.json"
    assert main(["merge", str(out), str(path)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and words in err
    assert not out.exists()


def test_an_official_eval_report_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "eval.json"
    path.write_text(leaderboard.dumps(to_eval_report(board_of(all_outcomes()))))
    assert main(["merge", str(tmp_path / "m.json"), str(path)]) == 2
    assert "official EvalReport" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["merge"], ["merge", "out.json"], ["frobnicate"], ["merge", "--bogus", "a", "b"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["merge", "--help"]) == 0
    assert "--eval-report" in capsys.readouterr().out


def test_markdown_and_eval_report_outputs(tmp_path: Path) -> None:
    a = _write_board(tmp_path / "a.json", all_outcomes()[:6])
    b = _write_board(tmp_path / "b.json", all_outcomes()[6:])
    md, ev = tmp_path / "md" / "summary.md", tmp_path / "ev" / "eval.json"
    rc, merged = _merge(tmp_path, a, b, extra=("--markdown", str(md), "--eval-report", str(ev)))
    assert rc == 0
    text = md.read_text()
    assert text.startswith(f"## CANN-Bench score: {merged['total_score']:.2f}") and "Merged from 2 inputs" in text
    report = json.loads(ev.read_text())
    assert report["overall_score"] == merged["total_score"] and report["total_cases"] == len(all_outcomes())


def test_the_module_runs_as_a_command(tmp_path: Path) -> None:
    outcomes = all_outcomes()
    a = _write_board(tmp_path / "a.json", outcomes[:6])
    b = _write_jsonl(tmp_path / "results.jsonl", outcomes[6:])
    out = tmp_path / "merged.json"
    done = subprocess.run([sys.executable, "-m", "pytest_cannbench.cli", "merge", str(out), str(a), str(b)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{len(outcomes)} cases of 5 operators from 2 inputs" in done.stdout
    assert _scores(json.loads(out.read_text())) == _scores(board_of(outcomes))
    bad = subprocess.run([sys.executable, "-m", "pytest_cannbench.cli", "merge", str(out), str(tmp_path / "nope")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert bad.returncode == 2 and "no such file" in bad.stderr


def test_console_script_is_declared() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["cannbench"] == "pytest_cannbench.cli:main"


def test_merging_needs_neither_torch_nor_pytest(tmp_path: Path) -> None:
    # docs/ci.md installs the grader with --no-deps for the merge job
    a = _write_board(tmp_path / "a.json", all_outcomes())
    code = ("import sys; sys.modules['torch'] = sys.modules['pytest'] = sys.modules['numpy'] = None; "
            "from pytest_cannbench.cli import main; "
            f"sys.exit(main(['merge', {str(tmp_path / 'm.json')!r}, {str(a)!r}, '--markdown', "
            f"{str(tmp_path / 'm.md')!r}, '--eval-report', {str(tmp_path / 'e.json')!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "m.md").is_file() and (tmp_path / "e.json").is_file()


def test_partial_boards_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A board graded under -k (or with deselected or interrupted cases) is not the tree's grade: merge says so,
    and a shard alone is not partial to merge (completing shards is its job)."""
    from pytest_cannbench.report.merge import partial_reasons

    outcomes = all_outcomes()
    picked = {"keyword": "relu", "markexpr": "", "shard": None, "deselected": 7, "interrupted": 1, "partial": True}
    a = _write_board(tmp_path / "a.json", outcomes, config={"seed": 0, "run_identity": "abc123", "selection": picked})
    rc, merged = _merge(tmp_path, a)
    assert rc == 0
    err = capsys.readouterr().err
    assert f"{a} is a partial board (-k 'relu', 7 cases deselected, 1 cases interrupted before a verdict)" in err
    assert merged["config"]["selection"] == {"merged": 1, "partial": True}
    sharded = {"keyword": "", "markexpr": "", "shard": [1, 2], "deselected": 0, "interrupted": 0, "partial": True}
    assert partial_reasons({"config": {"selection": sharded}}) == ["shard [1, 2]"]
    assert partial_reasons({"config": {"selection": sharded}}, shard=False) == []
    assert partial_reasons({"config": {}}) == []


def test_merge_compares_session_secrets_by_commitment_and_never_copies_one(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_cannbench.report.secret import commitment

    outcomes = all_outcomes()
    halves = [[o for o in outcomes if in_shard(o["rel_path"], k, 2)] for k in (1, 2)]
    secrets = ["0f" * 16, "a1" * 16]
    a = _write_board(tmp_path / "a.json", halves[0], config={"seed": 0, "secret_commitment": commitment(secrets[0])})
    legacy = _write_board(tmp_path / "b.json", halves[1], config={"seed": 0, "secret": secrets[1]})  # older boards
    rc, merged = _merge(tmp_path, a, legacy)
    assert rc == 0 and secrets[1] not in json.dumps(merged) and secrets[0] not in json.dumps(merged)
    assert merged["config"]["secret_commitment"] == ""  # two sessions: each input names its own
    assert [m["secret_commitments"] for m in merged["merged_from"]] == [[commitment(s)] for s in secrets]
    err = capsys.readouterr().err
    assert "graded under 2 session secrets" in err and "warning" not in err  # shards: each job draws its own
    # one session's board and its results.jsonl: one commitment, kept
    lines = [leaderboard.dumps({"run": "r", "secret_commitment": commitment(secrets[0]), "outcome": o})
             for o in halves[0]]
    journal = tmp_path / "results.jsonl"
    journal.write_text("\n".join(lines) + "\n")
    rc, merged = _merge(tmp_path, a, journal)
    assert rc == 0 and merged["config"]["secret_commitment"] == commitment(secrets[0])
    assert "session secrets" not in capsys.readouterr().err
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(secrets[0] + "\n")
    assert main(["secret", str(tmp_path / "out" / "merged.json"), str(secret_file)]) == 0
    assert main(["secret", str(journal), str(secret_file)]) == 0
    secret_file.write_text(secrets[1] + "\n")
    assert main(["secret", str(a), str(secret_file)]) == 1
    secret_file.write_text("not hex\n")
    assert main(["secret", str(a), str(secret_file)]) == 2


def test_settings_never_show_the_secret() -> None:
    import dataclasses

    from pytest_cannbench.options import Settings

    fields = {f.name: f.default for f in dataclasses.fields(Settings)
              if f.default is not dataclasses.MISSING}
    required = {f.name: None for f in dataclasses.fields(Settings) if f.name not in fields
                and f.default_factory is dataclasses.MISSING}
    settings = Settings(**{**required, "secret": "5e" * 16, "reveal_secret": "/x/secret.txt"})
    assert "5e5e" not in repr(settings) and "5e5e" not in json.dumps(settings.as_dict(), default=str)
    assert "reveal_secret" not in settings.as_dict() and "secret" not in settings.as_dict()
    from pytest_cannbench.report.journal import run_identity  # --cann-resume's key: never the secret

    other = dataclasses.replace(settings, secret="a7" * 16)
    assert run_identity({"kind": "source"}, settings) == run_identity({"kind": "source"}, other)

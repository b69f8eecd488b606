"""The service's pure parts: what a request may hand in, the selection, the hints, statuses and the reward."""

from __future__ import annotations

import base64
import gzip
import io
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

from pytest_cannbench import outcome as oc  # noqa: E402
from pytest_cannbench.outcome import CaseOutcome  # noqa: E402
from pytest_cannbench.serve import answer, hints, intake  # noqa: E402
from pytest_cannbench.serve.catalog import Catalog  # noqa: E402
from pytest_cannbench.serve.intake import BadRequest, Limits  # noqa: E402
from pytest_cannbench.serve.rotation import SecretKeeper  # noqa: E402

TASKS = Path(__file__).resolve().parents[2] / "tasks"
LIMITS = Limits(max_files=8, max_file_bytes=1000, max_total_bytes=3000)


def _tar(members: list[tuple[tarfile.TarInfo, bytes]], gz: bool = True) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    raw = buffer.getvalue()
    return base64.b64encode(gzip.compress(raw) if gz else raw).decode()


def _file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


@pytest.mark.parametrize(("name", "fragment"), [
    ("../x.cpp", "'..'"), ("a/../../x", "'..'"), ("/etc/passwd", "absolute"), ("C:/x", "absolute"),
    ("a//b", "empty"), ("./a", "'.'"), ("a\\b", "backslash"), ("a\0b", "NUL"), ("x" * 300, "characters"),
])
def test_file_names_that_leave_the_directory_are_refused_naming_the_file(name, fragment):
    with pytest.raises(BadRequest) as caught:
        intake.from_files({name: "text"}, LIMITS)
    assert caught.value.field.startswith("submission.files[") and fragment in caught.value.message


def test_limits_on_count_size_and_encoding():
    with pytest.raises(BadRequest, match="more than 8 files"):
        intake.from_files({f"f{i}": "x" for i in range(9)}, LIMITS)
    with pytest.raises(BadRequest, match="at most 1000"):
        intake.from_files({"big": "x" * 1001}, LIMITS)
    with pytest.raises(BadRequest, match="3000 bytes in all"):
        intake.from_files({f"f{i}": "x" * 900 for i in range(4)}, LIMITS)
    with pytest.raises(BadRequest, match="not UTF-8") as caught:
        intake.from_files({"a.cpp": "ok \ud800 lone surrogate"}, LIMITS)
    assert caught.value.field == "submission.files['a.cpp']"
    with pytest.raises(BadRequest, match="both a file and a directory"):
        intake.from_files({"a": "x", "a/b": "y"}, LIMITS)
    assert intake.from_files({"build.sh": "echo", "csrc/ops.cpp": "int x;"}, LIMITS).files == {
        "build.sh": b"echo", "csrc/ops.cpp": b"int x;"}


def test_archives_read_member_by_member_and_refuse_bombs_links_and_traversal():
    ok = intake.from_archive(_tar([(_file("dist/w.whl"), b"\x00\x01binary"), (_file("build.sh"), b"echo")]),
                             "tar.gz", LIMITS)
    assert ok.files == {"dist/w.whl": b"\x00\x01binary", "build.sh": b"echo"}
    # a bomb: 50 MB of zeros compress to ~50 KB; reading stops at the limit, never unpacks it all
    bomb = io.BytesIO()
    with tarfile.open(fileobj=bomb, mode="w:gz") as tar:
        info = _file("zeros.bin")
        info.size = 50 * 2**20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    assert len(bomb.getvalue()) < 200_000
    with pytest.raises(BadRequest, match="archive bomb"):
        intake.from_archive(base64.b64encode(bomb.getvalue()).decode(), "tar.gz", LIMITS)
    link = _file("evil")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    with pytest.raises(BadRequest, match="not a regular file"):
        intake.from_archive(_tar([(link, b"")]), "tar.gz", LIMITS)
    with pytest.raises(BadRequest, match=r"'\.\.'"):
        intake.from_archive(_tar([(_file("../up"), b"x")], gz=False), "tar", LIMITS)
    with pytest.raises(BadRequest, match="not base64"):
        intake.from_archive("%%%", "tar.gz", LIMITS)
    with pytest.raises(BadRequest, match="not a readable"):
        intake.from_archive(base64.b64encode(b"not a tar at all" * 40).decode(), "tar.gz", LIMITS)


def test_server_paths_stay_under_the_root(tmp_path):
    (tmp_path / "root" / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "root" / "escape").symlink_to(tmp_path / "outside")
    root = str(tmp_path / "root")
    assert intake.from_path("sub", root).path == str((tmp_path / "root" / "sub").resolve())
    for path in ("../outside", "escape", "/etc"):
        with pytest.raises(BadRequest, match="leaves the submissions root") as caught:
            intake.from_path(path, root)
        assert caught.value.status == 403 and caught.value.field == "submission.path"
    with pytest.raises(BadRequest, match="--submissions-root"):
        intake.from_path("sub", None)


def test_materialized_files_are_private(tmp_path):
    payload = intake.from_files({"build.sh": "echo", "csrc/a.cpp": "int x;"}, LIMITS)
    target = intake.materialize(payload, tmp_path / "job")
    assert (target / "csrc" / "a.cpp").read_text() == "int x;"
    assert (target / "build.sh").stat().st_mode & 0o777 == 0o700
    assert (target / "csrc" / "a.cpp").stat().st_mode & 0o077 == 0


def test_selection_by_expression_and_operator_names():
    catalog = Catalog.read(TASKS)
    assert [c.key for c in catalog.select("gelu and (01 or 02)", None)] == ["level1/gelu_1", "level1/gelu_2"]
    assert {c.rel_path for c in catalog.select(None, ["gelu", "level1/silu"])} == {"level1/gelu", "level1/silu"}
    with pytest.raises(BadRequest, match="unknown operator 'nosuch'") as caught:
        catalog.select(None, ["gelu", "nosuch"])
    assert caught.value.field == "operators[1]"
    with pytest.raises(BadRequest, match="selects no case") as caught:
        catalog.select("nosuch", None)
    assert caught.value.field == "select"
    with pytest.raises(BadRequest, match="not a -k expression"):
        catalog.select("gelu and (", None)


def _failure_vocabulary() -> set[str]:
    """Every status and failure type outcome.py defines (its enums when it has them, else its constants)."""
    not_failures = {oc.PASSED, oc.BUILD_OK, oc.SPLIT_PUBLIC, oc.SPLIT_HIDDEN, oc.NOT_RANKED, oc.GATE_REASON}
    found: set[str] = set()
    for name, value in vars(oc).items():
        if name.isupper() and isinstance(value, str):
            found.add(value)
        elif isinstance(value, type) and hasattr(value, "__members__") and name.lower().endswith(("status",
                                                                                                   "type")):
            found.update(str(getattr(m, "value", m)) for m in value.__members__.values())
    return found - not_failures


def test_every_failure_type_and_status_has_a_one_line_hint():
    vocabulary = _failure_vocabulary()
    assert {oc.PRECISION, oc.CANDIDATE_TIMEOUT, oc.COMPILE_FAILED, oc.BUILTIN_COMPUTE} <= vocabulary
    for code in sorted(vocabulary | set(hints.SERVICE_CODES)):
        hint = hints.failure_hint(code)
        assert hint and "\n" not in hint and not hint.startswith(f"{code}: see"), code
    assert hints.failure_hint(None) is None


def _outcome(status: str, failure: str | None = None, case_id: int = 1, op: str = "level1/gelu") -> dict:
    return CaseOutcome(key=f"{op}_{case_id}", rel_path=op, operator=op.split("/")[-1], case_id=case_id,
                       status=status, failure_type=failure).to_dict()


def test_statuses_and_rewards_honest_failures_above_cheating():
    provenance = {"version": "x"}

    def graded(*cases: dict, perf: bool = False) -> dict:
        return answer.grade_answer(list(cases), perf=perf, provenance=provenance, job_id="j", name=None)

    passed = graded(_outcome("passed", None, 1), _outcome("passed", None, 2))
    assert (passed["status"], passed["reward"]) == ("passed", 1.0)  # accuracy only: compile + function = all
    assert passed["cases"][0]["code"] is None and passed["operators"][0]["function"] == 30.0
    wrong = graded(_outcome("passed", None, 1), _outcome("failed", oc.PRECISION, 2))
    assert wrong["status"] == "failed" and 0 < wrong["reward"] < 1
    assert wrong["cases"][1]["code"] == oc.PRECISION and wrong["cases"][1]["hint"]
    hang = graded(_outcome("timeout", oc.CANDIDATE_TIMEOUT, 1))
    assert hang["status"] == "timeout" and hang["reward"] == 0.0
    build = graded(_outcome(oc.COMPILE_FAILED, oc.COMPILE_FAILED, 1))
    assert (build["status"], build["reward"]) == (oc.COMPILE_FAILED, answer.REWARD_NO_BUILD)
    cheat = graded(_outcome("passed", None, 1), _outcome("failed", oc.BUILTIN_COMPUTE, 2))
    assert (cheat["status"], cheat["reward"]) == ("cheating", answer.REWARD_CHEAT)
    ours = graded(_outcome("passed", None, 1), _outcome("error", oc.GOLDEN_ERROR, 2))
    assert (ours["status"], ours["reward"]) == ("harness_error", None)
    missing = graded(_outcome("missing", oc.NOT_PROVIDED, 1))
    assert (missing["status"], missing["reward"]) == ("missing", answer.REWARD_NO_BUILD)
    assert answer.REWARD_CHEAT < answer.REWARD_NO_BUILD <= hang["reward"] < wrong["reward"] < passed["reward"]
    batch = answer.batch_answer([passed, wrong, hang, ours], provenance, 2)
    row = batch["operators"][0]
    assert (row["samples"], row["correct"]) == (3, 1)  # the harness error is no sample
    assert batch["pass_at_k"]["1"] == pytest.approx(1 / 3) and batch["reward"][3] is None


def test_secret_epochs_rotate_and_are_revealed_only_when_unused(tmp_path):
    keeper = SecretKeeper(rotate_s=0, reveal_dir=str(tmp_path))
    first = keeper.take()
    second_epoch = keeper.rotate()
    assert second_epoch.number == first.number + 1 and second_epoch.secret != first.secret
    assert not list(tmp_path.iterdir())  # the first epoch is still in use
    keeper.release(first)
    revealed = (tmp_path / "epoch-0.hex").read_text().strip()
    assert revealed == first.secret and (tmp_path / "epoch-0.hex").stat().st_mode & 0o077 == 0
    assert first.commitment != first.secret and len(first.commitment) == 64


def test_the_reward_adapter_reads_named_blocks_and_masks_an_unreachable_service():
    from pytest_cannbench.serve.reward_fn import compute_score_batch, extract_files

    text = ("Here.\n```cpp csrc/gelu.cpp\nint x;\n```\n```python file=cann_bench/__init__.py\nimport torch\n```\n"
            "```bash\necho not a file\n```\n```python\nprint('nor this')\n```\n")
    assert extract_files(text) == {"csrc/gelu.cpp": "int x;\n", "cann_bench/__init__.py": "import torch\n"}
    gone = {"serve_url": "http://127.0.0.1:9", "profile": "quick"}  # the discard port: nothing listens
    got = compute_score_batch(["d", "d"], [text, "no code at all"], ["gelu", "gelu"], [gone, gone])
    assert got[0]["valid"] == 0 and got[0]["score"] == 0.0 and got[0]["status"].startswith(("unreachable",
                                                                                             "service_error"))
    assert got[1] == {"score": answer.REWARD_NO_BUILD, "status": "no_code", "passed": 0, "valid": 1}


def test_a_non_loopback_bind_needs_a_token(monkeypatch, capsys):
    from pytest_cannbench.cli import main

    monkeypatch.delenv("CANNBENCH_SERVE_TOKEN", raising=False)
    assert main(["serve", "--tasks", str(TASKS), "--host", "0.0.0.0"]) == 2
    assert "needs a token" in capsys.readouterr().err
    assert main(["serve", "--tasks", str(TASKS), "--warm", "fastest"]) == 2
    assert "--warm fastest" in capsys.readouterr().err


def test_judges_the_cluster_cannot_place_are_refused_with_the_options_that_fix_it() -> None:
    from pytest_cannbench.serve.server import _unplaceable

    assert _unplaceable(1, {"num_cpus": 2.0, "resources": {}}, {"CPU": 2.0}) == ""
    said = _unplaceable(2, {"num_cpus": 2.0, "resources": {}}, {"CPU": 2.0})
    assert "2 judges x 2 CPU need 4 CPU" in said and "--judge-cpus" in said and "--judges" in said
    assert "GPU" in _unplaceable(3, {"num_cpus": 1.0, "num_gpus": 1, "resources": {}}, {"CPU": 8.0, "GPU": 2.0})
    assert "NPU" in _unplaceable(2, {"num_cpus": 1.0, "resources": {"NPU": 1}}, {"CPU": 8.0, "NPU": 1.0})


def test_an_idle_judge_helps_only_where_the_work_left_outlasts_a_second_open():
    """A running job is worth a second judge when its unstarted cases, at its graded cases' mean time or at least
    as long as its case in flight has run, outlast opening it again (0.5 s, and twice its first open)."""
    import time

    from pytest_cannbench.serve.catalog import CaseInfo
    from pytest_cannbench.serve.dispatch import Dispatcher, Job
    from pytest_cannbench.serve.intake import Payload
    from pytest_cannbench.serve.metrics import Metrics

    cases = [CaseInfo(f"level1/gelu_{i}", "level1/gelu", "gelu", i, ()) for i in (1, 2, 3)]
    dispatcher = Dispatcher([], capacity=4, metrics=Metrics())
    now = time.monotonic()
    job = Job(id="j", cases=cases, payload=Payload(files={}), overrides={}, perf=False, provenance={},
              deadline=now + 60, stuck_s=60)
    dispatcher.jobs[job.id] = job
    dispatcher.running.add(job.id)
    assert dispatcher._help_target() is None  # not opened yet: nobody knows what an open costs
    job.opened_s, job.judges_on = 0.2, 1
    job.claimed[cases[0].key] = now - 0.01
    assert job.work_left(now) == pytest.approx(0.02)
    job.claimed[cases[0].key] = time.monotonic()  # just started: a tenth of a second would be a slow test
    assert dispatcher._help_target() is None
    job.claimed[cases[0].key] = time.monotonic() - 0.6  # two left, each as long as this so far
    assert job.next_case() is cases[1] and dispatcher._help_target() is job
    job.perf = True  # a timed job keeps one judge: two judges' windows and accuracy work would overlap
    assert dispatcher._help_target() is None
    job.perf = False
    job.opened_s = 5.0  # a slow build: a second or so left is not worth a second 5 s open
    assert dispatcher._help_target() is None
    job.opened_s = 0.2
    del job.claimed[cases[0].key]
    job.outcomes[cases[0].key], job.graded_s = {}, 0.2  # graded quickly: 0.4 s left in two quick cases
    assert dispatcher._help_target() is None
    job.claimed[cases[1].key] = job.claimed[cases[2].key] = time.monotonic()
    assert job.next_case() is None and job.work_left(time.monotonic()) == 0.0 and dispatcher._help_target() is None

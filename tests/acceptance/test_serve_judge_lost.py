"""A judge that dies while it grades is restarted by Ray and its request retried once; dying again, the request
is answered ``harness_error`` with the code ``judge_lost`` on every case it could not grade (not the candidate's
doing, and said so), and the service goes on grading."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the serve extra is not installed")
pytest.importorskip("fastapi", reason="the serve extra is not installed")

from serve_helpers import HANG, ROOT, Server, wheel_submission  # noqa: E402

from pytest_cannbench.serve.client import Client, archive_of  # noqa: E402

GELU2 = "gelu and (01 or 02)"


def _judge(client: Client) -> dict:
    (judge,) = client.health()["judges"]
    return judge


def _wait(predicate, what: str, timeout: float = 180.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"waited {timeout:.0f} s for {what}")


def _own_process(server: Server, pid: int) -> bool:
    """Whether ``pid`` descends from this test's server (never signal anything else on the machine)."""
    while pid > 1:
        if pid == server.proc.pid:
            return True
        try:
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def test_a_judge_lost_twice_answers_judge_lost_and_the_service_goes_on(tmp_path: Path, prebuilt_source) -> None:
    server = Server("--tasks", str(ROOT / "tasks"), "--judges", "1", "--judge-cpus", "1", "--case-timeout", "60",
                    "--warm", "quick:accuracy")
    try:
        with Client(server.url, timeout=300) as client:
            hang = wheel_submission(tmp_path / "hang", HANG)
            job = client.submit(hang, select=GELU2, profile="quick", perf=False, deadline_s=600)
            killed = []
            for attempt in (1, 2):
                judge = _wait(lambda: (j := _judge(client))["state"] == "busy" and j["pid"] not in killed and j,
                              f"the judge busy with attempt {attempt}")
                pid = judge["pid"]
                assert isinstance(pid, int) and _own_process(server, pid), judge
                time.sleep(1.0)  # inside the hanging call, not between two
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            answer = _wait(lambda: (s := client.job(job["id"]))["state"] == "done" and s["answer"],
                           "the answer after the second loss")
            assert answer["status"] == "harness_error" and answer["reward"] is None, answer
            assert answer["attempts"] == 2
            codes = {case["code"] for case in answer["cases"]}
            assert codes == {"judge_lost"}, answer["cases"]
            assert all(case["hint"] and "not yours" in case["hint"] for case in answer["cases"])
            # restarted a second time, the judge grades the next request as usual
            honest = archive_of(prebuilt_source(ROOT / "examples" / "cpp_cpu"))
            ok = client.grade(honest, select="gelu and 01", profile="quick", perf=False, deadline_s=300)
            assert ok["status"] == "passed", ok
            assert _judge(client)["pid"] not in killed
    finally:
        server.stop()


def test_a_helping_judge_lost_gives_its_case_back_and_the_candidate_is_answered(tmp_path: Path) -> None:
    """Two judges on one hanging candidate's two cases (the idle one helped); one of them dies inside its call: its
    case goes back to the candidate and is graded again, the answer has both cases' own verdicts (``timeout``),
    ``attempts: 2``, no ``judge_lost``."""
    server = Server("--tasks", str(ROOT / "tasks"), "--judges", "2", "--judge-cpus", "1", "--case-timeout", "6",
                    "--warm", "quick:accuracy")
    try:
        with Client(server.url, timeout=300) as client:
            job = client.submit(wheel_submission(tmp_path / "hang", HANG), select=GELU2, profile="quick",
                                perf=False, deadline_s=300)
            judges = _wait(lambda: (js := client.health()["judges"]) and all(j["state"] == "busy" for j in js)
                           and js, "both judges on the candidate")
            time.sleep(1.0)  # inside the hanging calls
            victim = judges[1]
            assert isinstance(victim["pid"], int) and _own_process(server, victim["pid"]), victim
            os.kill(victim["pid"], signal.SIGKILL)
            answer = _wait(lambda: (s := client.job(job["id"]))["state"] == "done" and s["answer"],
                           "the answer after the loss")
            assert answer["status"] == "timeout" and answer["attempts"] == 2, answer
            assert [case["code"] for case in answer["cases"]] == ["candidate_timeout"] * 2, answer["cases"]
            assert answer["provenance"]["helpers"], answer["provenance"]
    finally:
        server.stop()

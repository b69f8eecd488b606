"""``cannbench serve`` end to end: a real server process (two judges on an embedded Ray cluster, a bearer token)
shared by the module's tests, driven by a real HTTP client. Each test asserts only on what it did itself (under
xdist a worker may start its own server). The drain and the secret are tested on the cluster test's server
(``test_serve_cluster.py``), which it stops.

Kept short on a loaded 2-core machine: accuracy only (``perf: false``), a few gelu cases by ``select``, a case
timeout of 3 s (``--case-timeout``) for the hanging candidate.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time

import pytest

pytest.importorskip("ray", reason="the serve extra is not installed")

import httpx  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from serve_helpers import (  # noqa: E402
    CRASH,
    EXAMPLES,
    HANG,
    NO_COMPILE,
    ROOT,
    WRONG,
    Server,
    wait_for,
    wheel_submission,
)

from pytest_cannbench.serve.client import Client, ServiceError, archive_of  # noqa: E402

TOKEN = secrets.token_hex(16)
GELU2 = "gelu and (01 or 02)"
GELU1 = "gelu and 01"


@pytest.fixture(scope="module")
def served(tmp_path_factory, prebuilt_source):
    root = tmp_path_factory.mktemp("submissions")
    shutil.copytree(prebuilt_source(EXAMPLES / "cpp_cpu"), root / "cpp_cpu")
    server = Server("--tasks", str(ROOT / "tasks"), "--judges", "2", "--judge-cpus", "1", "--case-timeout", "3",
                    "--queue-size", "6", "--submissions-root", str(root),
                    "--warm", "quick:accuracy", env={"CANNBENCH_SERVE_TOKEN": TOKEN})
    client = Client(server.url, token=TOKEN, timeout=300)
    yield server, client, root
    client.close()
    server.stop()


def test_health_schema_and_the_token(served):
    server, client, _ = served
    health = client.health()
    assert health["status"] == "ok" and health["format"] == "cann" and health["cases"] > 400
    assert [j["state"] for j in health["judges"]] == ["ready", "ready"] and health["queue_capacity"] == 6
    slots = [j["cpu_slot"] for j in health["judges"]]  # each judge's workers on CPUs of their own
    assert len(set(slots)) == 2 and all(isinstance(s, int) for s in slots), health["judges"]
    schema = httpx.get(f"{server.url}/openapi.json").json()
    assert {"/v1/health", "/v1/grade", "/v1/jobs", "/v1/jobs/{job_id}", "/v1/batch", "/metrics"} <= set(schema["paths"])
    published = json.loads((ROOT / "docs" / "serve-openapi.json").read_text())
    assert published == schema, "docs/serve-openapi.json is stale: python scripts/serve_openapi.py --write"
    for path in ("/v1/health", "/metrics"):
        refused = httpx.get(f"{server.url}{path}")
        assert refused.status_code == 401 and refused.json()["field"] == "Authorization"
    wrong = httpx.get(f"{server.url}/v1/health", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"


def test_grade_the_bundled_example_gelu(served):
    _, client, _ = served
    answer = client.grade({"path": "cpp_cpu"}, select=GELU2, profile="quick", perf=False, deadline_s=240)
    assert {"status", "reward", "operators", "provenance"} <= set(answer)
    assert answer["status"] == "passed" and answer["reward"] == 1.0, answer
    (op,) = answer["operators"]
    assert (op["rel_path"], op["cases"], op["passed"], op["compile"], op["function"]) == ("level1/gelu", 2, 2, 20, 30)
    assert [c["case_id"] for c in answer["cases"]] == [1, 2] and all(c["code"] is None for c in answer["cases"])
    prov = answer["provenance"]
    assert prov["version"] and prov["torch"] and prov["judge"] in ("judge-0", "judge-1") and prov["guard"] == "block"
    assert prov["seed"]["policy"] == "secret" and len(prov["seed"]["commitment"]) == 64
    assert re.fullmatch(r"[0-9a-f]{16}", prov["settings_hash"]) and prov["profile"] == "quick"


def test_jobs_answer_asynchronously_with_a_queue_position(served, tmp_path):
    _, client, _ = served
    accepted = client.submit(wheel_submission(tmp_path, WRONG), select=GELU1, profile="quick", perf=False,
                             deadline_s=240, name="wrong")
    assert re.fullmatch(r"[0-9a-f]{32}", accepted["id"]) and accepted["queue_position"] >= 0
    answer = client.wait(accepted["id"], timeout_s=240)
    assert answer["status"] == "failed" and answer["name"] == "wrong" and 0 <= answer["reward"] < 1
    assert {c["code"] for c in answer["cases"]} == {"precision_mismatch"}
    assert all(c["hint"] and "\n" not in c["hint"] for c in answer["cases"])
    with pytest.raises(ServiceError) as caught:
        client.job("0" * 32)
    assert caught.value.status == 404 and caught.value.field == "id"


def test_a_group_gets_every_candidate_answered_and_pass_at_k(served, tmp_path, prebuilt_source):
    _, client, root = served
    group = [archive_of(root / "cpp_cpu"), wheel_submission(tmp_path / "w", WRONG), {"files": NO_COMPILE},
             wheel_submission(tmp_path / "h", HANG)]
    t0 = time.monotonic()
    batch = client.batch(group, names=["right", "wrong", "broken", "hangs"], select=GELU1, profile="quick",
                         perf=False, deadline_s=200)
    assert time.monotonic() - t0 < 200
    got = {a["name"]: a for a in batch["candidates"]}
    assert {n: a["status"] for n, a in got.items()} == {"right": "passed", "wrong": "failed",
                                                        "broken": "compile_failed", "hangs": "timeout"}
    assert {c["code"] for c in got["hangs"]["cases"]} == {"candidate_timeout"}
    assert "syntax" in got["broken"]["message"] + got["broken"]["cases"][0]["message"] or \
        "error" in got["broken"]["cases"][0]["message"]
    rewards = {n: a["reward"] for n, a in got.items()}
    assert rewards["right"] == 1.0 and rewards["broken"] == -0.5 and rewards["hangs"] == 0.0
    assert 0 < rewards["wrong"] < 1 and batch["reward"] == [rewards[n] for n in ("right", "wrong", "broken", "hangs")]
    (row,) = batch["operators"]
    assert (row["samples"], row["correct"]) == (4, 1) and batch["pass_at_k"]["1"] == pytest.approx(0.25)
    assert batch["status"] == "done" and len({a["provenance"]["seed"]["commitment"] for a in got.values()}) == 1


def test_an_idle_judge_takes_the_next_case_of_a_slow_candidate(served, tmp_path):
    """One candidate whose two cases each hang to the case timeout (3 s): the other judge, idle, joins the job and
    takes the second case, so the two time out side by side, one on each judge."""
    _, client, _ = served
    before = {j["name"]: j["graded"] for j in client.health()["judges"]}
    answer = client.grade(wheel_submission(tmp_path, HANG), select=GELU2, profile="quick", perf=False, deadline_s=120)
    assert answer["status"] == "timeout" and [c["code"] for c in answer["cases"]] == ["candidate_timeout"] * 2
    prov = answer["provenance"]
    assert prov["helpers"] and set(prov["helpers"]) | {prov["judge"]} == {"judge-0", "judge-1"}, prov
    after = {j["name"]: j["graded"] for j in client.health()["judges"]}
    assert {name: after[name] - before[name] for name in after} == {"judge-0": 1, "judge-1": 1}
    assert answer["attempts"] == 1 and client.health()["in_flight"] == 0


BAD = [  # (body or raw bytes, status, field fragment)
    (b"{not json", 400, "body"),
    (b'{"submission": {"files": {"a": "\xff"}}}', 400, "body"),
    ({"select": "gelu"}, 422, "submission"),
    ({"submission": {"files": {"../escape.cpp": "x"}}}, 422, "submission.files['../escape.cpp']"),
    ({"submission": {"files": {"/etc/passwd": "x"}}}, 422, "submission.files['/etc/passwd']"),
    ({"submission": {"files": {"a": "x"}}, "operators": ["gelu", "no_such_op"]}, 422, "operators[1]"),
    ({"submission": {"files": {"a": "x"}}, "select": "nothing_matches_this"}, 422, "select"),
    ({"submission": {"files": {"a": "x"}}, "format": "kernelbench"}, 422, "format"),
    ({"submission": {"files": {"a": "x"}}, "dead_line": 3}, 422, "dead_line"),
    ({"submission": {"files": {"a": "x"}}, "profile": "fastest"}, 422, "profile"),
    ({"submission": {"path": "../../etc"}}, 403, "submission.path"),
    ({"submission": {"files": {"a": "x"}, "path": "cpp_cpu"}}, 422, "submission"),
    ({"submission": {"archive": {"data": "%%%"}}}, 422, "submission.archive.data"),
]


def test_bad_requests_get_a_4xx_naming_the_field_and_change_nothing(served):
    server, client, _ = served
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    for body, status, where in BAD:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        got = httpx.post(f"{server.url}/v1/grade", content=raw, headers=headers, timeout=30)
        assert got.status_code == status, (body, got.text)
        assert where in (got.json()["field"] or ""), (body, got.json())
    huge = httpx.post(f"{server.url}/v1/grade", content=b"{" + b" " * (33 * 2**20) + b"}", headers=headers)
    assert huge.status_code == 413 and huge.json()["field"] == "body"
    health = client.health()
    assert health["status"] == "ok" and health["queue_depth"] == 0 and health["in_flight"] == 0


def test_flooding_answers_429_with_retry_after_and_loses_nothing(served, tmp_path):
    server, client, _ = served
    headers = {"Authorization": f"Bearer {TOKEN}"}
    options = {"select": "gelu and 01", "profile": "quick", "perf": False, "deadline_s": 120}
    hang = {"submission": wheel_submission(tmp_path, HANG), **options}
    fails = {"submission": {"files": {"build.sh": "exit 1\n"}}, **options}
    accepted, refused = [], []
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
        accepted += [http.post("/v1/jobs", json=hang) for _ in range(2)]  # both judges busy for a while
        wait_for(lambda: client.health()["in_flight"] == 2, 60, poll=0.05)
        for _ in range(10):  # the queue holds 6
            got = http.post("/v1/jobs", json=fails)
            (accepted if got.status_code == 202 else refused).append(got)
    assert refused and all(r.status_code == 429 for r in refused), [r.text for r in refused]
    assert all(int(r.headers["retry-after"]) >= 1 and r.json()["error"] == "queue_full" for r in refused)
    assert len(accepted) == 2 + 6 and len(refused) == 4
    answers = [client.wait(got.json()["id"], timeout_s=240, poll_s=0.3) for got in accepted]
    assert [a["status"] for a in answers] == ["timeout"] * 2 + ["compile_failed"] * 6


def test_metrics_parse_and_count_by_status_and_code(served):
    server, client, _ = served
    assert httpx.get(f"{server.url}/v1/health").status_code == 401
    assert httpx.post(f"{server.url}/v1/grade", content=b"{", headers={"Authorization": f"Bearer {TOKEN}"}
                      ).status_code == 400
    fails = {"files": {"build.sh": "exit 1\n"}}
    jobs = [client.submit(fails, select=GELU1, profile="quick", perf=False) for _ in range(2)]  # one per judge
    assert {client.wait(j["id"], poll_s=0.2)["status"] for j in jobs} == {"compile_failed"}
    text = client.metrics()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("cannbench_serve_queue_depth", "cannbench_serve_in_flight", "cannbench_serve_request_seconds",
                 "cannbench_serve_job_grade_seconds", "cannbench_serve_judge_busy_seconds",
                 "cannbench_serve_cases", "cannbench_serve_answers", "cannbench_serve_rejected"):
        assert name in families, sorted(families)

    def totals(family: str, label: str) -> dict[str, float]:
        return {s.labels[label]: s.value for s in families[family].samples if s.name.endswith("_total")}

    busy = totals("cannbench_serve_judge_busy_seconds", "judge")
    assert set(busy) == {"judge-0", "judge-1"} and all(v > 0 for v in busy.values())
    assert totals("cannbench_serve_cases", "code")["compile_failed"] >= 2
    assert totals("cannbench_serve_answers", "status")["compile_failed"] >= 2
    assert {"bad_request", "unauthorized"} <= set(totals("cannbench_serve_rejected", "reason"))
    latency = [s for s in families["cannbench_serve_request_seconds"].samples
               if s.name.endswith("_count") and s.labels["endpoint"] == "/v1/jobs"]
    assert latency and latency[0].value >= 2


def test_the_documented_reward_example_runs(served, tmp_path):
    server, _, _ = served
    text = (ROOT / "docs" / "serve.md").read_text()
    example = re.search(r"<!-- example:reward -->\n````python\n(.*?)````", text, re.S)
    assert example, "docs/serve.md lost its reward example"
    script = tmp_path / "reward_example.py"
    script.write_text(example.group(1))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "CANNBENCH_SERVE_URL": server.url, "CANNBENCH_SERVE_TOKEN": TOKEN})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no_code -0.5" in done.stdout and "passed 1.0" in done.stdout, done.stdout


def test_crash_is_one_candidates_outcome_under_a_public_seed(served, tmp_path):
    _, client, _ = served
    answer = client.grade(wheel_submission(tmp_path, CRASH), select=GELU1, profile="quick", perf=False,
                          deadline_s=120, seed={"policy": "fixed", "value": 7})
    assert answer["status"] == "crashed" and answer["cases"][0]["code"] == "candidate_crashed"
    assert answer["provenance"]["seed"] == {"policy": "fixed", "value": 7}
    assert "seed_public" in answer["provenance"]["flags"]
    assert client.health()["status"] == "ok"


PACKAGE_SCAFFOLD = {  # a pure-Python submission built by pip: what a dataset would hand the model
    "build.sh": "#!/usr/bin/env bash\nset -euo pipefail\n"
                "python -m pip wheel . --no-deps --no-build-isolation --no-index -q -w dist\n",
    "pyproject.toml": "[build-system]\nrequires = ['setuptools']\nbuild-backend = 'setuptools.build_meta'\n"
                      "[project]\nname = 'cann_bench'\nversion = '0.1'\n[tool.setuptools]\npackages = ['cann_bench']\n",
}


def test_the_batch_reward_function_sends_a_group_as_one_batch(served, monkeypatch):
    from pytest_cannbench.serve.reward_fn import compute_score_batch

    server, _, _ = served
    monkeypatch.setenv("CANNBENCH_SERVE_TOKEN", TOKEN)
    extra = {"serve_url": server.url, "files": PACKAGE_SCAFFOLD, "profile": "quick", "perf": False}
    rollouts = [f"```python cann_bench/__init__.py\n{module}```\n" for module in (WRONG, CRASH)]
    got = compute_score_batch(["d"] * 3, [*rollouts, "no code"], [GELU1] * 3, [extra] * 3)
    assert [(g["status"], g["valid"]) for g in got] == [("failed", 1), ("crashed", 1), ("no_code", 1)], got
    assert got[1]["score"] == 0.0 < got[0]["score"] < 1 and got[2]["score"] == -0.5

"""The multi-host path on one machine: a simulated two-node Ray cluster (``ray.cluster_utils.Cluster``, each node
with one CPU and a custom resource of its own), a real ``cannbench serve --address`` joining it, one judge per
node. A group is spread over both nodes' judges, and a node killed in the middle of it loses no candidate: the
candidate it was grading is retried on the other node's judge and answered with its right status. Then the
shutdown: SIGTERM with a job queued drains it (new work gets 503), and the input secret, revealed only after,
appears in no answer, metric or log."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest

pytest.importorskip("ray", reason="the serve extra is not installed")

from serve_helpers import EXAMPLES, ROOT, WRONG, Server, wait_for, wheel_submission  # noqa: E402

from pytest_cannbench.report.secret import commitment  # noqa: E402
from pytest_cannbench.serve.client import Client, ServiceError, archive_of  # noqa: E402

MIB = 2**20


@pytest.fixture
def cluster():
    from ray.cluster_utils import Cluster

    made = Cluster(initialize_head=True, connect=False,
                   head_node_args={"num_cpus": 0, "include_dashboard": False, "object_store_memory": 80 * MIB})
    nodes = {name: made.add_node(num_cpus=1, resources={f"node_{name}": 1}, object_store_memory=80 * MIB)
             for name in ("a", "b")}
    yield made, nodes
    made.shutdown()


def test_a_group_spreads_over_two_nodes_a_killed_node_loses_nothing_and_shutdown_drains(cluster, tmp_path,
                                                                                         prebuilt_source):
    made, nodes = cluster
    reveal = tmp_path / "revealed"
    reveal.mkdir()
    server = Server("--address", made.address, "--tasks", str(ROOT / "tasks"), "--judges", "2", "--judge-cpus",
                    "1", "--case-timeout", "3", "--warm", "quick:accuracy", "--reveal-secrets", str(reveal))
    seen: list[str] = []
    try:
        client = Client(server.url, timeout=400)
        judges = {j["name"]: j["node"] for j in client.health()["judges"]}
        by_node = {node.node_id: name for name, node in nodes.items()}
        assert set(judges.values()) == set(by_node), judges  # SPREAD: one judge on each node
        right = archive_of(prebuilt_source(EXAMPLES / "cpp_cpu"))
        wrong = wheel_submission(tmp_path, WRONG)
        group = [right, wrong] * 3
        result: dict = {}
        options = {"select": "gelu and (01 or 02)", "profile": "quick", "perf": False}
        thread = threading.Thread(target=lambda: result.update(client.batch(group, deadline_s=360, **options)))
        t0 = time.monotonic()
        thread.start()
        judge_b = next(name for name, node in judges.items() if node == nodes["b"].node_id)

        def b_answered_one_and_is_inside_another() -> bool:  # two cases a candidate: an odd count is mid-way
            me = next(j for j in client.health()["judges"] if j["name"] == judge_b)
            return me["graded"] >= 3 and me["graded"] % 2 == 1

        wait_for(b_answered_one_and_is_inside_another, 240, poll=0.05)
        made.remove_node(nodes["b"])  # the node dies mid-batch, its judge with it
        thread.join(400)
        assert not thread.is_alive() and result, "the batch was not answered"
        seen.append(json.dumps(result))
        answers = result["candidates"]
        assert [a["status"] for a in answers] == ["passed", "failed"] * 3, [(a["status"], a["message"])
                                                                             for a in answers]
        assert {a["provenance"]["node"] for a in answers} == set(by_node)  # both nodes graded some
        retried = [a for a in answers if a["attempts"] == 2]
        assert retried and all(a["provenance"]["node"] == nodes["a"].node_id for a in retried)
        assert time.monotonic() - t0 < 400
        assert client.health()["status"] == "degraded"  # judge b waits for a node that is gone

        queued = client.submit(right, deadline_s=200, **options)
        seen += [client.metrics(), json.dumps(client.health())]
        server.proc.send_signal(signal.SIGTERM)  # a job queued or running: the drain answers it first
        wait_for(lambda: "draining" in server.text(), 30)
        with pytest.raises(ServiceError) as caught:
            client.submit(right, **options)
        assert caught.value.status == 503 and caught.value.retry_after
        last = client.wait(queued["id"], timeout_s=200, poll_s=0.2)
        seen.append(json.dumps(last))
        assert last["status"] == "passed"
        client.close()
    finally:
        code = server.stop(timeout=120)
    assert code == 0 and "stopped" in server.text()
    revealed = {p.read_text().strip() for p in reveal.glob("epoch-*.hex")}
    assert len(revealed) == 1, "the epoch's secret was not revealed at shutdown"
    assert {a["provenance"]["seed"]["commitment"] for a in [*answers, last]} == {commitment(s) for s in revealed}
    for text in seen + [server.text()]:
        for secret in revealed:
            assert secret not in text

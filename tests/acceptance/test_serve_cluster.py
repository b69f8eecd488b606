"""The multi-host path on one machine: a simulated two-node Ray cluster (``ray.cluster_utils.Cluster``, each node
with one CPU and a custom resource of its own), a real ``cannbench serve --address`` joining it, one judge per
node. A group is spread over both nodes' judges, and a node killed in the middle of it loses no candidate: the
candidate it was grading is retried on the other node's judge and answered with its right status."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("ray", reason="the serve extra is not installed")

from serve_helpers import EXAMPLES, ROOT, WRONG, Server, wait_for, wheel_submission  # noqa: E402

from pytest_cannbench.serve.client import Client, archive_of  # noqa: E402

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


def test_a_group_spreads_over_two_nodes_and_a_killed_node_loses_nothing(cluster, tmp_path, prebuilt_source):
    made, nodes = cluster
    server = Server("--address", made.address, "--tasks", str(ROOT / "tasks"), "--judges", "2", "--judge-cpus",
                    "1", "--case-timeout", "5", "--warm", "quick:accuracy")
    try:
        client = Client(server.url, timeout=400)
        judges = {j["name"]: j["node"] for j in client.health()["judges"]}
        assert len(set(judges.values())) == 2, judges  # SPREAD: one judge on each node
        by_node = {node.unique_id: name for name, node in nodes.items()}
        assert set(by_node) == set(judges.values())
        right = archive_of(prebuilt_source(EXAMPLES / "cpp_cpu"))
        wrong = wheel_submission(tmp_path, WRONG)
        group = [right, wrong] * 3
        result: dict = {}
        thread = threading.Thread(target=lambda: result.update(client.batch(
            group, select="gelu and 01", profile="quick", perf=False, deadline_s=360)))
        t0 = time.monotonic()
        thread.start()
        node_b = nodes["b"].unique_id
        judge_b = next(name for name, node in judges.items() if node == node_b)

        def b_has_graded_and_is_busy() -> bool:
            health = client.health()
            me = next(j for j in health["judges"] if j["name"] == judge_b)
            return me["graded"] >= 1 and me["state"] == "busy"

        wait_for(b_has_graded_and_is_busy, 240, poll=0.1)
        made.remove_node(nodes["b"])  # the node dies mid-batch, its judge with it
        thread.join(400)
        assert not thread.is_alive() and result, "the batch was not answered"
        answers = result["candidates"]
        assert len(answers) == len(group)
        assert [a["status"] for a in answers] == ["passed", "failed"] * 3, [(a["status"], a["message"])
                                                                             for a in answers]
        nodes_used = {a["provenance"]["node"] for a in answers}
        assert nodes_used == set(by_node), nodes_used  # spread over both, before node b died
        retried = [a for a in answers if a["attempts"] == 2]
        assert retried and all(a["provenance"]["node"] == nodes["a"].unique_id for a in retried)
        assert time.monotonic() - t0 < 400
        metrics = client.metrics()
        assert "cannbench_serve_retries_total 0.0" not in metrics
    finally:
        server.stop(timeout=120)

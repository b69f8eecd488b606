"""The cluster a run uses, and its judge slots.

With no address, a run starts an embedded Ray instance on this machine (``ray.init(address="local")``: nothing
to start by hand, gone when the run ends); ``--address`` (or ``RAY_ADDRESS``) joins a running cluster
(``ray start --head`` on one host, ``ray start --address=HEAD:6379`` on the others). A process that already
holds a Ray connection (a test's simulated cluster, a notebook) keeps it.

A judge slot is what one shard's pytest session needs, read from the nodes' Ray resources:

* a node with Ray's ``NPU`` resource (Ascend cards): one judge per card, the task asks for ``{"NPU": 1}`` and
  Ray names the card in ``ASCEND_RT_VISIBLE_DEVICES``;
* a node with ``GPU``: one judge per GPU (``num_gpus=1``, ``CUDA_VISIBLE_DEVICES``);
* a CPU node: one judge per ``--cpus-per-judge`` CPUs (``num_cpus``), pinned on its host to that many cores
  (:mod:`shard`), so concurrent sessions do not oversubscribe each other.

One run grades on one kind of device: the cards when any node has them (a board mixing devices would not be one
leaderboard), else the CPUs. Nodes without that kind hold no judge.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pytest_cannbench.report.merge import InputError

NPU, GPU, CPU = "npu", "gpu", "cpu"
EMBEDDED_OBJECT_STORE = 512 * 2**20  # report files and logs only: shards ship their report directories as bytes


@dataclass(frozen=True)
class NodeSlots:
    """One alive node and how many judges it holds."""

    node_id: str
    host: str
    judges: int
    resources: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "host": self.host,
            "judges": self.judges,
            "resources": {k: v for k, v in sorted(self.resources.items()) if not k.startswith("node:")},
        }


@dataclass
class ClusterView:
    """The cluster a run grades on: where it is, its nodes and judge slots, and what one shard asks Ray for."""

    address: str
    embedded: bool
    kind: str
    cpus_per_judge: float
    nodes: list[NodeSlots] = field(default_factory=list)
    dashboard: str = ""

    @property
    def judges(self) -> int:
        return sum(n.judges for n in self.nodes)

    def request(self) -> dict[str, Any]:
        """The Ray options of one shard task: exactly one judge slot."""
        if self.kind == NPU:
            return {"num_cpus": 0, "resources": {"NPU": 1}}
        if self.kind == GPU:
            return {"num_cpus": 0, "num_gpus": 1}
        return {"num_cpus": self.cpus_per_judge}

    def describe(self) -> str:
        where = "embedded Ray instance on this machine" if self.embedded else "Ray cluster"
        dash = f", dashboard {self.dashboard}" if self.dashboard else ""
        per = {NPU: "one per NPU", GPU: "one per GPU"}.get(self.kind, f"{self.cpus_per_judge:g} CPUs each")
        return (
            f"{where} at {self.address}{dash}: {len(self.nodes)} nodes, {self.judges} {self.kind.upper()} judge "
            f"slots ({per})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "embedded": self.embedded,
            "kind": self.kind,
            "cpus_per_judge": self.cpus_per_judge,
            "judges": self.judges,
            "dashboard": self.dashboard,
            "nodes": [n.to_dict() for n in self.nodes],
        }


def import_ray() -> Any:
    """Ray, or an error that says how to install it."""
    try:
        import ray
    except ImportError:
        raise InputError(
            "cluster-grade needs Ray: pip install 'pytest-cannbench[cluster]' (or ray>=2.40) on this "
            "machine and on every node"
        ) from None
    return ray


def judges_of(resources: dict[str, float], kind: str, cpus_per_judge: float) -> int:
    """The judge slots a node's total resources hold for a run on ``kind``."""
    if kind == NPU:
        return int(resources.get("NPU", 0))
    if kind == GPU:
        return int(resources.get("GPU", 0))
    return int(resources.get("CPU", 0) // cpus_per_judge) if cpus_per_judge > 0 else 0


def kind_of(nodes: list[dict[str, Any]]) -> str:
    """NPU when any node has Ascend cards, else GPU when any has GPUs, else CPU."""
    if any(n["Resources"].get("NPU", 0) >= 1 for n in nodes):
        return NPU
    if any(n["Resources"].get("GPU", 0) >= 1 for n in nodes):
        return GPU
    return CPU


def view(ray: Any, *, address: str, embedded: bool, cpus_per_judge: float, dashboard: str = "") -> ClusterView:
    """The cluster's alive nodes and judge slots, now (``ray.nodes()``)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    kind = kind_of(nodes)
    slots = [
        NodeSlots(
            str(n["NodeID"]),
            str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or "?"),
            judges_of(n["Resources"], kind, cpus_per_judge),
            dict(n["Resources"]),
        )
        for n in nodes
    ]
    found = ClusterView(address, embedded, kind, cpus_per_judge, [s for s in slots if s.judges > 0], dashboard)
    if not found.judges:
        have = "; ".join(f"{s.host}: {s.resources.get('CPU', 0):g} CPUs" for s in slots) or "no alive node"
        raise InputError(
            f"the cluster at {address} has no judge slot: no node has an NPU or a GPU, and none has "
            f"{cpus_per_judge:g} CPUs for one CPU judge ({have}); lower --cpus-per-judge or add nodes"
        )
    return found


@contextmanager
def connected(address: str | None, *, cpus_per_judge: float, num_cpus: int | None = None) -> Iterator[ClusterView]:
    """The cluster for one run: joined at ``address`` (or ``RAY_ADDRESS``), else an embedded instance that ends with
    the run. A connection this process already holds is used as it is and left open."""
    ray = import_ray()
    import logging

    if cpus_per_judge <= 0:
        raise InputError(f"--cpus-per-judge must be above 0 (got {cpus_per_judge:g})")
    target = address or os.environ.get("RAY_ADDRESS") or None
    owned = not ray.is_initialized()
    dashboard = ""
    if owned:
        options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
        try:
            if target:
                context = ray.init(address=target, **options)
            else:
                context = ray.init(
                    address="local",
                    num_cpus=num_cpus,
                    object_store_memory=EMBEDDED_OBJECT_STORE,
                    include_dashboard=False,
                    **options,
                )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"the Ray cluster at {target}" if target else "an embedded Ray instance"
            raise InputError(f"cannot connect to {where}: {exc}") from None
        dashboard = str(getattr(context, "dashboard_url", "") or "")
    try:
        gcs = str(ray.get_runtime_context().gcs_address)
        yield view(
            ray,
            address=gcs,
            embedded=owned and not target,
            cpus_per_judge=cpus_per_judge,
            dashboard=f"http://{dashboard}" if dashboard and not dashboard.startswith("http") else dashboard,
        )
    finally:
        if owned:
            ray.shutdown()

"""The shards of one run on the cluster: submitted as Ray tasks, watched, retried, reported as they go.

Two kinds of retry. A shard whose worker or node is lost (the node died, Ray's memory monitor killed the worker)
is rerun by Ray itself (``max_retries``) on a node that is still there; the shard's start events, posted to a
small :class:`Progress` actor on the driver's node, show each try. A shard whose session ran but produced no
board (a usage error, a crash, its timeout, a node that cannot see the files) is submitted again by this module,
``--shard-retries`` times, and then reported by name with its log's tail: :mod:`assemble` puts its operators on
the board as interrupted, never leaves them out.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_cannbench import __version__
from pytest_cannbench.cluster.connect import ClusterView, view
from pytest_cannbench.cluster.plan import Shard, Unit, ignored_elsewhere
from pytest_cannbench.cluster.shard import ShardResult, ShardSpec, grade_shard
from pytest_cannbench.report.merge import InputError

LOST_RETRIES = 3  # Ray's reruns of a shard whose worker or node was lost
POLL_S = 1.0
SLOT_CHECK_S = 5.0  # how often a run waiting on shards checks that the cluster still has a judge slot
PYTEST_EXITS = {2: "interrupted", 3: "internal error", 4: "usage error", 5: "no case selected"}


class Progress:
    """A Ray actor on the driver's node: the shards post their start events, the driver takes them."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def post(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def take(self) -> list[dict[str, Any]]:
        events, self.events = self.events, []
        return events


@dataclass
class Attempt:
    """One try at a shard on one node, as the driver saw it."""

    node_id: str
    host: str
    result: str  # "graded", "failed", "lost" (its worker or node died: Ray reran it), "running"
    seconds: float = 0.0
    rc: int | None = None
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "host": self.host,
            "result": self.result,
            "seconds": self.seconds,
            "rc": self.rc,
            "error": self.error,
        }


@dataclass
class ShardRecord:
    """A shard's fate: every attempt, and what its last one brought back."""

    shard: Shard
    attempts: list[Attempt] = field(default_factory=list)
    final: ShardResult | None = None
    submitted: int = 0  # the driver's submissions (Ray's reruns after a loss are not counted here)

    @property
    def complete(self) -> bool:
        return self.final is not None and not failure(self.final)

    @property
    def reason(self) -> str:
        if self.final is None:
            return "never ran"
        return failure(self.final)

    def to_dict(self) -> dict[str, Any]:
        final = self.final
        return {
            "index": self.shard.index,
            "label": self.shard.label,
            "cases": self.shard.cases,
            "operators": [u.rel_path for u in self.shard.units],
            "status": "graded" if self.complete else "failed",
            "reason": "" if self.complete else self.reason,
            "rc": final.rc if final else None,
            "node_id": final.node_id if final else "",
            "host": final.host if final else "",
            "seconds": final.seconds if final else 0.0,
            "cores": final.cores if final else [],
            "cut_files": final.cut if final else [],
            "attempts": [a.to_dict() for a in self.attempts],
        }


def failure(result: ShardResult) -> str:
    """Why an attempt produced no usable board ("" when it did: pytest ran to its end and wrote one)."""
    if result.error:
        return result.error
    if result.rc == 5:
        return ""  # the options given selected no case of this shard: an empty share, not a loss
    meaning = f" ({PYTEST_EXITS[result.rc]})" if result.rc in PYTEST_EXITS else ""
    if result.rc not in (0, 1):
        return f"pytest exited with status {result.rc}{meaning}"
    if "leaderboard.json" not in result.files:
        return f"pytest exited with status {result.rc} but wrote no leaderboard.json"
    return ""


@dataclass
class Runner:
    """Submits, watches and retries the shards of one run."""

    cluster: ClusterView
    units: list[Unit]
    tree: str
    source: str
    extra: list[str]
    timeout_s: float | None
    retries: int
    say: Callable[[str], None]
    on_start: Callable[[dict[str, Any]], None] | None = None  # each start event, e.g. to watch a node in a test
    records: dict[int, ShardRecord] = field(default_factory=dict)
    progress_lost: bool = False

    def run(self, shards: list[Shard]) -> list[ShardRecord]:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()
        # on the driver's own node, hard: a soft affinity placed it on any node, and a node lost mid-run took it
        # along (that node's death would take the driver's raylet, hence the driver, anyway)
        progress: Any = (
            ray.remote(num_cpus=0)(Progress)
            .options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
            .remote()
        )
        task = ray.remote(grade_shard)
        options = {
            **self.cluster.request(),
            "max_retries": LOST_RETRIES,
            "retry_exceptions": False,
            "scheduling_strategy": "SPREAD",
        }
        pending: dict[Any, int] = {}

        def submit(shard: Shard) -> None:
            record = self.records.setdefault(shard.index, ShardRecord(shard))
            record.submitted += 1
            spec = ShardSpec(
                shard.index,
                shard.label,
                self.tree,
                self.source,
                [u.path for u in shard.units],
                ignored_elsewhere(shard, self.units),
                list(self.extra),
                os.getcwd(),
                os.environ.get("OMP_NUM_THREADS"),
                _version(),
                self.cluster.kind,
                self.cluster.cpus_per_judge,
                self.timeout_s,
                record.submitted,
                progress,
            )
            pending[task.options(**options, name=f"cannbench-shard-{shard.index}").remote(spec)] = shard.index

        for shard in shards:
            self.say(f"shard {shard.label}: {shard.describe()}")
            submit(shard)
        checked = time.monotonic()
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
                self._events(self._take(ray, progress))
                for ref in ready:
                    index = pending.pop(ref)
                    if self._finished(index, self._result(ray, ref, index)):
                        submit(self.records[index].shard)
                if pending and time.monotonic() - checked > SLOT_CHECK_S:
                    checked = time.monotonic()
                    self._check_slots(ray, pending)
        except KeyboardInterrupt:
            for ref, index in pending.items():
                ray.cancel(ref, force=True)
                self._finished(
                    index,
                    ShardResult(
                        index,
                        self.records[index].submitted,
                        error="the run was interrupted (Ctrl-C) before this shard ended",
                    ),
                    retry=False,
                )
            pending.clear()
        self._events(self._take(ray, progress))
        return [self.records[s.index] for s in shards]

    def _take(self, ray: Any, progress: Any) -> list[dict[str, Any]]:
        """The start events posted since the last call; none, said once, when the actor is gone (the shards'
        results still come back: only the progress lines and the attempts' lost marks depend on it)."""
        if self.progress_lost:
            return []
        try:
            events: list[dict[str, Any]] = ray.get(progress.take.remote(), timeout=30)
            return events
        except ray.exceptions.RayError as exc:
            self.progress_lost = True
            self.say(f"warning: the progress actor is gone ({type(exc).__name__}); shards go on without start events")
            return []

    def _result(self, ray: Any, ref: Any, index: int) -> ShardResult:
        try:
            result: ShardResult = ray.get(ref)
            return result
        except ray.exceptions.RayError as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            record = self.records[index]
            return ShardResult(
                index,
                record.submitted,
                error=f"lost after {LOST_RETRIES + 1} tries by Ray ({type(exc).__name__}: {first})",
            )

    def _events(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            record = self.records.get(int(event.get("index", 0)))
            if record is None:
                continue
            running = [a for a in record.attempts if a.result == "running"]
            for lost in running:  # a new start while one was running: Ray reran it after a loss
                lost.result, lost.error = "lost", "its worker or node was lost; Ray reran the shard"
                self.say(
                    f"shard {record.shard.label}: lost on {lost.host} (node {lost.node_id[:8]}): its worker or "
                    "node died; Ray reruns it"
                )
            node, host = str(event.get("node_id", "")), str(event.get("host", ""))
            record.attempts.append(Attempt(node, host, "running"))
            cores = event.get("cores") or []
            pinned = f", cores {','.join(map(str, cores))}" if cores else ""
            self.say(f"shard {record.shard.label}: started on {host} (node {node[:8]}{pinned})")
            if self.on_start is not None:
                self.on_start(dict(event))

    def _finished(self, index: int, result: ShardResult, *, retry: bool = True) -> bool:
        """Record an attempt's end; True when the shard should be submitted again."""
        record = self.records[index]
        record.final = result
        why = failure(result)
        running = [a for a in record.attempts if a.result == "running"]
        attempt = running[-1] if running else Attempt(result.node_id, result.host, "running")
        if not running:
            record.attempts.append(attempt)
        for stale in running[:-1]:
            stale.result = "lost"
        attempt.node_id, attempt.host = result.node_id or attempt.node_id, result.host or attempt.host
        attempt.result, attempt.seconds, attempt.rc, attempt.error = (
            "failed" if why else "graded",
            result.seconds,
            result.rc,
            why,
        )
        label = record.shard.label
        if not why:
            self.say(f"shard {label}: done on {result.host} in {result.seconds:.1f} s (pytest exit {result.rc})")
            return False
        if retry and record.submitted <= self.retries:
            self.say(
                f"shard {label}: failed on {result.host or 'its node'}: {why}; retrying "
                f"(attempt {record.submitted + 1} of {self.retries + 1})"
            )
            return True
        tail = "".join(f"\n    | {line}" for line in result.log_tail.splitlines()[-15:])
        self.say(
            f"shard {label}: FAILED after {record.submitted} attempt(s): {why}" + (f"; log tail:{tail}" if tail else "")
        )
        return False

    def _check_slots(self, ray: Any, pending: dict[Any, int]) -> None:
        """Fail the waiting shards when no node can hold a judge any more (they would wait for ever)."""
        try:
            now = view(
                ray,
                address=self.cluster.address,
                embedded=self.cluster.embedded,
                cpus_per_judge=self.cluster.cpus_per_judge,
            )
            if now.kind != self.cluster.kind:
                raise InputError(
                    f"no node of the cluster holds a {self.cluster.kind.upper()} judge any more (the "
                    f"run grades on {self.cluster.kind.upper()}s; what is left has {now.kind.upper()} "
                    "judges only)"
                )
        except InputError as exc:
            for ref, index in list(pending.items()):
                ray.cancel(ref, force=True)
                self._finished(index, ShardResult(index, self.records[index].submitted, error=str(exc)), retry=False)
            pending.clear()


def _version() -> str:
    return __version__

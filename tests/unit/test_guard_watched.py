"""The worker's own functions the guard watches come from the worker (``candidate_main.watched``): rebinding one of
them (a timer, the tensor wire) is reported as tampering, in a real worker-like process with a real guard."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from pytest_cannbench.timing import cuda_graph, in_worker
from pytest_cannbench.workers import tensor_wire
from pytest_cannbench.workers.candidate_main import watched

PROBE = textwrap.dedent("""
    import json, os, sys, torch
    from pytest_cannbench.guard.runtime import Guard
    from pytest_cannbench.timing import in_worker
    from pytest_cannbench.workers import tensor_wire
    from pytest_cannbench.workers.candidate_main import watched
    given = watched("cpu") if sys.argv[1] == "watched" else []
    guard = Guard("warn", "cpu", os.getcwd(), [], given)
    def rebind(x):
        in_worker.run_batch = lambda *a, **k: None
        tensor_wire.write_outputs = lambda *a, **k: None
        return x.clone()
    guard.call(rebind, {"x": torch.ones(8)})
    print(json.dumps([f["detail"] for f in guard.report() if f["kind"] == "api_tampered"]))
""")


def tampered(given: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, given], capture_output=True, text=True, timeout=120,
                          cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_rebinding_a_watched_worker_function_is_tampering() -> None:
    found = tampered("watched")
    assert any("run_batch" in d for d in found) and any("write_outputs" in d for d in found), found


def test_the_guard_watches_what_it_is_given_and_no_more() -> None:
    assert not [d for d in tampered("none") if "run_batch" in d or "write_outputs" in d]


def test_the_graph_timer_is_watched_on_cuda_only() -> None:
    owners = [owner for owner, _ in watched("cpu")]
    assert in_worker in owners and tensor_wire in owners and cuda_graph not in owners
    assert cuda_graph in [owner for owner, _ in watched("cuda:0")]
    for owner, names in watched("cuda:0"):
        assert all(hasattr(owner, name) for name in names), owner  # every name still exists

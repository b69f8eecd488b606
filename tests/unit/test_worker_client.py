"""Unit tests for the judge's side of the workers that need no worker: the environment a submission sees, the
/proc probes of the output contract, and the two memory policies."""

from __future__ import annotations

import os
import subprocess
import sys

from pytest_cannbench.workers.client import candidate_memory_bytes, golden_memory_bytes
from pytest_cannbench.workers.contract import cpu_used, escaped, process_snapshot, thread_cpu
from pytest_cannbench.workers.env_scrub import scrubbed_environment


def test_scrubbed_environment_keeps_system_basics_and_device_runtimes_only():
    env = {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0", "ASCEND_HOME": "/a",
           "PYTEST_CURRENT_TEST": "t", "PYTEST_XDIST_WORKER": "gw0", "GITHUB_TOKEN": "secret", "CANNBENCH_X": "1"}
    assert scrubbed_environment(env) == {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0",
                                         "ASCEND_HOME": "/a"}


def test_escaped_names_new_threads_and_children():
    assert escaped((3, frozenset({7})), (3, frozenset({7}))) == ""
    assert escaped((3, frozenset()), (2, frozenset())) == ""  # a thread that ended is not escaped work
    assert escaped((3, frozenset({7})), (5, frozenset({7, 8, 9}))) == "2 new thread(s) and 2 new child process(es)"


def test_cpu_used_counts_new_threads_from_zero_and_bounds_by_the_busiest():
    assert cpu_used({1: 1.0}, {}) == (None, None)
    total, busiest = cpu_used({1: 1.0, 2: 5.0}, {1: 1.5, 2: 5.25, 3: 0.75})
    assert (total, busiest) == (1.5, 0.75)
    assert cpu_used({1: 2.0}, {1: 1.0}) == (0.0, 0.0)  # a reading never goes below zero


def test_proc_probes_see_this_process_and_its_child():
    threads, children = process_snapshot(os.getpid())
    assert threads >= 1 and thread_cpu(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in process_snapshot(os.getpid())[1] - children
    finally:
        child.kill()
        child.wait()
    assert process_snapshot(2**22 + 12345) == (0, frozenset())  # no such process


def test_memory_policies_have_distinct_shares_of_physical_memory():
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert candidate_memory_bytes() == int(total * 0.5)
    assert golden_memory_bytes() == int(total * 0.8)

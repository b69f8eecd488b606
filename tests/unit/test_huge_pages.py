"""Huge pages for the judge's side (issue 22): on where the kernel allows, never left in the environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_cannbench.workers import huge_pages

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")

PROBE = """
import os, resource, sys
from pytest_cannbench.workers.huge_pages import ENV, latch_in_judge
latched = latch_in_judge() if sys.argv[1] == "latch" else False
import torch
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
x = torch.empty(64 << 20)  # 256 MiB: 65536 small pages
x.fill_(1.0)
print(latched, ENV in os.environ, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _probe(mode: str, env: dict | None = None) -> tuple[str, str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                         env=env).stdout.split()
    return out[0], out[1], int(out[2])


@pytest.mark.skipif(not THP.exists() or "[never]" in THP.read_text(), reason="the kernel offers no huge pages")
def test_latch_cuts_page_faults_and_leaves_no_variable():
    latched, left, faults = _probe("latch")
    _, _, plain = _probe("plain")
    assert latched == "True" and left == "False"
    assert plain > 60000  # one per 4 KiB page
    assert faults < plain / 10  # one per 2 MiB page, plus the odd small one


def test_a_users_choice_is_kept(monkeypatch):
    import os

    monkeypatch.setenv(huge_pages.ENV, "0")
    latched, left, _ = _probe("latch", dict(os.environ))
    assert latched == "False" and left == "True"
    assert huge_pages.worker_env({huge_pages.ENV: "0"})[huge_pages.ENV] == "0"
    assert huge_pages.worker_env({})[huge_pages.ENV] == "1"

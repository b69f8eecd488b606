"""Huge pages (workers.huge_pages) reach the candidate-side worker only in a session that times nothing."""

from __future__ import annotations

import pytest
from inner import int_attr_operator, run_inner

RECORDER = '''import os

import torch


def recorded(x: torch.Tensor, k: int = 0) -> torch.Tensor:
    with open("/proc/self/cmdline", "rb") as fh:
        role = "candidate" if b"candidate_main" in fh.read() else "golden"
    with open({log!r}, "a") as fh:
        fh.write(f"{{role}} {{os.environ.get('THP_MEM_ALLOC_ENABLE')}}\\n")
    return x * 2
'''


@pytest.mark.parametrize("perf", [False, True], ids=["no-perf", "timed"])
def test_candidate_side_huge_pages_only_when_untimed(perf, pytester, capsys, monkeypatch) -> None:
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    tasks, log = pytester.path / "tasks", pytester.path / "env.log"
    (tasks / "level1").mkdir(parents=True)
    int_attr_operator(tasks, "recorded", "Recorded", RECORDER.format(log=str(log)), "k", "records its env",
                      ["value_range: [-1, 1]"])
    args = ["--cann-tasks=tasks", "--cann-source=@golden", "--cann-golden-cache=off", "-p", "no:cacheprovider"]
    run = run_inner(pytester, capsys, tasks, *args, *([] if perf else ["--cann-no-perf"]))
    assert run.ret == pytest.ExitCode.OK, run.text
    seen = {tuple(line.split()) for line in log.read_text().splitlines()}
    assert {value for role, value in seen if role == "golden"} == {"1"}, seen  # the judge's side: always
    assert {value for role, value in seen if role == "candidate"} == ({"None"} if perf else {"1"}), seen

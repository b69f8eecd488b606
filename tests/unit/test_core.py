"""The grading core's parts that need no submission: selections, the judge's setup on the wire, the hidden
split's apart judge under the run's memory plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_cannbench.core import Controller, Judge, JudgeSetup
from pytest_cannbench.core.select import SelectError, compile_selection
from pytest_cannbench.options import settings_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("expression", "names", "selected"), [
    ("gelu", ("gelu", "level1/gelu", "gelu[03]", "float16"), True),
    ("GELU", ("gelu",), True),
    ("exp and not float16", ("exp", "bfloat16"), False),  # substrings, as -k: float16 is in bfloat16
    ("exp and not float16", ("exp", "float32"), True),
    ("(level1 or level2) and softmax", ("softmax", "level2"), True),
    ("not (a or b)", ("c",), True),
    ("", ("anything",), True),
])
def test_selection_reads_pytests_k_grammar(expression: str, names: tuple[str, ...], selected: bool) -> None:
    assert compile_selection(expression)(names) is selected


@pytest.mark.parametrize("expression", ["gelu and", "(gelu", "gelu )", "and gelu", "a b"])
def test_a_selection_that_does_not_parse_says_where(expression: str) -> None:
    with pytest.raises(SelectError, match="selection"):
        compile_selection(expression)


def test_a_judges_setup_crosses_the_wire_unchanged(tmp_path: Path) -> None:
    controller = Controller(settings_for(tasks=str(ROOT / "tasks"), report_dir=str(tmp_path), seed=0), processes=2,
                            task_roots=[ROOT / "tasks"])
    try:
        setup = controller.judge_setup("gw1")
        again = JudgeSetup.from_dict(setup.to_dict())
        assert again == setup and again.worker_id == "gw1" and again.memory_plan.workers == 2
        assert Path(again.fence_path or "").exists()  # made by the controller, for every judge of the run
    finally:
        controller.close()
    assert not Path(setup.fence_path or "").exists() and not Path(setup.memory_plan.pool_file or "").exists()


def test_the_hidden_split_is_counted_in_the_plan_and_its_goldens_run_under_it(tmp_path: Path) -> None:
    base = dict(tasks=str(ROOT / "tasks"), report_dir=str(tmp_path), seed=0, perf=True)
    public, hidden = Controller(settings_for(**base)), Controller(settings_for(**base, hidden_generate=2))
    assert hidden.judges_per_process() == public.judges_per_process() + 3  # its golden, candidate, baseline
    with Judge(hidden.settings, hidden.judge_setup()) as judge:
        apart = judge.apart()
        service = apart.golden_service()
        assert service.worker.memory_bytes == judge.memory_plan.golden  # the plan's budget, not a share of RAM
        assert service.cache is None  # hidden goldens are never cached
        assert not apart.log_dir.is_relative_to(tmp_path)  # private logs, outside the report directory
        assert apart.memory_pool() is judge.memory_pool() and apart.fence() is judge.fence()
        private = apart.log_dir
    assert not private.exists()  # removed with the judge
    public.close()
    hidden.close()

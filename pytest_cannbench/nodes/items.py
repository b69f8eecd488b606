"""pytest nodes: an operator's ``cases.yaml`` is a File, each case an Item.

Node ids read ``level1/exp/cases.yaml::exp[03]``: ``-k exp`` selects the
operator, ``-k "exp and 03"`` one case (ids are zero-padded so ``03`` never
matches ``13``). Levels are markers (``-m level2``), dtypes and the category
are keywords (``-k bfloat16``; ``-k`` matches substrings, so ``float16`` also
selects ``bfloat16`` cases: write ``"float16 and not bfloat16"``). A broken operator becomes one failing item and
a broken case one failing item; neither stops the session.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import pytest

from pytest_cannbench import outcome as oc
from pytest_cannbench.outcome import CaseOutcome

OUTCOME_KEY = pytest.StashKey[CaseOutcome]()


class CannTaskWarning(pytest.PytestWarning):
    """A task file is valid but suspicious (the official harness's ``_validate_case`` warnings and more)."""


class CaseFailed(Exception):
    """Raised by an item to fail with a one-line verdict instead of a traceback."""


class TaskInputError(CaseFailed):
    pass


class GoldenSideError(CaseFailed):
    pass


class _CannItem(pytest.Item):
    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class InvalidTaskItem(_CannItem):
    """Stands for an operator directory that cannot be parsed; fails with the parse error."""

    def __init__(self, *, error: str, rel_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error
        self.rel_path = rel_path
        self.user_properties.append(("cann_case", f"{rel_path}_task"))

    def runtest(self) -> None:
        self.stash[OUTCOME_KEY] = CaseOutcome(key=f"{self.rel_path}_task", rel_path=self.rel_path, operator="",
                                              case_id=None, status=oc.ERROR, failure_type=oc.TASK_ERROR,
                                              message=self.error)
        raise TaskInputError(self.error)

    def reportinfo(self) -> tuple[Any, Optional[int], str]:
        return self.path, 0, f"{self.rel_path}: invalid task"


class CaseItem(_CannItem):
    """One case of one operator."""

    def __init__(self, *, task: Any, case: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.case = case
        self.golden_data: Any = None
        self.user_properties.append(("cann_case", task.result_key(case)))

    def reportinfo(self) -> tuple[Any, Optional[int], str]:
        # A line number is required: Node.warn() asserts one, and a CannTaskWarning on a case
        # would otherwise abort the whole collection. 0 is the top of cases.yaml.
        label = self.case.case_id if self.case.case_id is not None else f"#{self.case.index}"
        return self.path, 0, f"{self.task.rel_path} case {label}"

    def _record(self, result: CaseOutcome) -> CaseOutcome:
        self.stash[OUTCOME_KEY] = result
        return result

    def setup(self) -> None:
        from pytest_cannbench.judge import case as caserun
        from pytest_cannbench import state as session

        if self.task.result_key(self.case) in session.resume_keys(self.config):
            pytest.skip("already recorded in results.jsonl by an identical run (--cann-resume)")
        if self.case.error:
            return
        settings, state = session.settings(self.config), session.submission(self.config)
        if not settings.self_check and state is None:
            self._record(caserun.new_outcome(self.task, self.case, oc.SKIPPED, oc.NO_CANDIDATE,
                                             "no candidate to grade: pass --cann-source or --cann-self-check"))
            pytest.skip("no candidate to grade: pass --cann-source or --cann-self-check")
        if state is not None:
            if not state.ok:
                return  # runtest fails the case with the submission's status; no golden is needed
            if caserun.provider(self.task, state) is None:
                message = f"{self.task.spec.name} is not provided by the submission"
                self._record(caserun.new_outcome(self.task, self.case, oc.MISSING, oc.NOT_PROVIDED, message))
                pytest.skip(message)
        from pytest_cannbench.judge.goldens import GoldenFailure

        try:
            self.golden_data = caserun.prepare(self.task, self.case, session.golden_service(self.config), settings)
        except GoldenFailure as exc:
            self._record(caserun.new_outcome(self.task, self.case, oc.ERROR, oc.GOLDEN_ERROR, str(exc)))
            raise GoldenSideError(f"golden_error: {exc}") from None

    def runtest(self) -> None:
        from pytest_cannbench.judge import case as caserun
        from pytest_cannbench import state as session

        if self.case.error:
            self._record(caserun.new_outcome(self.task, self.case, oc.ERROR, oc.TASK_ERROR, self.case.error))
            raise TaskInputError(f"task_error: {self.case.error}")
        settings, state = session.settings(self.config), session.submission(self.config)
        if state is not None and not state.ok:
            self._record(caserun.new_outcome(self.task, self.case, state.status, state.status, state.message))
            raise CaseFailed(f"{state.status}: {state.message}")
        data, service = self.golden_data, session.golden_service(self.config)
        try:
            result, candidate_s = self._correctness(settings, state, data, service)
        except pytest.fail.Exception as exc:  # pytest-timeout: the worker was killed, the case is lost
            self._record(caserun.new_outcome(self.task, self.case, oc.TIMEOUT, oc.PYTEST_TIMEOUT, str(exc)))
            raise
        if result.status == oc.PASSED and settings.perf:
            from pytest_cannbench.timing.perf import measure

            timing, failure = measure(self.task, self.case, data, session.perf_context(self.config))
            if failure is not None:
                failure.accuracy = result.accuracy
                result = failure
            result.timing = timing
        else:
            from pytest_cannbench.timing.stats import not_measured

            result.timing = not_measured("--cann-no-perf" if not settings.perf else f"the case {result.status}")
        result.golden_cached = data.cached
        result.seconds = dict(data.seconds, candidate=candidate_s)
        self._record(result)
        if result.status == oc.ERROR:
            raise GoldenSideError(f"{result.failure_type}: {result.message}")
        if result.status != oc.PASSED:
            raise CaseFailed(f"{result.failure_type}: {result.message}")

    def _correctness(self, settings: Any, state: Any, data: Any, service: Any) -> tuple[CaseOutcome, float]:
        """The candidate on the case's inputs, judged; once it passes, once more on new inputs (a submission
        run only). Returns the verdict and the first call's seconds."""
        from pytest_cannbench.judge import case as caserun
        from pytest_cannbench import state as session

        worker, log_dir = session.candidate_worker(self.config), session.log_dir(self.config)
        answer = caserun.run_candidate(self.task, self.case, data, worker, settings, state, log_dir)
        result = answer.failure or caserun.judge(self.task, self.case, data, answer.outputs, service, settings)
        result.warnings += [f"guard (warn mode): {flag}" for flag in answer.flags]
        if result.status == oc.PASSED and not settings.self_check:
            again = caserun.second_pass(self.task, self.case, service, worker, settings, state, log_dir)
            if again is not None:
                again.accuracy = again.accuracy or result.accuracy
                result = again
        return result, answer.seconds or 0.0

    def teardown(self) -> None:
        self.golden_data = None  # outputs can be large; do not keep them for the whole session


class OperatorFile(pytest.File):
    """``cases.yaml`` of an operator directory."""

    def collect(self) -> Iterator[pytest.Item]:
        from pytest_cannbench.taskformat.casescsv import compare_csv
        from pytest_cannbench.taskformat.dirs import find_bench_root
        from pytest_cannbench.taskformat.spec import TaskFormatError, load_operator

        op_dir = self.path.parent
        bench_root = find_bench_root(op_dir)
        rel_path = op_dir.resolve().relative_to(bench_root).as_posix()
        try:
            task = load_operator(op_dir.resolve(), bench_root)
        except TaskFormatError as exc:
            yield InvalidTaskItem.from_parent(self, name=f"{op_dir.name}[task]", error=str(exc), rel_path=rel_path)
            return
        warn = _warns(self.config)
        for message in task.warnings if warn else ():
            self.warn(CannTaskWarning(message))
        csv_path = op_dir / "cases.csv"
        if warn and csv_path.is_file():
            problems = compare_csv(csv_path, [c.raw for c in task.cases])
            if problems:
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                self.warn(CannTaskWarning(f"cases.csv disagrees with cases.yaml: {problems[0]}{more}"))
        ids = [c.case_id for c in task.cases if c.case_id is not None]
        width = max(2, len(str(max(ids)))) if ids else 2
        level = task.level
        used: set[str] = set()
        for case in task.cases:
            label = f"{case.case_id:0{width}d}" if case.case_id is not None else f"#{case.index}"
            name = f"{op_dir.name}[{label}]"
            if name in used:
                name = f"{op_dir.name}[{label}#{case.index}]"
            used.add(name)
            item = CaseItem.from_parent(self, name=name, task=task, case=case)
            if level is not None:
                marker = f"level{level}"
                if marker not in _registered_markers(self.config):
                    self.config.addinivalue_line("markers", f"{marker}: CANN Bench level {level} operators")
                item.add_marker(getattr(pytest.mark, marker))
            item.add_marker(pytest.mark.cannbench)
            item.extra_keyword_matches.update(case.dtype_names)
            if task.spec.category:
                item.extra_keyword_matches.add(task.spec.category)
            for message in case.warnings if warn else ():
                item.warn(CannTaskWarning(message))
            yield item


def _warns(config: pytest.Config) -> bool:
    """Task warnings come from one collector: every xdist worker collects, the first one speaks."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput is None or workerinput.get("workerid") == "gw0"


def _registered_markers(config: pytest.Config) -> set[str]:
    return {line.split(":")[0].strip() for line in config.getini("markers")}


def collect_file(file_path: Any, parent: pytest.Collector) -> Optional[OperatorFile]:
    if file_path.name != "cases.yaml" or not (file_path.parent / "proto.yaml").is_file():
        return None
    from pytest_cannbench import state as session

    shard = session.settings(parent.config).shard
    if shard is not None:
        from pytest_cannbench.nodes.sharding import in_shard
        from pytest_cannbench.taskformat.dirs import find_bench_root

        op_dir = file_path.parent.resolve()
        if not in_shard(op_dir.relative_to(find_bench_root(op_dir)).as_posix(), *shard):
            return None
    return OperatorFile.from_parent(parent, path=file_path)


def ignore_golden(collection_path: Any) -> Optional[bool]:
    """Never collect a task's golden.py as a test module (a ``python_files = *.py`` project would)."""
    if collection_path.name == "golden.py" and (collection_path.parent / "cases.yaml").is_file():
        return True
    return None


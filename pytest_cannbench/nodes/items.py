"""pytest nodes: an operator's ``cases.yaml`` is a File, each case an Item.

Node ids read ``level1/exp/cases.yaml::exp[03]``: ``-k exp`` selects the
operator, ``-k "exp and 03"`` one case (ids are zero-padded so ``03`` never
matches ``13``). Levels are markers (``-m level2``), dtypes and the category
are keywords (``-k bfloat16``; ``-k`` matches substrings, so ``float16`` also
selects ``bfloat16`` cases: write ``"float16 and not bfloat16"``). A broken operator becomes one failing item and
a broken case one failing item; neither stops the session.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_cannbench import outcome as oc
from pytest_cannbench.core import CaseRun, CaseStopped, Judge, Route
from pytest_cannbench.core.tasks import case_need, check_pin
from pytest_cannbench.judge.case import OperatorCase
from pytest_cannbench.nodes.session import judge_of, settings_of
from pytest_cannbench.nodes.sharding import in_shard
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.taskformat.casescsv import compare_csv
from pytest_cannbench.taskformat.dirs import find_bench_root
from pytest_cannbench.taskformat.errors import TaskFormatError
from pytest_cannbench.taskformat.spec import load_operator
from pytest_cannbench.taskformat.task_warnings import operator_warning
from pytest_cannbench.vocab.casekey import CaseKey, candidate_of, split_key

if TYPE_CHECKING:
    from pytest_cannbench.judge.source import CaseSource
    from pytest_cannbench.taskformat.memory_need import MemoryNeed
    from pytest_cannbench.taskformat.spec import CaseSpec, OperatorTask

OUTCOME_KEY = pytest.StashKey[CaseOutcome]()
REL_PATHS = pytest.StashKey[dict[str, Path]]()  # rel_path -> the operator directory collection gave it first

# an item's name: "<op>[<label>]" with "[cand=<name>]" after it in a multi-candidate run, or a hidden case's
# "hidden-<n>" (key_of_name reads it back)
_ITEM_NAME = re.compile(r"(?:[^\[\]]+\[(?P<label>[^\[\]]+)\]|(?P<hidden>hidden-\d+))(?:\[cand=(?P<cand>[^\[\]]+)\])?")


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
        self.user_properties.append(("cann_case", str(CaseKey.task(rel_path))))

    def runtest(self) -> None:
        self.stash[OUTCOME_KEY] = CaseOutcome(
            key=str(CaseKey.task(self.rel_path)),
            rel_path=self.rel_path,
            operator="",
            case_id=None,
            status=oc.ERROR,
            failure_type=oc.TASK_ERROR,
            message=self.error,
        )
        raise TaskInputError(self.error)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, 0, f"{self.rel_path}: invalid task"


class SourceItem(_CannItem):
    """A case of any task source as a pytest item: its :class:`~pytest_cannbench.core.CaseRun` on this process's
    judge, in pytest's three phases. Subclasses say which source they grade (:meth:`route`)."""

    candidate: str | None = None  # the candidate of a multi-candidate run (None: the session's one submission)
    run: CaseRun | None = None

    def route(self, judge: Judge) -> Route:
        raise NotImplementedError

    def case_run(self, judge: Judge) -> CaseRun:
        """The case's run (a multi-rank case's is its own)."""
        return CaseRun(judge, self.route(judge))

    @property
    def source(self) -> CaseSource[Any]:
        assert self.run is not None, "made in setup"
        return self.run.source

    def _record(self, result: CaseOutcome) -> CaseOutcome:
        self.stash[OUTCOME_KEY] = result
        return result

    def _stopped(self, stopped: CaseStopped) -> BaseException:
        """The pytest form of a case that ended before or instead of a passing verdict."""
        if self.run is not None and self.run.outcome is not None:
            self._record(self.run.outcome)
            self.recorded(self.run.outcome)
        message = str(stopped)
        if stopped.kind == "skip":
            return pytest.skip.Exception(message)
        if stopped.kind == "task":
            return TaskInputError(message)
        if stopped.kind == "error":
            return GoldenSideError(message)
        return CaseFailed(message)

    def _interrupted(self, where: str, exc: BaseException) -> None:
        """pytest-timeout ended the case from outside: it still counts, as a timeout."""
        assert self.run is not None
        self.run.interrupted(where, str(exc))
        assert self.run.outcome is not None
        self._record(self.run.outcome)

    def setup(self) -> None:
        self.run = run = self.case_run(judge_of(self.config))
        try:
            run.setup()
        except CaseStopped as stopped:
            raise self._stopped(stopped) from None
        except pytest.fail.Exception as exc:  # pytest-timeout during the golden: the case still counts
            self._interrupted("in setup (golden)", exc)
            raise

    def runtest(self) -> None:
        assert self.run is not None
        try:
            result = self.run.run()
        except CaseStopped as stopped:
            raise self._stopped(stopped) from None
        except pytest.fail.Exception as exc:  # pytest-timeout: the worker was killed, the case is lost
            self._interrupted("", exc)
            raise
        self._record(result)
        self.recorded(result)

    def recorded(self, result: CaseOutcome) -> None:
        """Called with the case's final outcome, before a failure is raised (extra report properties)."""

    def memory_need(self) -> MemoryNeed | None:
        """The case's estimated memory need; None where a source has no estimate."""
        return None

    def teardown(self) -> None:
        if self.run is not None:
            self.run.teardown()


class CaseItem(SourceItem):
    """One case of one operator."""

    def __init__(self, *, task: OperatorTask, case: CaseSpec, candidate: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.case = case
        self.candidate = candidate
        self.user_properties.append(("cann_case", str(task.result_key_of(case).of_candidate(candidate))))

    def route(self, judge: Judge) -> Route:
        source = OperatorCase(
            task=self.task,
            case=self.case,
            settings=judge.settings,
            service=judge.golden_service,
            candidate=self.candidate or "",
            memo=judge.shared_reference if self.candidate else None,
        )
        return Route(source=source, candidate=self.candidate, need=self.memory_need())

    def memory_need(self) -> MemoryNeed | None:
        return self._need

    @functools.cached_property
    def _need(self) -> MemoryNeed | None:
        """Estimated once: collection sizes the memory pool with it, and each phase of the case holds a part."""
        return case_need(self.task, self.case, settings_of(self.config))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        # A line number is required: Node.warn() asserts one, and a CannTaskWarning on a case
        # would otherwise abort the whole collection. 0 is the top of cases.yaml.
        label = self.case.case_id if self.case.case_id is not None else f"#{self.case.index}"
        return self.path, 0, f"{self.task.rel_path} case {label}"


class OperatorFile(pytest.File):
    """``cases.yaml`` of an operator directory."""

    def collect(self) -> Iterator[pytest.Item]:
        op_dir = self.path.parent
        bench_root = find_bench_root(op_dir)
        rel_path = op_dir.resolve().relative_to(bench_root).as_posix()
        other = self.config.stash.setdefault(REL_PATHS, {}).setdefault(rel_path, op_dir.resolve())
        if other != op_dir.resolve():  # two trees of one session, one rel_path: their case keys would collide
            yield InvalidTaskItem.from_parent(
                self,
                name=f"{op_dir.name}[task]",
                rel_path=f"{bench_root.name}/{rel_path}",
                error=(
                    f"{op_dir}: its case keys ({rel_path}_<id>) are those of {other}, another tree collected in "
                    "this session (each tree's rel_path is under its own bench root), so their results would "
                    "replace each other's: grade each tree in a session of its own (--cann-tasks=<tree>)"
                ),
            )
            return
        try:
            task = load_operator(op_dir.resolve(), bench_root)
            check_pin(task, judge_of(self.config).setup.pins)
        except TaskFormatError as exc:
            yield InvalidTaskItem.from_parent(self, name=f"{op_dir.name}[task]", error=str(exc), rel_path=rel_path)
            return
        warn = _warns(self.config)
        if warn:  # one warning per operator, whatever its number of cases (operator_warning)
            extra = []
            csv_path = op_dir / "cases.csv"
            problems = compare_csv(csv_path, [c.raw for c in task.cases]) if csv_path.is_file() else []
            if problems:
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                extra.append(f"cases.csv disagrees with cases.yaml: {problems[0]}{more}")
            message = operator_warning(task, extra)
            if message is not None:
                self.warn(CannTaskWarning(message))
        ids = [c.case_id for c in task.cases if c.case_id is not None]
        width = max(2, len(str(max(ids)))) if ids else 2
        used: set[str] = set()
        # a multi-candidate run: each case once per candidate, candidates innermost (one golden serves them all)
        candidates: list[str | None] = [*judge_of(self.config).setup.candidates] or [None]
        for case in task.cases:
            label = f"{case.case_id:0{width}d}" if case.case_id is not None else f"#{case.index}"
            base = f"{op_dir.name}[{label}]"
            if base in used:
                base = f"{op_dir.name}[{label}#{case.index}]"
            used.add(base)
            yield from self._items(task, case, base, candidates)

    def item_class(self, case: CaseSpec) -> type[CaseItem]:
        """The item of one case (a multi-rank case's is nodes.multi_rank's)."""
        return CaseItem

    def _items(
        self, task: OperatorTask, case: CaseSpec, base: str, candidates: list[str | None]
    ) -> Iterator[pytest.Item]:
        level = task.level
        for candidate in candidates:
            name = base if candidate is None else f"{base}[cand={candidate}]"
            item = self.item_class(case).from_parent(self, name=name, task=task, case=case, candidate=candidate)
            if level is not None:
                marker = f"level{level}"
                if marker not in _registered_markers(self.config):
                    self.config.addinivalue_line("markers", f"{marker}: CANN Bench level {level} operators")
                item.add_marker(getattr(pytest.mark, marker))
            item.add_marker(pytest.mark.cannbench)
            item.extra_keyword_matches.update(case.dtype_names)
            if task.spec.category:
                item.extra_keyword_matches.add(task.spec.category)
            yield item


def key_of_name(path: Path, name: str) -> str | None:
    """The case key of the item ``name`` of the operator file ``path`` (a ``cases.yaml``), from its name alone, as
    :class:`OperatorFile` names its items: what the controller of an interrupted xdist session, which collects
    nothing and heard no key from its killed workers, files an unrun case under. None when not one of ours."""
    match = _ITEM_NAME.fullmatch(name)
    if path.name != "cases.yaml" or match is None:
        return None
    op_dir = path.parent
    try:
        rel_path = op_dir.resolve().relative_to(find_bench_root(op_dir)).as_posix()
    except ValueError:
        return None
    label, candidate = match["label"] or match["hidden"], match["cand"] or ""
    if label == "task":
        key = CaseKey.task(rel_path, candidate)
    elif label.startswith("hidden-"):
        key = CaseKey.hidden(rel_path, label, candidate)
    elif label.startswith("#") and label[1:].isdigit():
        key = CaseKey.position(rel_path, int(label[1:]), candidate)
    elif label.partition("#")[0].isdigit():
        key = CaseKey.case(rel_path, int(label.partition("#")[0]), candidate)
    else:
        return None
    return str(key)


def case_key(item: pytest.Item) -> str | None:
    """The case key an item carries from collection (``cann_case``), None for items not ours."""
    return next((str(value) for name, value in item.user_properties if name == "cann_case"), None)


def fallback_outcome(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]) -> CaseOutcome | None:
    """An outcome for an item of ours that failed before it recorded one, so the case is never lost: pytest-timeout
    (``Failed``) is a timeout, anything else a harness error naming the exception."""
    key = case_key(item)
    if key is None:
        return None
    rel_path, case_id = split_key(key)
    if isinstance(excinfo.value, pytest.fail.Exception):
        status, failure_type = oc.TIMEOUT, oc.PYTEST_TIMEOUT
    else:
        status, failure_type = oc.ERROR, oc.HARNESS_ERROR
    return CaseOutcome(
        key=key,
        rel_path=rel_path,
        operator="",
        case_id=case_id,
        status=status,
        failure_type=failure_type,
        message=f"{excinfo.typename}: {excinfo.value}"[:2000],
        candidate=candidate_of(key),
    )


def _warns(config: pytest.Config) -> bool:
    """Task warnings come from one collector: every xdist worker collects, the first one speaks."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput is None or workerinput.get("workerid") == "gw0"


def _registered_markers(config: pytest.Config) -> set[str]:
    return {line.split(":")[0].strip() for line in config.getini("markers")}


def collect_file(
    file_path: Any, parent: pytest.Collector, cls: type[OperatorFile] = OperatorFile
) -> OperatorFile | None:
    if file_path.name != "cases.yaml" or not (file_path.parent / "proto.yaml").is_file():
        return None
    shard = settings_of(parent.config).shard
    if shard is not None:
        op_dir = file_path.parent.resolve()
        if not in_shard(op_dir.relative_to(find_bench_root(op_dir)).as_posix(), *shard):
            return None
    return cls.from_parent(parent, path=file_path)

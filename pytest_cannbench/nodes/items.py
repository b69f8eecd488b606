"""pytest nodes: an operator's ``cases.yaml`` is a File, each case an Item.

Node ids read ``level1/exp/cases.yaml::exp[03]``: ``-k exp`` selects the
operator, ``-k "exp and 03"`` one case (ids are zero-padded so ``03`` never
matches ``13``). Levels are markers (``-m level2``), dtypes and the category
are keywords (``-k bfloat16``; ``-k`` matches substrings, so ``float16`` also
selects ``bfloat16`` cases: write ``"float16 and not bfloat16"``). A broken operator becomes one failing item and
a broken case one failing item; neither stops the session.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_cannbench import outcome as oc
from pytest_cannbench import state
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.phases import PhaseClock

if TYPE_CHECKING:
    from pytest_cannbench.judge.source import CaseSource, Reference
    from pytest_cannbench.state import CannBenchState
    from pytest_cannbench.taskformat.memory_need import MemoryNeed
    from pytest_cannbench.taskformat.spec import CaseSpec, OperatorTask
    from pytest_cannbench.timing.perf import PerfContext
    from pytest_cannbench.workers.candidate_client import CandidateWorker

OUTCOME_KEY = pytest.StashKey[CaseOutcome]()
REL_PATHS = pytest.StashKey[dict[str, Path]]()  # rel_path -> the operator directory collection gave it first
NO_CANDIDATE = "no candidate to grade: pass --cann-source DIR, or --cann-source @golden to grade the goldens"

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
        self.user_properties.append(("cann_case", f"{rel_path}_task"))

    def runtest(self) -> None:
        self.stash[OUTCOME_KEY] = CaseOutcome(key=f"{self.rel_path}_task", rel_path=self.rel_path, operator="",
                                              case_id=None, status=oc.ERROR, failure_type=oc.TASK_ERROR,
                                              message=self.error)
        raise TaskInputError(self.error)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, 0, f"{self.rel_path}: invalid task"


class SourceItem(_CannItem):
    """The life cycle of one case of any task source: skips, golden errors, correctness, timing.

    Subclasses say which :class:`~pytest_cannbench.judge.source.CaseSource` they grade (:meth:`make_source`)
    and whether they are timed.
    """

    source: CaseSource
    reference: Reference | None = None
    build_failed: str | None = None  # this case's own module did not compile at build time (KernelBench JIT)
    candidate: str | None = None  # the candidate of a multi-candidate run (None: the session's one submission)
    spans: list[list[float]] | None = None  # monotonic spans of the case's fenced accuracy work (timing/isolation)
    _memory_hold: contextlib.ExitStack  # the case's place in the memory plan, setup to teardown (nodes.memory)
    clock: PhaseClock  # where the case's time goes (phases), made in setup
    golden_alone: str | None = None  # why its golden ran again alone (:meth:`_golden`), a warning on its outcome

    @property
    def timed(self) -> bool:
        return True

    def make_source(self, st: CannBenchState) -> CaseSource:
        raise NotImplementedError

    def _record(self, result: CaseOutcome) -> CaseOutcome:
        self.stash[OUTCOME_KEY] = result
        return result

    def setup(self) -> None:
        from pytest_cannbench.judge.goldens import GoldenFailure
        from pytest_cannbench.judge.source import SkipCase

        st = state.of(self.config)
        source = self.source = self.make_source(st)
        self.spans, self._memory_hold = [], contextlib.ExitStack()
        self.clock = PhaseClock()
        submission = st.submission_of(self.candidate)
        if source.key in st.resume_keys():
            pytest.skip("already recorded in results.jsonl by an identical run (--cann-resume)")
        if source.task_error:
            return
        if not st.settings.self_check and submission is None:
            self._record(source.outcome(oc.SKIPPED, oc.NO_CANDIDATE, NO_CANDIDATE))
            pytest.skip(NO_CANDIDATE)
        if submission is not None:
            if not submission.ok:
                return  # runtest fails the case with the submission's status; no golden is needed
            message = source.missing(submission)
            if message is not None:
                self._record(source.outcome(oc.MISSING, oc.NOT_PROVIDED, message))
                pytest.skip(message)
            own_build = getattr(source, "build_failure", None)  # sources with per-module builds
            self.build_failed = own_build(submission) if own_build is not None else None
            if self.build_failed:
                return  # runtest fails the case as compile_failed; no golden is needed
        too_large = self.admit(st)
        if too_large is not None:  # issue 22: never started, so never an OOM; not the candidate's fault
            self._record(source.outcome(oc.TOO_LARGE, oc.TOO_LARGE, too_large))
            pytest.skip(f"{oc.TOO_LARGE}: {too_large}")
        try:
            self.reference = self._golden(st)
            self.clock.merge(self.reference.seconds)
            self.memory_phase(st, "candidate")
        except pytest.fail.Exception as exc:  # pytest-timeout during the golden: the case still counts
            self._record(source.outcome(oc.TIMEOUT, oc.PYTEST_TIMEOUT, f"in setup (golden): {exc}"))
            raise
        except SkipCase as exc:  # needs_npu is a status of its own; too_large stays a skip, as before
            status = oc.NEEDS_NPU if exc.failure_type == oc.NEEDS_NPU else oc.SKIPPED
            self._record(source.outcome(status, exc.failure_type, str(exc)))
            pytest.skip(str(exc))
        except GoldenFailure as exc:
            self._record(source.outcome(oc.ERROR, oc.GOLDEN_ERROR, str(exc)))
            raise GoldenSideError(f"golden_error: {exc}") from None

    def _runnable(self) -> state.CannBenchState:
        """The session's state, once the case's task and its submission are known to be usable (else the case is
        recorded as what stopped it, and fails)."""
        st, source = state.of(self.config), self.source
        if source.task_error:
            self._record(source.outcome(oc.ERROR, oc.TASK_ERROR, source.task_error))
            raise TaskInputError(f"task_error: {source.task_error}")
        submission = st.submission_of(self.candidate)
        if submission is not None and not submission.ok:
            self._record(source.outcome(submission.status, submission.status, submission.message))
            raise CaseFailed(f"{submission.status}: {submission.message}")
        return st

    def runtest(self) -> None:
        st, source = self._runnable(), self.source
        settings = st.settings
        if self.build_failed:
            self._record(source.outcome(oc.COMPILE_FAILED, oc.COMPILE_FAILED, self.build_failed))
            raise CaseFailed(f"{oc.COMPILE_FAILED}: {self.build_failed}")
        ref = self.reference
        assert ref is not None
        worker = self.worker_for(st)
        try:
            with st.fence().shared(self.spans):  # the candidate's calls and their verdicts
                result, candidate_s = self._correctness(st, ref, worker)
        except pytest.fail.Exception as exc:  # pytest-timeout: the worker was killed, the case is lost
            self._record(source.outcome(oc.TIMEOUT, oc.PYTEST_TIMEOUT, str(exc)))
            raise
        if result.status == oc.PASSED and settings.perf and self.timed:
            from pytest_cannbench.judge.precision import decided_without_native
            from pytest_cannbench.timing.perf import measure

            self.memory_phase(st, "peak")  # the timed sets' references are goldens too
            with self.clock.phase("timing"):
                timing, failure = measure(source, ref, worker, self.perf_for(st), self.clock,
                                          lean=decided_without_native(result.accuracy))
            if failure is not None:
                failure.accuracy = result.accuracy
                result = failure
            result.timing = timing
        else:
            from pytest_cannbench.timing.stats import not_measured

            result.timing = not_measured("--cann-no-perf" if not settings.perf else "not the timed item"
                                         if not self.timed else f"the case {result.status}")
        if st.fence().active and result.timing:  # for the reports' account of isolation (never scored)
            result.timing["accuracy_spans"] = [*(self.spans or []), *result.timing.get("accuracy_spans", [])]
        result.golden_cached = ref.cached
        if self.golden_alone:
            result.warnings.append(self.golden_alone)
        result.seconds = dict(self.clock.seconds, candidate=candidate_s)
        self._record(result)
        self.recorded(result)
        if result.status == oc.ERROR:
            raise GoldenSideError(f"{result.failure_type}: {result.message}")
        if result.status != oc.PASSED:
            raise CaseFailed(f"{result.failure_type}: {result.message}")

    def memory_need(self) -> MemoryNeed | None:
        """The case's estimated memory need (taskformat.memory_need); None where a source has no estimate."""
        return None

    def admit(self, st: CannBenchState, alone: bool = False) -> str | None:
        """Through the session's memory plan (nodes.memory): why the case is too large, or None once it holds
        its place (released at teardown); ``alone``: run it alone whatever its estimate."""
        from pytest_cannbench.nodes.memory import admit

        workers = [self.worker_for(st)] + ([st.worker("baseline")] if st.settings.perf and self.timed else [])
        return admit(st, self.memory_need(), workers, self._memory_hold, self.clock, alone=alone)

    def memory_phase(self, st: CannBenchState, phase: str) -> None:
        """Hold what the case's next phase needs of its memory pool reservation (nodes.memory.hold_phase)."""
        from pytest_cannbench.nodes.memory import hold_phase

        hold_phase(st, self.memory_need(), phase, self.clock)

    def _golden(self, st: CannBenchState) -> Reference:
        """The case's reference. A golden that runs out of its slot's memory (its working memory is more than
        the estimate from the case's tensors) is run once more alone, with the whole session's memory, when
        that is more; the case's warnings say so (``golden_alone``)."""
        from pytest_cannbench.judge.goldens import GoldenFailure
        from pytest_cannbench.nodes.memory import more_alone, runs_alone

        try:
            with st.fence().shared(self.spans):  # the golden: accuracy work, held off while another worker times
                return self.source.prepare()
        except GoldenFailure as exc:
            if not exc.oom or runs_alone(st, self.memory_need()) or not more_alone(st):
                raise
            first = str(exc).splitlines()[0]
        self._memory_hold.close()  # its share of the memory pool, for the whole pool
        self._memory_hold = contextlib.ExitStack()
        too_large = self.admit(st, alone=True)
        if too_large is not None:
            raise GoldenFailure(f"{first}; not run again alone: {too_large}", oom=True)
        whole = st.memory_plan().golden_whole / (1 << 30)
        try:
            with st.fence().shared(self.spans):
                ref = self.source.prepare()
        except GoldenFailure as exc:
            raise GoldenFailure(f"{exc} (also alone, with {whole:.1f} GiB of address space)", oom=exc.oom) from None
        self.golden_alone = (f"the golden ran out of its slot's memory ({first}); it ran again alone, with "
                             f"{whole:.1f} GiB of address space")
        return ref

    def recorded(self, result: CaseOutcome) -> None:
        """Called with the case's final outcome, before a failure is raised (extra report properties)."""

    # where the case runs and logs: the session's own workers and log directory, except for hidden cases
    def worker_for(self, st: CannBenchState) -> CandidateWorker:
        return st.worker(self.source.worker_role, self.candidate)

    def perf_for(self, st: CannBenchState) -> PerfContext:
        return st.perf_context()

    def log_dir_for(self, st: CannBenchState) -> Path:
        return st.log_dir

    def _correctness(self, st: CannBenchState, ref: Reference, worker: CandidateWorker) -> tuple[CaseOutcome, float]:
        """The candidate on the case's inputs, judged; once it passes, once more on new inputs (where the
        source has a second pass). Returns the verdict and the first call's seconds."""
        from pytest_cannbench.judge.precision import decided_without_native
        from pytest_cannbench.judge.source import run_candidate, second_pass

        source, timeout_s, log_dir = self.source, st.settings.case_timeout_s, self.log_dir_for(st)
        answer = run_candidate(source, ref, worker, timeout_s, log_dir, self.clock)
        if answer.failure is not None:
            result = answer.failure
        else:
            with self.clock.phase("compare"):
                result = source.judge(answer.outputs or [], ref)
        result.warnings += [f"guard (warn mode): {flag}" for flag in answer.flags]
        if result.status == oc.PASSED:
            st.fence().let_windows_pass()  # another worker's window, waiting, goes before the second pass
            like = ref if decided_without_native(result.accuracy) else None  # its native runs where needed
            self.memory_phase(st, "golden_kept")  # the first reference stays with the judge
            again = second_pass(source, worker, timeout_s, log_dir, self.clock, like=like,
                                after_golden=lambda: self.memory_phase(st, "candidate_kept"))
            if again is not None:
                again.accuracy = again.accuracy or result.accuracy
                result = again
        return result, answer.seconds or 0.0

    def teardown(self) -> None:
        self.reference = None  # outputs can be large; do not keep them for the whole session
        state.of(self.config).release_regions()  # nor the regions' pages, grown to the largest case so far
        hold = getattr(self, "_memory_hold", None)  # its share of the memory pool, any raised budgets (nodes.memory)
        if hold is not None:
            hold.close()


class CaseItem(SourceItem):
    """One case of one operator."""

    def __init__(self, *, task: OperatorTask, case: CaseSpec, candidate: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.case = case
        self.candidate = candidate
        key = task.result_key(case)
        self.user_properties.append(("cann_case", f"cand={candidate}/{key}" if candidate else key))

    def make_source(self, st: CannBenchState) -> CaseSource:
        from pytest_cannbench.judge.case import OperatorCase

        return OperatorCase(task=self.task, case=self.case, settings=st.settings, service=st.golden_service,
                            candidate=self.candidate or "", memo=st.shared_reference if self.candidate else None)

    def memory_need(self) -> MemoryNeed | None:
        return self._need

    @functools.cached_property
    def _need(self) -> MemoryNeed | None:
        """Estimated once: collection sizes the memory pool with it, and each phase of the case holds a part."""
        from pytest_cannbench.taskformat.memory_need import estimate

        need, s = estimate(self.task.spec, self.case), state.of(self.config).settings
        # the first reference is kept through the second pass (none in a self-check: OperatorCase.check_seed)
        # and the timing
        if need is not None and s.self_check and not (s.perf and self.timed):
            need = need.without_kept()
        return need

    def reportinfo(self) -> tuple[Any, int | None, str]:
        # A line number is required: Node.warn() asserts one, and a CannTaskWarning on a case
        # would otherwise abort the whole collection. 0 is the top of cases.yaml.
        label = self.case.case_id if self.case.case_id is not None else f"#{self.case.index}"
        return self.path, 0, f"{self.task.rel_path} case {label}"


def check_pin(task: OperatorTask, pins: dict[str, str]) -> None:
    """A golden.py that changed between the session's start (before any submission code ran) and collection
    was rewritten by something during the build: a harness error naming the file, never a new truth."""
    from pytest_cannbench.taskformat.errors import TaskFormatError

    path = str(task.op_dir / "golden.py")
    pinned = pins.get(path)
    if pinned is not None and pinned != task.golden_sha256:
        raise TaskFormatError(task.op_dir / "golden.py", "", f"changed after the session started (sha256 "
                              f"{pinned[:12]} before the submission was built, {task.golden_sha256[:12]} now)",
                              "restore the task tree (something rewrote it during the build) and rerun")


class OperatorFile(pytest.File):
    """``cases.yaml`` of an operator directory."""

    def collect(self) -> Iterator[pytest.Item]:
        from pytest_cannbench.taskformat.casescsv import compare_csv
        from pytest_cannbench.taskformat.dirs import find_bench_root
        from pytest_cannbench.taskformat.errors import TaskFormatError
        from pytest_cannbench.taskformat.spec import load_operator
        from pytest_cannbench.taskformat.task_warnings import operator_warning

        op_dir = self.path.parent
        bench_root = find_bench_root(op_dir)
        rel_path = op_dir.resolve().relative_to(bench_root).as_posix()
        other = self.config.stash.setdefault(REL_PATHS, {}).setdefault(rel_path, op_dir.resolve())
        if other != op_dir.resolve():  # two trees of one session, one rel_path: their case keys would collide
            yield InvalidTaskItem.from_parent(
                self, name=f"{op_dir.name}[task]", rel_path=f"{bench_root.name}/{rel_path}",
                error=(f"{op_dir}: its case keys ({rel_path}_<id>) are those of {other}, another tree collected in "
                       "this session (each tree's rel_path is under its own bench root), so their results would "
                       "replace each other's: grade each tree in a session of its own (--cann-tasks=<tree>)"))
            return
        try:
            task = load_operator(op_dir.resolve(), bench_root)
            check_pin(task, state.of(self.config).golden_pins())
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
        candidates: list[str | None] = [*state.of(self.config).candidate_names()] or [None]
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

    def _items(self, task: OperatorTask, case: CaseSpec, base: str,
               candidates: list[str | None]) -> Iterator[pytest.Item]:
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
    from pytest_cannbench.taskformat.dirs import find_bench_root

    match = _ITEM_NAME.fullmatch(name)
    if path.name != "cases.yaml" or match is None:
        return None
    op_dir = path.parent
    try:
        rel_path = op_dir.resolve().relative_to(find_bench_root(op_dir)).as_posix()
    except ValueError:
        return None
    label, candidate = match["label"] or match["hidden"], match["cand"]
    if label == "task":
        key = f"{rel_path}_task"
    elif label.startswith("hidden-"):
        key = f"{rel_path}#{label}"
    elif label.startswith("#") and label[1:].isdigit():
        key = f"{rel_path}_#{label[1:]}"
    elif label.partition("#")[0].isdigit():
        key = f"{rel_path}_{int(label.partition('#')[0])}"
    else:
        return None
    return f"cand={candidate}/{key}" if candidate else key


def case_key(item: pytest.Item) -> str | None:
    """The case key an item carries from collection (``cann_case``), None for items not ours."""
    return next((str(value) for name, value in item.user_properties if name == "cann_case"), None)


def fallback_outcome(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]) -> CaseOutcome | None:
    """An outcome for an item of ours that failed before it recorded one, so the case is never lost: pytest-timeout
    (``Failed``) is a timeout, anything else a harness error naming the exception."""
    key = case_key(item)
    if key is None:
        return None
    rel_path, _, tail = key.rpartition("_")
    rel_path, case_id = (rel_path, int(tail)) if rel_path and tail.isdigit() else (key, None)
    if isinstance(excinfo.value, pytest.fail.Exception):
        status, failure_type = oc.TIMEOUT, oc.PYTEST_TIMEOUT
    else:
        status, failure_type = oc.ERROR, oc.HARNESS_ERROR
    return CaseOutcome(key=key, rel_path=rel_path, operator="", case_id=case_id, status=status,
                       failure_type=failure_type, message=f"{excinfo.typename}: {excinfo.value}"[:2000])


def _warns(config: pytest.Config) -> bool:
    """Task warnings come from one collector: every xdist worker collects, the first one speaks."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput is None or workerinput.get("workerid") == "gw0"


def _registered_markers(config: pytest.Config) -> set[str]:
    return {line.split(":")[0].strip() for line in config.getini("markers")}


def collect_file(file_path: Any, parent: pytest.Collector,
                 cls: type[OperatorFile] = OperatorFile) -> OperatorFile | None:
    if file_path.name != "cases.yaml" or not (file_path.parent / "proto.yaml").is_file():
        return None
    shard = state.of(parent.config).settings.shard
    if shard is not None:
        from pytest_cannbench.nodes.sharding import in_shard
        from pytest_cannbench.taskformat.dirs import find_bench_root

        op_dir = file_path.parent.resolve()
        if not in_shard(op_dir.relative_to(find_bench_root(op_dir)).as_posix(), *shard):
            return None
    return cls.from_parent(parent, path=file_path)

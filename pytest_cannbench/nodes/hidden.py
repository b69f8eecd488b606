"""Hidden cases as pytest items: opaque names, sealed outcomes, workers and logs of their own.

A hidden case exists only in the judge. Its item is named ``hidden-<n>`` (the node id says nothing else), every
outcome it records is sealed to its opaque key, status and failure type (plus the three times HAP needs), its
failures raise one sealed line, warnings raised while it runs are dropped, and its golden and candidate workers
log into a private temporary directory that is removed at the end (a submission printing its inputs leaves no
trace in ``reports/``); the golden cache is never used for it. docs/hidden-cases.md lists every output path.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from pytest_cannbench import outcome as oc
from pytest_cannbench.core import CaseRun, Judge, Route
from pytest_cannbench.judge.case import OperatorCase
from pytest_cannbench.judge.task_quality import grade_case
from pytest_cannbench.nodes.items import OUTCOME_KEY, CaseFailed, CaseItem, GoldenSideError, OperatorFile
from pytest_cannbench.nodes.session import settings_of
from pytest_cannbench.outcome import CaseOutcome
from pytest_cannbench.taskformat.hidden import GENERATED, HiddenCaseError, generation_key, load_hidden
from pytest_cannbench.vocab.casekey import CaseKey
from pytest_cannbench.vocab.records import sealed_timing

if TYPE_CHECKING:
    from pytest_cannbench.judge.source import CaseSource
    from pytest_cannbench.options import Settings
    from pytest_cannbench.taskformat.hidden import HiddenCase

DROP_GOLDEN = "dropped: the golden rejects it"
DROP_WEAK = "dropped: the quality gate finds it weak (a null candidate passes)"
DROP_BROKEN = "dropped: the quality gate finds it broken (a correct answer fails)"


def header_line(settings: Settings) -> str:
    """What the run header says of the hidden split (never a case)."""
    written = f"written cases from {settings.hidden_cases}" if settings.hidden_cases else "no written cases"
    generated = f"{settings.hidden_generate} generated per operator" if settings.hidden_generate else "none generated"
    return (
        f"cannbench: hidden split (sealed): {written}, {generated}; gate "
        f"{'on' if settings.hidden_gate else 'off'} (docs/hidden-cases.md)"
    )


def seal(result: CaseOutcome, key: str, message: str = "") -> CaseOutcome:
    """What of a hidden case may leave the judge: key, status, failure type and the times HAP needs."""
    label = CaseKey.parse(key).label
    text = message or f"{label}: {result.status}" + (f" ({result.failure_type})" if result.failure_type else "")
    return CaseOutcome(
        key=key,
        rel_path=result.rel_path,
        operator=result.operator,
        case_id=None,
        status=result.status,
        failure_type=result.failure_type,
        message=text,
        timing=sealed_timing(result.timing),
        split=oc.SPLIT_HIDDEN,
    )


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Warnings raised for a hidden case could carry its shapes: they are dropped, not summarised."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class HiddenCaseItem(CaseItem):
    """One hidden case: graded like a public one, seen from outside only as ``hidden-<n>``."""

    def __init__(self, *, task: Any, case: Any, hidden: HiddenCase, **kwargs: Any) -> None:
        super(CaseItem, self).__init__(**kwargs)  # not CaseItem's: its property names the real case id
        self.task, self.case, self.hidden = task, case, hidden
        self.key = str(CaseKey.hidden(task.rel_path, hidden.label))
        self.user_properties += [("cann_case", self.key), ("cann_split", oc.SPLIT_HIDDEN.value)]

    def case_run(self, judge: Judge) -> CaseRun:
        """The case on the judge's apart judge (private logs, no golden cache), its outcomes sealed."""
        return CaseRun(judge.apart(), self.route(judge.apart()), seal=lambda result: seal(result, self.key))

    def route(self, judge: Judge) -> Route:
        make = hidden_source()
        source: CaseSource[Any] = make(
            task=self.task, case=self.case, settings=judge.settings, service=judge.golden_service, hidden_key=self.key
        )
        return Route(source=source, need=self.memory_need())

    def _record(self, result: CaseOutcome, message: str = "") -> CaseOutcome:
        return super()._record(seal(result, self.key, message))

    def _drop(self, why: str) -> None:
        self._record(
            CaseOutcome(
                key=self.key,
                rel_path=self.task.rel_path,
                operator=self.task.spec.name,
                case_id=None,
                status=oc.SKIPPED,
                failure_type=oc.HIDDEN_DROPPED,
            ),
            why,
        )
        pytest.skip(f"{self.hidden.label}: {why}")

    def _sealed_line(self) -> str:
        result = self.stash.get(OUTCOME_KEY, None)
        if result is None:
            result = self._record(
                CaseOutcome(
                    key=self.key,
                    rel_path=self.task.rel_path,
                    operator=self.task.spec.name,
                    case_id=None,
                    status=oc.ERROR,
                )
            )
        return result.message

    def setup(self) -> None:
        generated = self.hidden.origin == GENERATED
        with quiet():
            if self.hidden.dropped:
                self._drop(f"dropped: {self.hidden.dropped}")
            try:
                super().setup()
            except pytest.skip.Exception:
                if OUTCOME_KEY not in self.stash:
                    raise  # resumed from results.jsonl: a fixed message, and the recorded outcome stands
                pytest.skip(self._sealed_line())
            except GoldenSideError:
                if generated:
                    self._drop(DROP_GOLDEN)
                raise CaseFailed(self._sealed_line()) from None
            except Exception:  # noqa: BLE001 - anything else would print a traceback with the case in it
                raise CaseFailed(self._sealed_line()) from None
            if generated and self.run is not None and self.run.reference is not None:
                self._gate()

    def _gate(self) -> None:
        """The task-quality gate on a generated case: a case no null candidate fails is not worth grading."""
        import io

        s = settings_of(self.config)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            quality = grade_case(
                self.task, self.case, checker=s.checker, seed=s.seed, dist=s.input_dist, compat=s.input_compat
            )
        if quality.error:
            self._drop(DROP_GOLDEN)
        if quality.weak:
            self._drop(DROP_WEAK)
        if quality.broken:
            self._drop(DROP_BROKEN)

    def runtest(self) -> None:
        with quiet():
            try:
                super().runtest()
            except (Exception, pytest.fail.Exception):  # noqa: BLE001 - a failure says only its status and type
                raise CaseFailed(self._sealed_line()) from None

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, 0, f"{self.task.rel_path} {self.hidden.label}"


@functools.cache
def hidden_source() -> type:
    """:class:`~pytest_cannbench.judge.case.OperatorCase` keyed by the opaque label, so case logs and resume never
    see the real id (made on first use: the judge room brings torch)."""

    @dataclass
    class HiddenSource(OperatorCase):
        hidden_key: str = ""

        @property
        def key(self) -> str:
            return self.hidden_key

    return HiddenSource


class OperatorWithHidden(OperatorFile):
    """An operator's ``cases.yaml``: its public cases, then (with a hidden split) its hidden ones."""

    def collect(self) -> Iterator[pytest.Item]:
        task = None
        for item in super().collect():
            if task is None and isinstance(item, CaseItem):
                task = item.task
            yield item
        settings = settings_of(self.config)
        if task is None or not settings.hidden:
            return

        try:
            hidden = load_hidden(
                task,
                hidden_root=settings.hidden_cases,
                count=settings.hidden_generate,
                key=generation_key(settings.secret, settings.seed),
            )
        except HiddenCaseError as exc:
            raise self.CollectError(str(exc)) from None
        for h in hidden:
            item = HiddenCaseItem.from_parent(self, name=h.label, task=task, case=h.case, hidden=h)
            if task.level is not None:
                item.add_marker(getattr(pytest.mark, f"level{task.level}"))
            item.add_marker(pytest.mark.cannbench)
            item.extra_keyword_matches.add(oc.SPLIT_HIDDEN)
            yield item

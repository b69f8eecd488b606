"""The case key: the name a case's result is filed under everywhere (boards, ``results.jsonl``, junit's
``cann_case``, the case logs, the seeds), written by one formatter and read by one parser.

The grammar, ``[cand=<candidate>/]<rel_path><tail>``:

==============================  ==========================================================================
``level1/exp_3``                a case by its id (``CaseKey.case``); a KernelBench problem's trial or timed
                                case reads the same way, its rel_path being the file: ``level1/19_ReLU.py_6``
``level1/exp_#4``               a case with no usable id, by its position in ``cases.yaml``
                                (``CaseKey.position``)
``level1/exp_task``             the operator itself, when its task files cannot be read (``CaseKey.task``)
``level1/exp#hidden-07``        a hidden case, by its opaque label (``CaseKey.hidden``)
``cand=run1_s0/level1/exp_3``   any of the above, of one candidate of a multi-candidate run
==============================  ==========================================================================

Numbers are written without leading zeros (a hidden label keeps its own padding), so ``str(CaseKey.parse(s)) == s``
for every key the grader writes, and a string that is not one (a pytest node id, a typo) is refused by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum

CANDIDATE_PREFIX = "cand="
HIDDEN_MARK = "#hidden-"
TASK_TAIL = "task"
_NUMBER = re.compile(r"0|[1-9][0-9]*")  # canonical: what f"{n}" writes
_HIDDEN_DIGITS = re.compile(r"[0-9]+")
_CANDIDATE = re.compile(r"[^/\s]+")
GRAMMAR = "[cand=<candidate>/]<rel_path>_<id> | <rel_path>_#<position> | <rel_path>_task | <rel_path>#hidden-<n>"


class KeyKind(str, Enum):
    """What a key names: a case by id or by position, the operator's task files, or a hidden case."""

    CASE = "case"
    POSITION = "position"
    TASK = "task"
    HIDDEN = "hidden"

    def __str__(self) -> str:
        return self.value


class NotACaseKey(ValueError):
    """A string that the case-key grammar does not read; the message names it and the grammar."""


@dataclass(frozen=True)
class CaseKey:
    """One case key, as data. Build one with :meth:`case`, :meth:`position`, :meth:`task` or :meth:`hidden` (and
    :meth:`of_candidate`), read one with :meth:`parse`; ``str(key)`` is its one spelling."""

    rel_path: str  # the operator directory (or KernelBench problem file) under its bench root: level1/exp
    kind: KeyKind
    number: int | None = None  # the case id (CASE) or the position in cases.yaml (POSITION)
    label: str = ""  # HIDDEN: the opaque label, e.g. "hidden-07"
    candidate: str = ""  # a multi-candidate run's candidate ("" otherwise)

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            raise NotACaseKey(
                f"CaseKey({self.rel_path!r}, {self.kind.value}, number={self.number!r}, "
                f"label={self.label!r}, candidate={self.candidate!r}): {problem}"
            )

    def _problem(self) -> str:
        if not self.rel_path or self.rel_path.startswith(CANDIDATE_PREFIX) or "#" in self.rel_path:
            return "rel_path must be non-empty, without '#' and not start with 'cand='"
        if self.candidate and not _CANDIDATE.fullmatch(self.candidate):
            return "a candidate name has no '/' and no whitespace"
        numbered = self.kind in (KeyKind.CASE, KeyKind.POSITION)
        if numbered != (self.number is not None) or (self.number is not None and self.number < 0):
            return "a case or position key needs a number >= 0, and no other kind has one"
        hidden = self.label.removeprefix(HIDDEN_MARK[1:])
        if (self.kind == KeyKind.HIDDEN) != bool(self.label) or (
            self.label and (hidden == self.label or not _HIDDEN_DIGITS.fullmatch(hidden))
        ):
            return "a hidden key needs a label hidden-<digits>, and no other kind has one"
        return ""

    # ------------------------------------------------------------ building

    @classmethod
    def case(cls, rel_path: str, case_id: int, candidate: str = "") -> CaseKey:
        return cls(rel_path, KeyKind.CASE, number=case_id, candidate=candidate)

    @classmethod
    def position(cls, rel_path: str, index: int, candidate: str = "") -> CaseKey:
        return cls(rel_path, KeyKind.POSITION, number=index, candidate=candidate)

    @classmethod
    def task(cls, rel_path: str, candidate: str = "") -> CaseKey:
        return cls(rel_path, KeyKind.TASK, candidate=candidate)

    @classmethod
    def hidden(cls, rel_path: str, label: str, candidate: str = "") -> CaseKey:
        return cls(rel_path, KeyKind.HIDDEN, label=label, candidate=candidate)

    def of_candidate(self, candidate: str | None) -> CaseKey:
        """The same case of ``candidate`` (None or "": the session's one submission)."""
        return replace(self, candidate=candidate or "")

    # ------------------------------------------------------------ reading

    @property
    def case_id(self) -> int | None:
        """The case id of a key by id, None for every other kind."""
        return self.number if self.kind == KeyKind.CASE else None

    @property
    def is_hidden(self) -> bool:
        return self.kind == KeyKind.HIDDEN

    def without_candidate(self) -> CaseKey:
        return replace(self, candidate="")

    def order(self) -> tuple[str, str, int, str]:
        """A sort key: by candidate, operator, then cases by id (positions, the task and hidden cases after)."""
        rank = {KeyKind.CASE: 0, KeyKind.POSITION: 1, KeyKind.TASK: 2, KeyKind.HIDDEN: 3}[self.kind]
        return (self.candidate, self.rel_path, rank * (1 << 40) + (self.number or 0), self.label)

    def __str__(self) -> str:
        prefix = f"{CANDIDATE_PREFIX}{self.candidate}/" if self.candidate else ""
        if self.kind == KeyKind.HIDDEN:
            return f"{prefix}{self.rel_path}#{self.label}"
        tail = {KeyKind.CASE: f"{self.number}", KeyKind.POSITION: f"#{self.number}", KeyKind.TASK: TASK_TAIL}[self.kind]
        return f"{prefix}{self.rel_path}_{tail}"

    @classmethod
    def parse(cls, text: str) -> CaseKey:
        """The key ``text`` spells; :class:`NotACaseKey` naming it when it is not one (:data:`GRAMMAR`)."""
        found = parse_key(text)
        if found is None:
            raise NotACaseKey(f"{text!r} is not a case key ({GRAMMAR})")
        return found


def parse_key(text: str) -> CaseKey | None:
    """:meth:`CaseKey.parse`, None instead of an exception: for callers that fall back to a node id."""
    if not isinstance(text, str):
        return None
    candidate, rest = "", text
    if text.startswith(CANDIDATE_PREFIX):
        candidate, slash, rest = text[len(CANDIDATE_PREFIX) :].partition("/")
        if not slash or not candidate:
            return None
    try:
        if HIDDEN_MARK in rest:
            rel_path, _, digits = rest.rpartition(HIDDEN_MARK)
            return CaseKey.hidden(rel_path, HIDDEN_MARK[1:] + digits, candidate)
        rel_path, underscore, tail = rest.rpartition("_")
        if not underscore:
            return None
        if tail == TASK_TAIL:
            return CaseKey.task(rel_path, candidate)
        if tail.startswith("#") and _NUMBER.fullmatch(tail[1:]):
            return CaseKey.position(rel_path, int(tail[1:]), candidate)
        if _NUMBER.fullmatch(tail):
            return CaseKey.case(rel_path, int(tail), candidate)
    except NotACaseKey:
        return None
    return None


def split_key(text: str) -> tuple[str, int | None]:
    """``(rel_path, case_id)`` of a key, for a record made from a key alone (a crash report, an unrun case): a
    string that is not a key (a bare node id) is its own rel_path, with no case id."""
    key = parse_key(text)
    return (text, None) if key is None else (key.rel_path, key.case_id)


def candidate_of(text: str) -> str:
    """The candidate a key names ("" for a single-candidate run's key, or for a string that is not a key)."""
    key = parse_key(text)
    return "" if key is None else key.candidate

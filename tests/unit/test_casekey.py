"""The case-key grammar: every form the grader writes reads back to the same key and spells the same string, and a
string that is not a key is refused by name."""

from __future__ import annotations

import pytest

from pytest_cannbench.vocab.casekey import CaseKey, KeyKind, NotACaseKey, candidate_of, parse_key, split_key

FORMS = [
    # text, rel_path, kind, number, label, candidate, case_id
    ("level1/exp_3", "level1/exp", KeyKind.CASE, 3, "", "", 3),
    ("level1/exp_0", "level1/exp", KeyKind.CASE, 0, "", "", 0),
    ("level1/gelu_erf_12", "level1/gelu_erf", KeyKind.CASE, 12, "", "", 12),  # an underscore in the operator
    ("relu_12", "relu", KeyKind.CASE, 12, "", "", 12),  # a flat suite
    ("level1/exp_#4", "level1/exp", KeyKind.POSITION, 4, "", "", None),
    ("level1/exp_task", "level1/exp", KeyKind.TASK, None, "", "", None),
    ("level1/exp#hidden-07", "level1/exp", KeyKind.HIDDEN, None, "hidden-07", "", None),
    ("level1/exp#hidden-123", "level1/exp", KeyKind.HIDDEN, None, "hidden-123", "", None),
    ("level1/19_ReLU.py_1", "level1/19_ReLU.py", KeyKind.CASE, 1, "", "", 1),  # KernelBench: a trial
    ("level1/19_ReLU.py_6", "level1/19_ReLU.py", KeyKind.CASE, 6, "", "", 6),  # KernelBench: the timed case
    ("cand=run1_s0/level1/exp_1", "level1/exp", KeyKind.CASE, 1, "", "run1_s0", 1),
    ("cand=honest_s0/level1/19_ReLU.py_6", "level1/19_ReLU.py", KeyKind.CASE, 6, "", "honest_s0", 6),
    ("cand=a.b-c/level1/exp_#2", "level1/exp", KeyKind.POSITION, 2, "", "a.b-c", None),
    ("cand=x/level1/exp_task", "level1/exp", KeyKind.TASK, None, "", "x", None),
    ("cand=x/level1/exp#hidden-01", "level1/exp", KeyKind.HIDDEN, None, "hidden-01", "x", None),
]


@pytest.mark.parametrize("text, rel_path, kind, number, label, candidate, case_id", FORMS)
def test_every_form_round_trips(text: str, rel_path: str, kind: KeyKind, number: int | None, label: str,
                                candidate: str, case_id: int | None) -> None:
    key = CaseKey.parse(text)
    assert (key.rel_path, key.kind, key.number, key.label, key.candidate) == (rel_path, kind, number, label, candidate)
    assert key.case_id == case_id
    assert str(key) == text
    assert CaseKey.parse(str(key)) == key
    assert split_key(text) == (rel_path, case_id)
    assert candidate_of(text) == candidate
    assert key.is_hidden == (kind == KeyKind.HIDDEN)
    assert str(key.without_candidate().of_candidate(candidate)) == text


@pytest.mark.parametrize("build, text", [
    (lambda: CaseKey.case("level1/exp", 3), "level1/exp_3"),
    (lambda: CaseKey.position("level1/exp", 4), "level1/exp_#4"),
    (lambda: CaseKey.task("level1/exp"), "level1/exp_task"),
    (lambda: CaseKey.hidden("level1/exp", "hidden-07"), "level1/exp#hidden-07"),
    (lambda: CaseKey.case("level1/exp", 3).of_candidate("c1"), "cand=c1/level1/exp_3"),
    (lambda: CaseKey.case("level1/exp", 3).of_candidate(None), "level1/exp_3"),
])
def test_the_builders_spell_the_grammar(build, text: str) -> None:  # type: ignore[no-untyped-def]
    assert str(build()) == text


@pytest.mark.parametrize("text", [
    "tasks/level1/exp/cases.yaml::exp[03]",  # a node id: the collector then files it under the node id itself
    "level1/exp",  # no tail
    "level1/exp_03",  # a leading zero would not spell back the same
    "level1/exp_#04",
    "level1/exp_x",
    "level1/exp_",
    "_3",  # no rel_path
    "cand=/level1/exp_3",  # an empty candidate
    "cand=x",  # no key after the candidate
    "cand=x/cand=y/level1/exp_3",  # a rel_path cannot start like a candidate
    "level1/exp#hidden-",
    "level1/exp#hidden-x",
    "#hidden-01",
    "level1/exp_-1",
    "",
])
def test_what_is_not_a_key_is_refused_by_name(text: str) -> None:
    assert parse_key(text) is None
    with pytest.raises(NotACaseKey, match="is not a case key"):
        CaseKey.parse(text)
    assert split_key(text) == (text, None)  # what a crash record of a bare node id files it under
    assert candidate_of(text) == ""


@pytest.mark.parametrize("build", [
    lambda: CaseKey.case("", 1),
    lambda: CaseKey.case("level1/exp", -1),
    lambda: CaseKey.case("level1/a#b", 1),
    lambda: CaseKey.case("cand=x/level1/exp", 1),
    lambda: CaseKey.case("level1/exp", 1, candidate="a/b"),
    lambda: CaseKey.hidden("level1/exp", "secret-07"),
    lambda: CaseKey.hidden("level1/exp", ""),
    lambda: CaseKey("level1/exp", KeyKind.TASK, number=3),
    lambda: CaseKey("level1/exp", KeyKind.CASE),
])
def test_a_key_that_could_not_be_read_back_cannot_be_built(build) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(NotACaseKey):
        build()


def test_keys_sort_by_candidate_operator_and_id() -> None:
    texts = ["level1/exp_10", "level1/exp#hidden-01", "level1/exp_task", "level1/exp_#2", "level1/exp_2",
             "cand=b/level1/exp_1", "level1/abs_3"]
    ordered = sorted(texts, key=lambda t: CaseKey.parse(t).order())
    assert ordered == ["level1/abs_3", "level1/exp_2", "level1/exp_10", "level1/exp_#2", "level1/exp_task",
                       "level1/exp#hidden-01", "cand=b/level1/exp_1"]


def test_the_seeded_case_key_is_spelled_as_before() -> None:
    """The case key seeds every case's inputs (taskformat.inputs.case_seed): the task's formatter must spell it as
    it always did, or every input of every case changes."""
    from pytest_cannbench.taskformat.spec import OperatorTask

    assert OperatorTask.case_key(type("T", (), {"rel_path": "level1/exp"})(), 1) == "level1/exp_1"  # type: ignore[arg-type]

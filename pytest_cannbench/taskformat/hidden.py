"""An operator's hidden cases: written ones (``--cann-hidden-cases DIR``) and generated ones
(``--cann-hidden-generate N``), each under an opaque label, validated against the proto like public cases.

The hidden tree mirrors the task tree: ``DIR/<rel_path>/cases.yaml`` in the official format, no proto or golden
(those stay with the public task). Problems with a written file refuse the run, naming the file but never a case's
contents: the hidden split is sealed (docs/hidden-cases.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_cannbench.taskformat.errors import TaskFormatError
from pytest_cannbench.taskformat.hidden_gen import generate
from pytest_cannbench.taskformat.spec import CaseSpec, OperatorTask, parse_cases

WRITTEN, GENERATED = "written", "generated"


class HiddenCaseError(Exception):
    """A hidden case file that cannot be used: the run refuses it (the message names the file only)."""


@dataclass(frozen=True)
class HiddenCase:
    label: str  # opaque: "hidden-07", the only name it has outside the judge
    case: CaseSpec
    origin: str  # WRITTEN or GENERATED
    dropped: str = ""  # why a generated case is not scored (no new shape, invalid against the proto)


def generation_key(secret: str, seed: int) -> str:
    """What the generator is keyed by: the session secret, or the evaluation seed when there is none."""
    return f"secret={secret}" if secret else f"seed={seed}"


def hidden_file(hidden_root: str | Path, rel_path: str) -> Path:
    return Path(hidden_root) / rel_path / "cases.yaml"


def load_hidden(task: OperatorTask, *, hidden_root: str | None, count: int, key: str) -> list[HiddenCase]:
    """The operator's hidden cases in a fixed order: written ones first, then ``count`` generated ones."""
    written = _written(task, hidden_file(hidden_root, task.rel_path)) if hidden_root else []
    ids = [c.case_id for c in [*task.cases, *written] if c.case_id is not None]
    made = generate([c.raw for c in task.cases if c.error is None], count, key=key, rel_path=task.rel_path,
                    first_id=max(ids, default=0) + 1)
    raws = [g.raw for g in made if g.raw is not None]
    label_path = task.op_dir / "cases.yaml"
    parsed = iter(parse_cases(label_path, task.spec, {"cases": raws}) if raws else [])
    generated: list[tuple[CaseSpec, str]] = []
    for g in made:
        if g.raw is None:
            generated.append((CaseSpec(-1, None, {}, error=g.dropped), g.dropped))
            continue
        case = next(parsed)
        generated.append((case, "invalid against proto.yaml" if case.error else ""))
    total = len(written) + len(generated)
    width = max(2, len(str(total)))
    out = [HiddenCase(f"hidden-{n + 1:0{width}d}", case, WRITTEN) for n, case in enumerate(written)]
    out += [HiddenCase(f"hidden-{len(written) + n + 1:0{width}d}", case, GENERATED, dropped)
            for n, (case, dropped) in enumerate(generated)]
    return out


def _written(task: OperatorTask, path: Path) -> list[CaseSpec]:
    if not path.is_file():
        return []
    try:
        cases = parse_cases(path, task.spec)
    except TaskFormatError as exc:
        raise HiddenCaseError(f"hidden case file {path}: {exc}") from None
    public = {c.case_id for c in task.cases if c.case_id is not None}
    clash = sorted(public & {c.case_id for c in cases if c.case_id is not None})
    if clash:
        raise HiddenCaseError(
            f"hidden case file {path}: case_id {', '.join(map(str, clash))} also in the public "
            f"{task.op_dir / 'cases.yaml'}; hidden ids must never clash with public ones (renumber the hidden "
            "cases, e.g. from 1001)")
    bad = [c.index for c in cases if c.error]
    if bad:
        raise HiddenCaseError(
            f"hidden case file {path}: cases[{', '.join(map(str, bad))}] invalid against "
            f"{task.op_dir / 'proto.yaml'} (details withheld: the hidden split is sealed; to see them, put the file "
            "in a copy of the operator directory and run --cann-source @golden on it)")
    return cases

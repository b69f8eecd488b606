"""Task-quality gate: can each case tell a wrong answer from a right one?

A case is only worth grading if the accuracy checker rejects obvious wrong answers and accepts a correct
answer that differs from the golden by rounding. This module builds *null candidates* from a case's own
golden and judges them with :func:`caserun.judge`, the function the harness applies to a submission:

==============  =========================================================================  ========
model           candidate                                                                  verdict
==============  =========================================================================  ========
``zeros``       zeros of the output's shape and dtype                                      fail
``passthrough`` an input with exactly the output's shape and dtype, returned as the output fail
``permuted``    the golden with its flattened elements shuffled                            fail
``bfloat16``    inputs and result rounded to bfloat16 (float16/32/64 outputs only)         fail
``ulp_noise``   the golden moved one unit in the last place of its dtype, random sign       pass
==============  =========================================================================  ========

The fail models replace one output at a time (the others stay correct), so a multi-output operator whose
second output is never really checked is caught too. A case where a fail model passes is *weak*; a case
whose noisy-but-correct candidate fails, or whose golden cannot run, is *broken*.

Goldens are trusted task code, so they run here in-process through the golden worker's own ``prepare``
(same inputs, seeds, fp64 truth and same-precision reference as a graded run); one golden per case serves
every model and is dropped before the next case.

Run it over any tree: ``python -m pytest_cannbench.judge.task_quality tasks [-k NAME]`` (exit status 1 when
some case is weak or broken).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pytest_cannbench.judge.case import apply_get_output, compare_flags, judge, output_names, seed_of
from pytest_cannbench.judge.goldens import GoldenData, prepare_request
from pytest_cannbench.outcome import PASSED
from pytest_cannbench.taskformat.dirs import find_bench_root, iter_operator_dirs
from pytest_cannbench.taskformat.errors import TaskFormatError
from pytest_cannbench.taskformat.generate import generate_inputs
from pytest_cannbench.taskformat.inputs import plan_inputs
from pytest_cannbench.taskformat.spec import load_operator
from pytest_cannbench.vocab.registry import DEFAULT_CHECKER, checker_help, checker_names
from pytest_cannbench.workers.golden_binding import bind, call_get_output, flatten_outputs, load_golden, upcast
from pytest_cannbench.workers.golden_main import prepare

FAIL, PASS, NA = "fail", "pass", "n/a"
MUST_FAIL = ("zeros", "passthrough", "permuted", "bfloat16")
MUST_PASS = ("ulp_noise",)
MODELS = MUST_FAIL + MUST_PASS


@dataclass(frozen=True)
class NullVerdict:
    """One null candidate and what the checker said about it."""

    model: str  # one of MODELS
    target: str  # the output it replaced ("y", "values <- x"), "all" for noise, "" when not applicable
    expected: str  # FAIL, PASS or NA
    got: str  # FAIL, PASS or NA
    reason: str  # the checker's message (or why the model does not apply)

    @property
    def wrong(self) -> bool:
        return self.expected != NA and self.got != self.expected


@dataclass
class CaseQuality:
    """Every null verdict of one case."""

    rel_path: str
    case_id: int | None
    note: str
    dtypes: list[str]
    verdicts: list[NullVerdict] = field(default_factory=list)
    error: str = ""  # the case could not be gated at all (task error, golden error)
    seconds: float = 0.0  # wall clock
    cpu_seconds: float = 0.0  # this process's CPU time: what a run costs on an idle machine

    @property
    def label(self) -> str:
        return f"{self.rel_path}[{self.case_id:02d}]" if self.case_id is not None else f"{self.rel_path}[?]"

    @property
    def weak(self) -> bool:
        """A wrong answer passed: the case cannot tell it from a right one."""
        return any(v.wrong and v.model in MUST_FAIL for v in self.verdicts)

    @property
    def broken(self) -> bool:
        """No verdict at all, or a correct-within-rounding answer failed."""
        return bool(self.error) or any(v.wrong and v.model in MUST_PASS for v in self.verdicts)

    def problems(self) -> list[str]:
        """One line per wrong verdict, naming the case, the model, its target and the checker's reason."""
        head = f"{self.label} ({', '.join(self.dtypes)}; {self.note})" if self.note else self.label
        if self.error:
            return [f"{head}: broken: {self.error}"]
        lines = []
        for v in self.verdicts:
            if v.wrong:
                kind = "weak" if v.model in MUST_FAIL else "broken"
                lines.append(f"{head}: {kind}: {v.model} [{v.target}] should {v.expected} but got {v.got}: "
                             f"{v.reason}")
        return lines

    def summary(self, model: str) -> str:
        """The model's verdicts in one word: fail, pass, n/a, or ``pass!``/``fail!`` when wrong."""
        mine = [v for v in self.verdicts if v.model == model]
        wrong = [v for v in mine if v.wrong]
        if wrong:
            return wrong[0].got + "!"
        got = {v.got for v in mine}
        return got.pop() if len(got) == 1 else (FAIL if FAIL in got else NA)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "weak": self.weak, "broken": self.broken}


# --------------------------------------------------------------------------------------------
# null models (pure tensor functions)


def zeros_like_output(ref: Any) -> Any:
    import torch

    return torch.zeros(ref.shape, dtype=ref.dtype)


def permuted(ref: Any, gen: Any) -> Any:
    """The flattened elements in a random order that is never the identity (for two or more elements)."""
    import torch

    flat = ref.reshape(-1)
    n = flat.numel()
    order = torch.randperm(n, generator=gen, dtype=torch.int32 if n < 1 << 31 else torch.int64)
    if n > 1 and bool((order == torch.arange(n, dtype=order.dtype)).all()):
        order = order.roll(1)
    return flat.index_select(0, order).reshape(ref.shape)


def bfloat16_rounded(value: Any) -> Any:
    """A float tensor rounded to bfloat16 and cast back to its dtype; anything else unchanged."""
    import torch

    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(torch.bfloat16).to(value.dtype)
    if isinstance(value, list):
        return [bfloat16_rounded(v) for v in value]
    return value


_INT_VIEW = {2: "int16", 4: "int32", 8: "int64"}


def ulp_noise(ref: Any, gen: Any) -> Any:
    """Each finite element moved one unit in the last place of its dtype, up or down in magnitude at random.

    Done on the bit pattern (sign-magnitude), so it is exactly one ulp in float16, bfloat16 and float32 alike.
    Zeros step up (to the smallest subnormal of their sign), the largest finite magnitude steps down (never to
    inf); NaN and inf stay. Integer and bool tensors are returned unchanged.
    """
    import torch

    if not ref.is_floating_point() or ref.element_size() not in _INT_VIEW:
        return ref.clone()
    int_dtype = getattr(torch, _INT_VIEW[ref.element_size()])
    bits = ref.contiguous().view(int_dtype)
    mag_mask = torch.iinfo(int_dtype).max  # every bit but the sign
    magnitude = bits & mag_mask
    top = torch.tensor(torch.finfo(ref.dtype).max, dtype=ref.dtype).view(int_dtype)
    step = torch.randint(0, 2, ref.shape, generator=gen, dtype=int_dtype) * 2 - 1
    step = torch.where(magnitude == 0, torch.ones_like(step), step)
    step = torch.where(magnitude == top, -torch.ones_like(step), step)
    step = torch.where(torch.isfinite(ref), step, torch.zeros_like(step))
    return (bits + step).view(ref.dtype).contiguous()


# --------------------------------------------------------------------------------------------
# one case


def _local_get_output(task: Any, case: Any, outputs: dict[str, list[Any] | None]) -> dict[str, Any]:
    """The task's ``get_output`` hook applied in-process by the trusted golden (the gate runs no candidate)."""
    gm = load_golden(task.op_dir, task.rel_path, task.spec.function_name, task.spec.name.lower(),
                     task.golden_sha256)
    assert gm.get_output is not None  # apply_get_output calls this only for a golden with the hook
    return {key: None if outs is None else call_get_output(gm.get_output, outs, task.spec.output_names, case.attrs)
            for key, outs in outputs.items()}


def _case_inputs(task: Any, case: Any, reply: dict[str, Any], seed: int, dist: str, compat: str) -> list[Any]:
    """What a candidate is called with: the hook's inputs, else the generic ones regenerated bit for bit."""
    if reply["hooked"] is not None:
        return reply["hooked"]

    raw = case.raw
    plans = plan_inputs(task.spec.input_names, raw["input_shape"], raw["dtype"], raw.get("value_range"))
    return generate_inputs(plans, seed, dist=dist, compat=compat)


def _bfloat16_truth(task: Any, case: Any, inputs: list[Any]) -> list[Any]:
    """The fp64 truth on bfloat16-rounded inputs: the model of a kernel that computes in bfloat16."""
    gm = load_golden(task.op_dir, task.rel_path, task.spec.function_name, task.spec.name.lower(),
                     task.golden_sha256)
    truth = gm.oracle or gm.main
    rounded = upcast(bfloat16_rounded(inputs))
    return flatten_outputs(truth(**bind(truth, rounded, case.attrs).kwargs(rounded)))


def _exact_outputs(task: Any) -> set[str]:
    """Outputs an index check pairs with the input: exact copies by contract, so never noised."""
    return {d.index_gather["value_output"] for d in task.spec.outputs
            if d.index_gather and d.index_gather.get("value_output")}


def _reason(outcome: Any) -> str:
    if outcome.message:
        return outcome.message.splitlines()[0]
    return "; ".join(f"{a['name']}: {a['message']}" for a in outcome.accuracy) or outcome.status


def grade_case(task: Any, case: Any, *, checker: str = "relative_error", seed: int = 0, dist: str = "uniform",
               compat: str = "fixed") -> CaseQuality:
    """Judge every null candidate of one case; never raises for a golden or task problem (see ``error``)."""
    started, cpu = time.perf_counter(), time.process_time()
    quality = CaseQuality(rel_path=task.rel_path, case_id=case.case_id, note=str(case.raw.get("note") or ""),
                          dtypes=case.dtype_names)
    if case.error:
        quality.error = f"case error: {case.error}"
        return quality
    try:
        quality.verdicts = _grade(task, case, checker=checker, seed=seed, dist=dist, compat=compat)
    except _Unusable as exc:
        quality.error = str(exc)
    except Exception as exc:  # noqa: BLE001 - e.g. the golden refuses bfloat16-rounded inputs: name the case
        quality.error = f"gate error: {type(exc).__name__}: {exc}"
    finally:
        quality.seconds = time.perf_counter() - started
        quality.cpu_seconds = time.process_time() - cpu
    return quality


class _Unusable(RuntimeError):
    """The case has no usable golden, so nothing can be gated."""


def _grade(task: Any, case: Any, *, checker: str, seed: int, dist: str, compat: str) -> list[NullVerdict]:
    import torch

    from pytest_cannbench.judge.thresholds import thresholds_for  # brings torch

    # what caserun reads of the Settings: the checker, and the seed of a run without a secret
    settings = SimpleNamespace(checker=checker, seed=seed, secret="")
    case_seed_ = seed_of(task, case, settings)
    # the golden worker's request of a graded run (fp64 truth plus same-precision reference)
    reply = prepare(prepare_request(task, case, case_seed_, dist=dist, compat=compat, precision="fp64_cpu"))
    if not reply.get("ok"):
        raise _Unusable(f"golden error: {reply.get('error')}")
    if reply["native"] is None:
        raise _Unusable(f"no same-precision reference, so no output dtypes: {reply['native_error']}")
    inputs = _case_inputs(task, case, reply, case_seed_, dist, compat)
    data = GoldenData(make_inputs=lambda: inputs, binding=tuple(tuple(e) for e in reply["binding"]),
                      golden=reply["golden"], native=reply["native"], native_error=reply["native_error"],
                      has_get_output=reply["has_get_output"], cached=False, hooked=reply["hooked"])
    count = len(data.golden)
    names = output_names(task, count)
    flags = compare_flags(task, count)
    exact = _exact_outputs(task)
    assert data.native is not None  # reply["native"], checked above
    # the correct answer in each output's contract dtype: what a right candidate returns
    right = [g.to(n.dtype).contiguous() if isinstance(g, torch.Tensor) and isinstance(n, torch.Tensor) else g
             for g, n in zip(data.golden, data.native)]
    gen = torch.Generator()
    gen.manual_seed(case_seed_)

    def verdict(model: str, target: str, expected: str, candidate: list[Any]) -> NullVerdict:
        outputs = apply_get_output(data, candidate, lambda outs: _local_get_output(task, case, outs))
        outcome = judge(task, case, data, outputs, settings)
        got = PASS if outcome.status == PASSED else FAIL
        reason = _reason(outcome)
        if got == PASS and expected == FAIL:
            reason = _why_unchanged(candidate, right) + reason
        return NullVerdict(model, target, expected, got, reason)

    def replaced(i: int, value: Any) -> list[Any]:
        return [value if j == i else r for j, r in enumerate(right)]

    checked = [i for i, r in enumerate(right) if isinstance(r, torch.Tensor) and (flags[i] or _has_index(task, i))]
    named_inputs = _named_inputs(data)
    out: list[NullVerdict] = []
    for i in checked:
        out.append(verdict("zeros", names[i], FAIL, replaced(i, zeros_like_output(right[i]))))
    out += _each_or_na("passthrough", [
        verdict("passthrough", f"{names[i]} <- {label}", FAIL, replaced(i, tensor.clone()))
        for i in checked for label, tensor in named_inputs
        if tuple(tensor.shape) == tuple(right[i].shape) and tensor.dtype == right[i].dtype
    ], "no input has an output's shape and dtype")
    out += _each_or_na("permuted", [
        verdict("permuted", names[i], FAIL, replaced(i, permuted(right[i], gen))) for i in checked
        if right[i].numel() > 1
    ], "no output has two elements")
    lossy = [i for i in checked if right[i].dtype in (torch.float16, torch.float32, torch.float64)]
    if lossy:
        coarse = _bfloat16_truth(task, case, inputs)
        out += [verdict("bfloat16", names[i], FAIL,
                        replaced(i, coarse[i].to(torch.bfloat16).to(right[i].dtype).contiguous()))
                for i in lossy]
        del coarse
    else:
        out.append(NullVerdict("bfloat16", "", NA, NA, "outputs are bfloat16 or integer"))
    noisy = [ulp_noise(r, gen) if isinstance(r, torch.Tensor) and names[j] not in exact
             and not thresholds_for(r.dtype, task.spec.precision_thresholds).exact else r
             for j, r in enumerate(right)]
    out.append(verdict("ulp_noise", "all", PASS, noisy))
    return out


def _why_unchanged(candidate: list[Any], right: list[Any]) -> str:
    """A hint for a wrong answer that passed: how much of it is the right answer (a constant, exact output)."""
    import torch

    for c, r in zip(candidate, right):
        if c is r or not isinstance(c, torch.Tensor) or c.shape != r.shape or c.dtype != r.dtype or not c.numel():
            continue
        if torch.equal(c, r):
            distinct = torch.unique(r).numel() if r.numel() <= 1 << 24 else "many"
            return f"the null equals the golden ({distinct} distinct value(s) in {tuple(r.shape)}); "
        same = (c == r) | (torch.isnan(c) & torch.isnan(r)) if c.is_floating_point() else c == r
        return f"the null equals the golden at {100 * same.double().mean().item():.1f}% of the elements; "
    return ""


def _has_index(task: Any, i: int) -> bool:
    outputs = task.spec.outputs
    return i < len(outputs) and bool(outputs[i].index_gather)


def _named_inputs(data: Any) -> list[tuple[str, Any]]:
    """Tensor inputs (and TensorList elements) named by the golden parameter they bind to."""
    import torch

    named = []
    for param, source, value in data.binding:
        if source != "input":
            continue
        item = data.inputs[value]
        if isinstance(item, torch.Tensor):
            named.append((param, item))
        elif isinstance(item, list):
            named += [(f"{param}[{j}]", t) for j, t in enumerate(item) if isinstance(t, torch.Tensor)]
    return named


def _each_or_na(model: str, verdicts: list[NullVerdict], why: str) -> list[NullVerdict]:
    return verdicts or [NullVerdict(model, "", NA, NA, why)]


# --------------------------------------------------------------------------------------------
# operators and trees


@dataclass
class OperatorQuality:
    rel_path: str
    cases: list[CaseQuality] = field(default_factory=list)
    error: str = ""  # the operator could not be loaded

    def problems(self) -> list[str]:
        if self.error:
            return [f"{self.rel_path}: broken: {self.error}"]
        return [line for c in self.cases for line in c.problems()]

    @property
    def seconds(self) -> float:
        return sum(c.seconds for c in self.cases)

    @property
    def cpu_seconds(self) -> float:
        return sum(c.cpu_seconds for c in self.cases)


def load_task(op_dir: Path) -> Any:
    """An operator directory parsed as the plugin parses it (bench root found the same way)."""
    op_dir = Path(op_dir).resolve()
    return load_operator(op_dir, find_bench_root(op_dir))


def grade_operator(op_dir: Path, **options: Any) -> OperatorQuality:
    """Every case of one operator, one golden at a time."""
    try:
        task = load_task(op_dir)
    except TaskFormatError as exc:
        return OperatorQuality(rel_path=str(op_dir), error=str(exc))
    result = OperatorQuality(rel_path=task.rel_path)
    for case in task.cases:
        result.cases.append(grade_case(task, case, **options))
    return result


def operator_dirs(root: Path, keyword: str = "") -> list[Path]:
    return [d for d in iter_operator_dirs(Path(root)) if keyword.lower() in d.name.lower()]


def format_table(results: list[OperatorQuality]) -> str:
    """One line per case: its verdict per model (``!`` marks a wrong one) and its seconds."""
    head = f"{'case':<36} " + " ".join(f"{m:<11}" for m in MODELS) + " seconds cpu_s"
    lines = [head]
    for op in results:
        if op.error:
            lines.append(f"{op.rel_path:<36} operator error")
        for c in op.cases:
            cells = " ".join(f"{'error' if c.error else c.summary(m):<11}" for m in MODELS)
            lines.append(f"{c.label:<36} {cells} {c.seconds:7.2f} {c.cpu_seconds:5.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_cannbench.judge.task_quality",
                                     description="Judge null candidates on every case of a task tree.")
    parser.add_argument("root", type=Path, help="a task tree, a level directory or one operator directory")
    parser.add_argument("-k", dest="keyword", default="", help="only operators whose directory name contains this")
    parser.add_argument("--checker", default=DEFAULT_CHECKER, choices=checker_names(), help=checker_help())
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads > 0:
        import torch

        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    results = [grade_operator(d, checker=args.checker) for d in operator_dirs(args.root, args.keyword)]
    out(format_table(results))
    problems = [line for r in results for line in r.problems()]
    cases = sum(len(r.cases) for r in results)
    cpu = sum(r.cpu_seconds for r in results)
    out(f"\n{len(results)} operators, {cases} cases, {len(problems)} problem(s), "
        f"{time.perf_counter() - started:.1f} s ({cpu:.1f} s CPU in the cases)")
    for line in problems:
        out(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

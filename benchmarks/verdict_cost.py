"""What judging one output costs: the full statistics against the verdict alone, side by side on the same data.

Usage: python benchmarks/verdict_cost.py [--tasks tasks] [--rounds 3] [-k SUBSTRING]

Every timed output, and a second correctness pass that passes, needs only its verdict (issue 22): the
statistics a report shows come from the case's first check. ``stats=False`` asks ``compare_outputs`` for the
verdict alone (MERE and MARE first, the full scan only when they do not pass). Per case of the tree this takes
the golden's native-precision outputs as the candidate (an honest implementation: what the verdict sees most),
the fp64 golden and the native reference, then times, interleaved round by round on one thread, the full
statistics, the verdict alone and the floor's streamed MERE/MARE (``floor_work.mere_mare``: what any grader
must do). Prints the totals per operator and in all, the ratios, the rule each output was decided by, and checks
that both give the same verdict. Task code runs here directly: this measures trusted goldens, never a grader.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def references(op_dir: Path, task, spec) -> tuple[list, list]:
    """(fp64 golden outputs, native outputs) of one case; raises where the golden cannot run here."""
    from pytest_cannbench.taskformat.generate import generate_inputs
    from pytest_cannbench.taskformat.inputs import case_seed, plan_inputs
    from pytest_cannbench.workers.golden_binding import bind, call_get_input, flatten_outputs, load_golden, upcast

    gm = load_golden(op_dir, task.rel_path, task.spec.function_name, task.spec.name.lower(), task.golden_sha256)
    raw, attrs = spec.raw, dict(spec.attrs)
    plans = plan_inputs(task.spec.input_names, raw["input_shape"], raw["dtype"], raw.get("value_range"))
    inputs = generate_inputs(plans, case_seed(task.case_key(spec.case_id)))
    if gm.get_input is not None:
        inputs = call_get_input(gm.get_input, task.spec.input_names, inputs, attrs)
    wide, truth = upcast(inputs), gm.oracle or gm.main
    golden = flatten_outputs(truth(**bind(truth, wide, attrs).kwargs(wide)))
    native = flatten_outputs(gm.main(**bind(gm.main, inputs, attrs).kwargs(inputs)))
    return golden, native


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=str(ROOT / "tasks"))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per case (the median is kept)")
    parser.add_argument("-k", dest="only", default=None, help="only operators whose directory contains this")
    args = parser.parse_args()

    import torch
    from floor_work import mere_mare

    from pytest_cannbench.judge.precision import compare_outputs
    from pytest_cannbench.taskformat.dirs import find_bench_root
    from pytest_cannbench.taskformat.spec import load_operator

    torch.set_num_threads(1)
    tasks = Path(args.tasks).resolve()
    totals = {"full": 0.0, "alone": 0.0, "floor": 0.0}
    rules: dict[str, int] = {}
    print(f"{'operator':<24}{'cases':>6}{'full s':>9}{'alone s':>9}{'floor s':>9}{'full/alone':>11}"
          f"{'alone/floor':>12}")
    for op_dir in sorted(p.parent for p in tasks.rglob("proto.yaml")):
        if args.only and args.only not in str(op_dir):
            continue
        task = load_operator(op_dir, find_bench_root(op_dir))
        op = {"full": 0.0, "alone": 0.0, "floor": 0.0}
        cases = 0
        for spec in task.cases:
            try:
                golden, native = references(op_dir, task, spec)
            except Exception as exc:  # noqa: BLE001 - a golden that cannot run here is skipped, and said
                print(f"  {task.rel_path} {spec.case_id}: skipped ({type(exc).__name__}: {exc})")
                continue
            names = [f"y{i}" for i in range(len(native))]
            dtypes = [n.dtype if n is not None else None for n in native]
            runs: dict[str, list[float]] = {"full": [], "alone": [], "floor": []}
            verdicts = {}
            for _ in range(args.rounds):
                for mode in ("full", "alone", "floor"):
                    start = time.perf_counter()
                    if mode == "floor":
                        for a, g in zip(native, golden):
                            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.shape == g.shape:
                                mere_mare(a, g)
                    else:
                        verdicts[mode] = compare_outputs(native, golden, native, names=names, expected_dtypes=dtypes,
                                                         stats=mode == "full")
                    runs[mode].append(time.perf_counter() - start)
            same = [(v.passed, v.rule, v.message) for v in verdicts["full"]] == [
                (v.passed, v.rule, v.message) for v in verdicts["alone"]]
            if not same:
                print(f"  {task.rel_path} {spec.case_id}: THE VERDICTS DIFFER")
                return 1
            for v in verdicts["full"]:
                rules[v.rule] = rules.get(v.rule, 0) + 1
            for mode, times in runs.items():
                op[mode] += sorted(times)[len(times) // 2]
            cases += 1
        for mode in totals:
            totals[mode] += op[mode]
        if cases:
            print(f"{task.rel_path:<24}{cases:>6}{op['full']:>9.2f}{op['alone']:>9.2f}{op['floor']:>9.2f}"
                  f"{op['full'] / max(op['alone'], 1e-9):>10.2f}x{op['alone'] / max(op['floor'], 1e-9):>11.2f}x")
    full, alone, floor = totals["full"], totals["alone"], totals["floor"]
    print(f"{'all':<30}{full:>9.2f}{alone:>9.2f}{floor:>9.2f}"
          f"{full / max(alone, 1e-9):>10.2f}x{alone / max(floor, 1e-9):>11.2f}x")
    print("outputs decided by: " + ", ".join(f"{k} {v}" for k, v in sorted(rules.items())))
    print("verdicts: identical on every case")
    return 0


if __name__ == "__main__":
    sys.exit(main())

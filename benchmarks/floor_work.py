"""The irreducible work of a list of cases, for benchmarks/phases.py (run as its own process, one thread).

Usage: python benchmarks/floor_work.py CASES.json   (a JSON list of [op_dir, case_id] or [op_dir, case_id, sets]);
prints one JSON line.

Per case, nothing beyond what any grader must do: the inputs generated once, the fp64 golden once, a candidate
once (the golden on the case's own dtypes, as under --cann-self-check) and one MERE/MARE comparison of each float
output, streamed in chunks so no full-size fp64 temporary is made. A case timed on ``sets`` fresh input sets adds,
per set, what verifying a timed output needs: its inputs, its fp64 golden and one comparison (``timed_sets_s``),
extrapolated from the case's own measured figures (every set has the case's shapes and dtypes). The timed calls
themselves are the run's own measurements (benchmarks/phases.py adds them). Task code runs here directly: this is
a measurement of trusted goldens, never a grader.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHUNK = 1 << 20  # elements compared at a time


def mere_mare(actual: Any, golden: Any) -> tuple[float, float]:
    """Mean and max relative error of ``actual`` against ``golden``, chunk by chunk in float64."""
    import torch

    a, g = actual.reshape(-1), golden.reshape(-1)
    total, worst = 0.0, 0.0
    for start in range(0, a.numel(), CHUNK):
        ga = g[start:start + CHUNK].to(torch.float64)
        err = (a[start:start + CHUNK].to(torch.float64) - ga).abs_().div_(ga.abs().add_(1e-7))  # ga may be g's own
        total += float(err.sum())
        worst = max(worst, float(err.max())) if err.numel() else worst
    return total / max(a.numel(), 1), worst


def one_case(op_dir: Path, case_id: int, clocks: dict[str, float], sets: int = 0) -> None:
    import torch

    from pytest_cannbench.taskformat.dirs import find_bench_root
    from pytest_cannbench.taskformat.generate import generate_inputs
    from pytest_cannbench.taskformat.inputs import case_seed, plan_inputs
    from pytest_cannbench.taskformat.spec import load_operator
    from pytest_cannbench.workers.golden_binding import bind, call_get_input, flatten_outputs, load_golden, upcast

    task = load_operator(op_dir, find_bench_root(op_dir))
    case = next(c for c in task.cases if c.case_id == case_id)
    gm = load_golden(op_dir, task.rel_path, task.spec.function_name, task.spec.name.lower(), task.golden_sha256)
    raw, attrs = case.raw, dict(case.attrs)
    t0 = time.perf_counter()
    plans = plan_inputs(task.spec.input_names, raw["input_shape"], raw["dtype"], raw.get("value_range"))
    inputs = generate_inputs(plans, case_seed(task.case_key(case_id)))
    if gm.get_input is not None:
        inputs = call_get_input(gm.get_input, task.spec.input_names, inputs, attrs)
    t1 = time.perf_counter()
    truth = gm.oracle or gm.main
    wide = upcast(inputs)
    golden = flatten_outputs(truth(**bind(truth, wide, attrs).kwargs(wide)))
    del wide
    t2 = time.perf_counter()
    cand = flatten_outputs(gm.main(**bind(gm.main, inputs, attrs).kwargs(inputs)))
    t3 = time.perf_counter()
    for a, g in zip(cand, golden):
        if isinstance(a, torch.Tensor) and isinstance(g, torch.Tensor) and a.shape == g.shape:
            if a.is_floating_point() or g.is_floating_point():
                mere_mare(a, g)
            else:
                bool(torch.equal(a, g))
    t4 = time.perf_counter()
    for name, seconds in (("inputs_s", t1 - t0), ("golden_s", t2 - t1), ("candidate_s", t3 - t2),
                          ("compare_s", t4 - t3)):
        clocks[name] = clocks.get(name, 0.0) + seconds
    if sets:
        clocks["timed_sets_s"] = clocks.get("timed_sets_s", 0.0) + sets * ((t1 - t0) + (t2 - t1) + (t4 - t3))
        clocks["timed_sets"] = clocks.get("timed_sets", 0) + sets


def main() -> int:
    t0 = time.perf_counter()
    import torch

    torch.set_num_threads(1)
    clocks: dict[str, float] = {"import_s": time.perf_counter() - t0}
    done, errors = 0, 0
    for op_dir, case_id, *rest in json.loads(Path(sys.argv[1]).read_text()):
        try:
            one_case(Path(op_dir), int(case_id), clocks, int(rest[0]) if rest else 0)
            done += 1
        except Exception as exc:  # noqa: BLE001 - a golden that cannot run here is counted, not fatal
            errors += 1
            print(f"{op_dir} {case_id}: {type(exc).__name__}: {exc}", file=sys.stderr)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)
    print(json.dumps({**clocks, "cases": done, "errors": errors, "peak_gib": peak,
                      "cpu_s": time.process_time()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

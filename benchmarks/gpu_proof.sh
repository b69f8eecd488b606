#!/usr/bin/env bash
# The GPU proof (issue 21): every CUDA path of the plugin run on a real CUDA GPU, in one go, results in one folder.
#
# Usage, from the repository root on a machine with a CUDA GPU and a CUDA build of torch:
#   bash benchmarks/gpu_proof.sh OUT_DIR [STEP ...]
# Steps (default: all but sandbox): env install tests kernelbench main triton fidelity graph sandbox; kernelbench and
# triton run in the background beside tests (their verdicts matter there, not their figures), the rest one by one.
# sandbox grades the first case of each operator of the CUDA example under --cann-sandbox=bwrap (bubblewrap must be
# installed: the device machines of this project have none, so it is asked for by name after putting one there).
# Each step runs under its own time limit (SIGINT first, so a pytest session still writes its reports), logs to
# <work>/<step>.log (<work>: $GPU_PROOF_WORK, else OUT_DIR/work), and never stops the next one; OUT_DIR/summary.txt
# has one line per step and the figures worth quoting; OUT_DIR/proof.tgz packs the whole work folder (reports,
# JUnit XML, logs).
#
# Nothing is downloaded: the machine must already have torch (CUDA), pytest, pytest-xdist, pyyaml, numpy and
# jinja2 (the optional pytest-html and pytest-timeout are used when present), nvcc and ninja for the CUDA example
# and the KernelBench sample, and Triton for the Triton example (skipped without it). The project is installed
# with pip, offline: from a wheel in .gpu/ when one is there (built beforehand with
# `python -m pip wheel --no-deps -w .gpu .`), else editable from this checkout.
# STEP_LIMIT: seconds no step may exceed (a lease shorter than the limits below).
# FIDELITY_RUNS: runs per size of the timer fidelity benchmark (default 10).
# TESTS_K / MAIN_K: a pytest -k expression narrowing the tests step / the main job (a rerun of what failed, or
# of what a cut-short run left; merge the main job's parts with `cannbench merge`).
# KB_PROBLEMS / KB_SOURCES: another KernelBench problems tree and generation runs (space-separated folders) to
# grade instead of the bundled sample (benchmarks/gpu/kernelbench).
# Budget: the limits (install 120 s; tests 200 s, with kernelbench 200 s and triton 120 s beside it; main 420 s;
# fidelity 150 s; graph 30 s) bound a run at 15 minutes. Measured on an H200 (docs/timing.md): tests with
# kernelbench and triton beside them 105-125 s, the main job about 400 s (timing windows do not overlap on one
# card), fidelity about 40 s per size at FIDELITY_RUNS=5. Within a 15-minute lease: one run of `env install tests
# kernelbench triton fidelity` and one of `main` (MAIN_K splits it further; STEP_LIMIT caps every step).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
OUT=${1:?usage: bash benchmarks/gpu_proof.sh OUT_DIR [STEP ...]}
shift
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
W=${GPU_PROOF_WORK:-$OUT/work}  # elsewhere when OUT_DIR must hold only the two results
mkdir -p "$W" && W=$(cd "$W" && pwd)
PY=${PYTHON:-python3}
STEPS=${*:-env install tests kernelbench main triton fidelity graph}
KB_PROBLEMS=${KB_PROBLEMS:-benchmarks/gpu/kernelbench/problems}
KB_SOURCES=${KB_SOURCES:-benchmarks/gpu/kernelbench/generations/honest_cuda benchmarks/gpu/kernelbench/generations/cheat_torch_softmax}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# build for this card only (the example's build.sh and the KernelBench sample's load_inline both honour it)
if [ -z "${TORCH_CUDA_ARCH_LIST:-}" ]; then
  TORCH_CUDA_ARCH_LIST=$($PY -c "import torch; print('%d.%d' % torch.cuda.get_device_capability())" 2>/dev/null) \
    && export TORCH_CUDA_ARCH_LIST
fi
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }

# the work folder as OUT_DIR/proof.tgz (written aside, then renamed: a step in the background may pack at once)
pack() {
  local tmp="$OUT/.proof.$$.$RANDOM.tgz"
  tar czf "$tmp" -C "$(dirname "$W")" --exclude='*.so' --exclude='*.whl' --exclude='*.o' --exclude='build' \
      "$(basename "$W")" 2>/dev/null && mv -f "$tmp" "$OUT/proof.tgz"
}

# step NAME LIMIT_S CMD...: run CMD with a time limit (SIGINT, then SIGKILL 20 s later), log to $W/NAME.log
step() {
  local name=$1 limit=$2 t0 rc
  shift 2
  if [ -n "${STEP_LIMIT:-}" ] && [ "$STEP_LIMIT" -lt "$limit" ]; then limit=$STEP_LIMIT; fi
  t0=$(date +%s)
  timeout -s INT -k 20 "$limit" "$@" > "$W/$name.log" 2>&1
  rc=$?
  note "step $name: rc=$rc in $(( $(date +%s) - t0 )) s (limit ${limit} s)"
  pack  # after every step: a proof cut short still brings back what it did
  return $rc
}

wants() { [[ " $STEPS " == *" $1 "* ]]; }

# the pytest summary line and the cannbench section of a log
digest() {
  grep -E "^(=+ .*(passed|failed|error|skipped).* =+|[0-9]+ operators?, [0-9]+ cases)" "$1" | tail -3 | sed 's/^/  /' >> "$SUMMARY"
  awk '/^=+ cannbench =+$/{on=1; next} on && /^=+ .* =+$/{on=0} on' "$1" | head -40 | sed 's/^/  /' >> "$SUMMARY"
}

trap pack EXIT  # an interrupted proof still leaves its logs

if wants env; then
  {
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv
    nvidia-smi -q | sed -n '1,40p'
    nvcc --version | tail -2
    $PY - <<'EOF'
import platform, sys
import torch
print("python", sys.version.split()[0], platform.machine())
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, "cc", f"{p.major}.{p.minor}", "SMs", p.multi_processor_count,
          "memory GiB", round(p.total_memory / 2**30, 1), "L2 MiB", getattr(p, "L2_cache_size", 0) >> 20)
for name in ("triton", "pytest", "xdist", "pytest_timeout", "pytest_html", "yaml", "numpy", "jinja2", "ninja",
             "pynvml"):
    try:
        mod = __import__(name)
        print(name, getattr(mod, "__version__", "present"))
    except Exception as exc:  # noqa: BLE001 - a report, not a check
        print(name, "missing:", type(exc).__name__)
EOF
    nproc; free -g | head -2; command -v bwrap perf || true
  } > "$W/env.log" 2>&1
  grep -E "^(torch|device|triton|python) " "$W/env.log" | sed 's/^/  /' >> "$SUMMARY"
  head -3 "$W/env.log" | tail -2 | sed 's/^/  /' >> "$SUMMARY"
fi

if wants install; then
  wheel=$(ls .gpu/pytest_cannbench-*.whl 2>/dev/null | head -1)
  if [ -n "$wheel" ]; then
    step install 120 $PY -m pip install --no-deps --no-index --force-reinstall "$wheel"
  else
    step install 120 $PY -m pip install --no-deps --no-index --no-build-isolation -e .
  fi
  $PY -c "import pytest_cannbench, sys; print('installed', pytest_cannbench.__version__, pytest_cannbench.__file__)" \
    >> "$SUMMARY" 2>&1
fi

kb_pid=""
if wants kernelbench; then
  # in the background, beside the tests: its time is mostly nvcc on the host's cores
  kb_args=()
  for source in $KB_SOURCES; do kb_args+=("--cann-source=$source"); done
  step kernelbench 200 $PY -m pytest "$KB_PROBLEMS" -p no:cacheprovider --cann-bench=stanford --cann-device=cuda \
      "${kb_args[@]}" -n 4 --cann-seed=0 --cann-kb-trials=2 --cann-warmup=1 --cann-repeat=5 \
      --cann-report-dir="$W/kernelbench" --junitxml="$W/kernelbench.xml" &
  kb_pid=$!
fi

triton_pid=""
if wants triton; then
  # in the background too: the Triton example's verdicts, not its figures, are what this step shows
  if $PY -c "import triton" 2>/dev/null; then
    step triton 120 $PY -m pytest -p no:cacheprovider --cann-tasks=tasks --cann-source=examples/triton \
        --cann-device=cuda -n 4 --cann-seed=0 --cann-report-dir="$W/triton" --junitxml="$W/triton.xml" \
        -k "softplus or gelu or silu or leaky_relu or rms_scale or log_softmax" &
    triton_pid=$!
  else
    note "step triton: skipped, Triton is not importable here"
  fi
fi

if wants tests; then
  # every CUDA test of the suite (marker `cuda`); none may skip here
  step tests 200 $PY -m pytest tests -m cuda -n 6 -p no:cacheprovider -rA --junitxml="$W/cuda-tests.xml" \
      ${TESTS_K:+-k "$TESTS_K"}
  digest "$W/tests.log"
  grep -E "^(SKIPPED|FAILED|ERROR)" "$W/tests.log" | head -20 | sed 's/^/  /' >> "$SUMMARY"
fi

if [ -n "$kb_pid" ]; then
  wait "$kb_pid"
  digest "$W/kernelbench.log"
fi
if [ -n "$triton_pid" ]; then
  wait "$triton_pid"
  digest "$W/triton.log"
fi

if wants main; then
  # the README main job on the GPU, against the CUDA C++ example (built here by its build.sh through the plugin)
  step main 420 $PY -m pytest -p no:cacheprovider --cann-tasks=tasks --cann-source=examples/cuda \
      --cann-device=cuda -n 8 --cann-seed=0 --cann-report-dir="$W/main" --junitxml="$W/main.xml" ${MAIN_K:+-k "$MAIN_K"}
  digest "$W/main.log"
fi

if wants fidelity; then
  # the timer against a kernel of known cost: error, CV, ranking power at 20 us, 200 us and 2 ms
  step fidelity 150 $PY benchmarks/timer_fidelity.py --device cuda --sizes 20,200,2000 --runs "${FIDELITY_RUNS:-10}" \
      --repeat 10
  sed 's/^/  /' "$W/fidelity.log" | tail -24 >> "$SUMMARY"  # 3 sizes: 5 lines each, the header
fi

if wants sandbox; then
  if command -v bwrap >/dev/null; then
    step sandbox 60 $PY -m pytest -p no:cacheprovider --cann-tasks=tasks --cann-source=examples/cuda \
        --cann-device=cuda --cann-sandbox=bwrap -n 4 --cann-seed=0 --cann-repeat=3 -k 01 \
        --cann-report-dir="$W/sandbox" --junitxml="$W/sandbox.xml"
    digest "$W/sandbox.log"
    grep -m3 -i "sandbox" "$W/sandbox.log" | sed 's/^/  /' >> "$SUMMARY"
  else
    note "step sandbox: skipped, bubblewrap (bwrap) is not installed"
  fi
fi

if wants graph; then
  step graph 30 $PY benchmarks/cuda_graph_fidelity.py --runs 3
  tail -12 "$W/graph.log" | sed 's/^/  /' >> "$SUMMARY"
fi

trap - EXIT
pack && note "packed: $OUT/proof.tgz ($(du -h "$OUT/proof.tgz" | cut -f1))"
echo "----- summary -----"
cat "$SUMMARY"

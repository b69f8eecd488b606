#!/usr/bin/env bash
# Builds exactly one wheel, dist/cann_bench-*.whl, offline, with the python (and CUDA torch) on PATH and the
# CUDA toolkit's nvcc where torch finds it (CUDA_HOME, or nvcc on PATH).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
rm -rf build dist cann_bench.egg-info cann_bench/_C*.so
# -q keeps a good build quiet; when the compiler fails, pip prints the build's full output.
python -m pip wheel . --no-deps --no-build-isolation --no-index -q -w dist
ls dist/cann_bench-*.whl

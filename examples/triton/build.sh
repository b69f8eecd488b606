#!/usr/bin/env bash
# Builds exactly one wheel, dist/cann_bench-*.whl, offline, with the python on PATH. The wheel is pure Python:
# the Triton kernels are compiled by Triton itself, for the GPU at hand, the first time each one is launched.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
rm -rf build dist cann_bench.egg-info
python -m pip wheel . --no-deps --no-build-isolation --no-index -q -w dist
ls dist/cann_bench-*.whl

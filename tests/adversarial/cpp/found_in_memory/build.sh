#!/usr/bin/env bash
# One wheel, dist/cann_bench-*.whl, offline (the same recipe as examples/cpp_cpu).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
rm -rf build dist cann_bench.egg-info cann_bench/_C*.so
python -m pip wheel . --no-deps --no-build-isolation --no-index -q -w dist

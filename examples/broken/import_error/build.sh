#!/usr/bin/env bash
# importing cann_bench fails
set -euo pipefail
python -m pip wheel . --no-deps --no-build-isolation --disable-pip-version-check -q -w dist

#!/usr/bin/env bash
# provides softplus only; rms_scale is missing
set -euo pipefail
python -m pip wheel . --no-deps --no-build-isolation --disable-pip-version-check -q -w dist

#!/usr/bin/env bash
# softplus always returns float32
set -euo pipefail
python -m pip wheel . --no-deps --no-build-isolation --disable-pip-version-check -q -w dist

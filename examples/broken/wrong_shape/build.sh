#!/usr/bin/env bash
# softplus returns a flattened tensor
set -euo pipefail
python -m pip wheel . --no-deps --no-build-isolation --disable-pip-version-check -q -w dist

#!/usr/bin/env bash
# softplus raises when beta == 2
set -euo pipefail
python -m pip wheel . --no-deps --no-build-isolation --disable-pip-version-check -q -w dist

#!/usr/bin/env bash
# The test suite as CI runs it: everything on two xdist workers except the tests marked `alone`, which measure how
# the kernel samples and schedules a child's threads (random sampling periods, regular fixed ones, threads followed
# as they are born) and need the CPUs to themselves: beside another worker's test they fail now and then for the
# machine's load, not the code's. They run after, one at a time. Extra arguments go to both runs.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest tests -n 2 --dist worksteal -p no:cacheprovider --durations=25 -m "not alone" "$@"
.venv/bin/python -m pytest tests -p no:cacheprovider -m alone "$@"

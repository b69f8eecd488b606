#!/usr/bin/env bash
# The test suite as CI runs it: everything on two xdist workers except the tests marked `alone`, which measure how
# the kernel samples and schedules a child's threads (random sampling periods, regular fixed ones, threads followed
# as they are born) and need the CPUs to themselves: beside another worker's test they fail now and then for the
# machine's load, not the code's. They run after, one at a time. Extra arguments go to both runs; a run they
# select nothing in (pytest's exit code 5) is not a failure unless both select nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest tests -n 2 --dist worksteal -p no:cacheprovider --durations=25 -m "not alone" "$@"
parallel=$?
.venv/bin/python -m pytest tests -p no:cacheprovider -m alone "$@"
alone=$?
if [ "$parallel" -eq 5 ] && [ "$alone" -eq 5 ]; then exit 5; fi
for rc in "$parallel" "$alone"; do
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
done
exit 0

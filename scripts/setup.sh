#!/usr/bin/env bash
# Create .venv with pytest-cannbench installed (editable) and its stack.
#
# torch is installed only when the venv has none, from two variables (README, "The two commands"):
#   TORCH_SPEC       what to install (default torch==2.13.0+cpu: the CPU build, a few hundred MB)
#   TORCH_INDEX_URL  where from (default: pip's own configuration, then the CPU index
#                    https://download.pytorch.org/whl/cpu); e.g. TORCH_SPEC=torch
#                    TORCH_INDEX_URL=https://download.pytorch.org/whl/cu124 for a CUDA build.
# An unpinned `pip install torch` on Linux pulls a multi-GB CUDA build, so that is never the default.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0+cpu}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-}
CPU_INDEX=https://download.pytorch.org/whl/cpu
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check)
# bubblewrap, the OS sandbox around submission code (--cann-sandbox auto uses it where it works): installed when
# we are root with apt; elsewhere install it yourself, or runs say SANDBOX OFF in their header and board.
if ! command -v bwrap >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap) \
      >/dev/null 2>&1 || echo "setup.sh: could not install bubblewrap; grading runs without the OS sandbox" >&2
  else
    echo "setup.sh: bubblewrap (bwrap) is not installed; grading runs without the OS sandbox (docs/security.md)" >&2
  fi
fi
"${PIP[@]}" install -q --upgrade pip >/dev/null 2>&1 || true
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  if [ -n "$TORCH_INDEX_URL" ]; then
    "${PIP[@]}" install -q --index-url "$TORCH_INDEX_URL" "$TORCH_SPEC"
  elif ! "${PIP[@]}" install -q "$TORCH_SPEC" 2>/dev/null; then
    echo "setup.sh: $TORCH_SPEC is not on pip's configured indexes; trying $CPU_INDEX" \
         "(set TORCH_SPEC / TORCH_INDEX_URL to choose another build)" >&2
    "${PIP[@]}" install -q --index-url "$CPU_INDEX" "$TORCH_SPEC"
  fi
fi
"${PIP[@]}" install -q -e ".[test,jit,cluster,serve]"  # jit: ninja (load_inline); cluster, serve: Ray and the service
.venv/bin/python -c "import torch, pytest_cannbench; print('torch', torch.__version__, '| pytest-cannbench', pytest_cannbench.__version__)"

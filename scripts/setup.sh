#!/usr/bin/env bash
# Create .venv with pytest-cannbench installed (editable) and its stack.
# torch is pinned to 2.13.0 only when torch is missing: that CPU build is on the
# machines' disk, while an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -e ".[test,jit]"  # jit: ninja, for submissions using load_inline
.venv/bin/python -c "import torch, pytest_cannbench; print('torch', torch.__version__, '| pytest-cannbench', pytest_cannbench.__version__)"

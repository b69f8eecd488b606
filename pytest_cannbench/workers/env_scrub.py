"""What a submission's process may see of the judge's environment: system basics and device runtimes.

Everything else (``PYTEST_CURRENT_TEST``, ``PYTEST_XDIST_*``, CI secrets, our own settings) would tell it which
phase or test it is in, or leak what it should not know.
"""

from __future__ import annotations

from collections.abc import Mapping

ENV_KEEP = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "PWD",
                      "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV", "CONDA_PREFIX",
                      "CPATH", "LIBRARY_PATH", "CC", "CXX"})
ENV_KEEP_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "ASCEND_", "NPU_", "TORCH_", "MKL_", "OMP_", "KMP_", "CANN_")


def scrubbed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` a submission may see."""
    return {k: v for k, v in environ.items() if k in ENV_KEEP or k.startswith(ENV_KEEP_PREFIXES)}

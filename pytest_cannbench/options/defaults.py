"""Defaults and the words options accept, shared by the declarations, their parsers and other rooms."""

from __future__ import annotations

from pytest_cannbench.vocab.registry import (
    DEVICE_CHOICES,
    DISPATCH_MODES,
    INPUT_COMPAT_MODES,
    INPUT_DISTS,
    POOL_MODES,
    SANDBOX_MODES,
    checker_names,
)

__all__ = ["DEFAULT_MAX_GIB", "DEFAULT_MIN_FREE_GIB", "DISPATCH_MODES", "INPUT_COMPAT_MODES", "INPUT_DISTS",
           "POOL_MODES", "SANDBOX_MODES"]

DEVICES = DEVICE_CHOICES  # vocab.registry: auto, then every device kind
ISOLATION_MODES = ("fence", "off")  # timing/isolation.py
CUDA_GRAPH_MODES = ("off", "auto", "on")  # timing/cuda_graph.py; the first is the default
GOLDEN_PRECISIONS = ("fp64_cpu", "native_cpu")
CHECKERS = checker_names()  # the checkers of CANN tasks (vocab.registry.CHECKERS, the default first)
KB_ACCURACY = ("kernelbench", "cann")  # KernelBench problems: their own allclose, or the CANN standard
# --cann-checker: a CANN checker, or kernelbench (KernelBench problems by their own rule; CANN tasks keep the default)
CHECKER_WORDS = (*CHECKERS, "kernelbench")
BENCHES = ("auto", "cann", "stanford")
PROFILER_LEVELS = ("Level1", "Level0", "Level2")
GUARD_MODES = ("block", "warn", "off")
# the KernelBench format's guard policy (guard.policy.mode_for, coverage_floor); the first is the default
KB_GUARDS = ("coverage", "kernelbench", "cann")
# --cann-guard: a guard mode, or block with another rule for KernelBench problems (see GUARD_WORDS' parser)
GUARD_WORDS = ("block", "kernelbench", "strict", "warn", "off")
SOURCE_GOLDEN, SOURCE_INSTALLED = "@golden", "@installed"  # --cann-source: the goldens, or the installed package

DEFAULT_KB_TRIALS = 5
DEFAULT_GOLDEN_TIMEOUT_S = 600.0
DEFAULT_BUILD_TIMEOUT_S = 600.0
DEFAULT_CASE_TIMEOUT_S = 300.0
DEFAULT_REPORT_DIR = "reports"
DEFAULT_WARMUP = 3
DEFAULT_REPEAT = 10  # docs/timing.md: the median of 10 is within the 3% CV target from 200 us up
DEFAULT_REPEAT_MAX = 100
DEFAULT_TIMING_TARGET_PCT = 2.0
DEFAULT_HAP_TARGET = 0.02  # docs/timing.md, "Why a HAP target too": +-1 of a case's 50 performance points
DEFAULT_TIMING_BUDGET_S = 10.0
DEFAULT_GOLDEN_CACHE = ".cannbench-cache/golden"
DEFAULT_MIN_FREE_GIB = 4.0  # never fill the disk with golden cache entries (judge.golden_cache)
DEFAULT_MAX_GIB = 32.0  # what the golden cache may hold between sessions
MIN_GOLDEN_MEMORY_GIB = 1.0  # it limits address space, and torch alone reserves about 0.6 GiB of it
SECRET_WORKERINPUT_KEY = "cannbench_secret"

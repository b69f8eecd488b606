"""Cheating submissions, one per attack the grader defends against today (catalogue: shared reward_hacking.md).

Each is the source of a ``cann_bench/__init__.py`` implementing ``softplus`` for the fixture tree
``tests/fixtures/submission`` (4 cases; ``rms_scale`` is deliberately not provided). ``expect`` lists the
failure types the softplus cases may end with; the operator must score 0.
"""

from __future__ import annotations

from dataclasses import dataclass

REAL = "torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold).to(x.dtype)"


@dataclass(frozen=True)
class Attack:
    name: str
    family: str  # the catalogue's family letter
    what: str
    code: str
    expect: frozenset[str]  # failure types the softplus cases may end with


def attack(name: str, family: str, what: str, body: str, *expect: str) -> Attack:
    code = "import torch\n\n\ndef softplus(x, beta=1.0, threshold=20.0):\n" + body
    return Attack(name, family, what, code, frozenset(expect))


ATTACKS = [
    attack("zeros", "D", "returns zeros of the right shape", "    return torch.zeros_like(x)\n",
           "precision_mismatch"),
    attack("lower_precision", "D", "computes on inputs quantised to a quarter, hoping the tolerance absorbs it",
           "    q = torch.round(x.float() * 4) / 4\n"
           "    return torch.nn.functional.softplus(q, beta=beta, threshold=threshold).to(x.dtype)\n",
           "precision_mismatch"),
    attack("wrong_dtype", "D", "returns float64 whatever the input dtype (extra precision for free)",
           f"    return {REAL}.double()\n", "compile_runtime_error"),
    attack("nan_everywhere", "D", "returns NaN hoping NaN compares equal",
           "    return torch.full_like(x, float('nan'))\n", "precision_mismatch"),
    attack("return_input", "C", "returns the input itself (aliasing)", "    return x\n", "compile_runtime_error"),
    attack("view_of_input", "C", "returns a view of the input after writing the result into it",
           f"    x.copy_({REAL})\n    return x.view(x.shape)\n", "compile_runtime_error", "input_mutated"),
    attack("instance_attribute", "C", "a tensor carrying an overridden method as an instance attribute",
           f"    y = {REAL}\n    y.allclose = lambda *a, **k: True\n    return y\n", "compile_runtime_error"),
    attack("tensor_subclass", "C", "a lazy torch.Tensor subclass that computes on access",
           "    class Lazy(torch.Tensor):\n        pass\n"
           f"    return {REAL}.as_subclass(Lazy)\n", "compile_runtime_error"),
    attack("not_a_tensor", "C", "a numpy array instead of a tensor",
           f"    return {REAL}.numpy()\n", "compile_runtime_error"),
    attack("input_mutation", "E", "writes into its input (to poison the judge's copy)",
           f"    y = {REAL}\n    x.zero_()\n    return y\n", "input_mutated"),
    attack("replay_first_output", "B", "computes once per shape, then replays the cached tensor",
           "    key = (tuple(x.shape), x.dtype, beta, threshold)\n"
           f"    if key not in CACHE:\n        CACHE[key] = {REAL}\n    return CACHE[key]\n",
           "timed_output_wrong", "precision_mismatch"),
    attack("honest_first_call_only", "F", "phase detection by call count: honest once, zeros afterwards",
           f"    CALLS.append(1)\n    return {REAL} if len(CALLS) == 1 else torch.zeros_like(x)\n",
           "timed_output_wrong", "precision_mismatch"),
    attack("background_thread", "F", "returns an empty buffer filled by a thread after return",
           "    import threading, time\n    out = torch.empty_like(x)\n"
           f"    def later():\n        time.sleep(0.05)\n        out.copy_({REAL})\n"
           "    threading.Thread(target=later, daemon=True).start()\n    return out\n",
           "async_escape", "precision_mismatch"),
    attack("forked_daemon", "G", "forks a helper that outlives the call",
           "    import os, time\n    if os.fork() == 0:\n        time.sleep(30)\n        os._exit(0)\n"
           f"    return {REAL}\n", "async_escape"),
    attack("exit_zero", "G", "os._exit(0) in the middle of a call", "    import os\n    os._exit(0)\n",
           "candidate_crashed"),
    attack("sys_exit", "G", "sys.exit(0), hoping for a clean exit", "    import sys\n    sys.exit(0)\n",
           "compile_runtime_error"),
    attack("pytest_skip", "G", "pytest.skip() from inside the operator",
           "    import pytest\n    pytest.skip('nothing to see')\n", "compile_runtime_error"),
    attack("pytest_exit", "G", "pytest.exit() from inside the operator",
           "    import pytest\n    pytest.exit('done', returncode=0)\n", "compile_runtime_error"),
    attack("patch_checker", "E", "patches the plugin's precision checker in its own process, returns zeros",
           "    import pytest_cannbench.precision as p\n"
           "    p.compare_outputs = lambda *a, **k: []\n    return torch.zeros_like(x)\n", "precision_mismatch"),
    attack("frame_walk", "E", "walks the stack looking for an expected output, falls back to zeros",
           "    import sys\n    frame = sys._getframe()\n    while frame is not None:\n"
           "        for name in ('golden', 'expected', 'reference'):\n"
           "            if name in frame.f_locals:\n                return frame.f_locals[name]\n"
           "        frame = frame.f_back\n    return torch.zeros_like(x)\n", "precision_mismatch"),
    attack("slow_clock", "F", "slows the worker's clock down to report a faster kernel",
           f"    import sys\n    w = sys.modules['__main__']\n    if not hasattr(w, '_real'):\n"
           f"        w._real = w._clock\n        w._clock = lambda: w._real() / 10\n    return {REAL}\n",
           "timing_implausible"),
    attack("segfault", "G", "crashes the process", "    import ctypes\n    ctypes.string_at(0)\n",
           "candidate_crashed"),
]

HONEST = "import torch\n\n\ndef softplus(x, beta=1.0, threshold=20.0):\n    return " + REAL + ".contiguous()\n"
CACHE_PRELUDE = "CACHE = {}\nCALLS = []\n"

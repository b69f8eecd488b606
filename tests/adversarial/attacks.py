"""Cheating submissions, one per attack the grader defends against (catalogue: shared reward_hacking.md, A-I).

Each is the source of a ``cann_bench/__init__.py`` implementing ``softplus`` for the fixture tree
``tests/fixtures/submission`` (4 cases; ``rms_scale`` is deliberately not provided). ``expect`` lists the
failure types the softplus cases may end with; the operator must score 0.

``guard`` is the ``--cann-guard`` mode the attack is graded under. Attacks on the delegation guard itself run
with ``block``; every other attack runs with the guard ``off``, so the defence it targets is shown to hold on
its own (these Python submissions compute with torch, which the guard alone would already refuse).
``@TASKS@`` and ``@REPORTS@`` in the code are replaced by the session's task tree and report directory: the
attacker is assumed to know where they are.
"""

from __future__ import annotations

from dataclasses import dataclass

REAL = "torch.nn.functional.softplus(x.float(), beta=beta, threshold=threshold).to(x.dtype)"


READ_AHEAD = """import ctypes

SEEN = set()
STATE = {}


def _fingerprint(t):
    n = t.numel() * t.element_size()
    return bytes((ctypes.c_char * min(n, 64)).from_address(t.data_ptr())) if n else b""


def _read_ahead(x, beta, threshold, slot):
    start, nbytes = slot
    with open('/proc/self/maps') as fh:
        spans = [[int(v, 16) for v in line.split()[0].split('-')] for line in fh if 'cannbench-region' in line]
    end = next((hi for lo, hi in spans if lo <= start < hi), None)
    step = (nbytes + 63) // 64 * 64
    ptr = start + step
    while end is not None and nbytes and ptr + nbytes <= end:  # every later slot, as the judge lays them out
        raw = bytearray((ctypes.c_char * nbytes).from_address(ptr))
        t = torch.frombuffer(raw, dtype=x.dtype).view(x.shape)
        CACHE[bytes(raw[:64])] = torch.nn.functional.softplus(t.float(), beta=beta,
                                                               threshold=threshold).to(x.dtype)
        ptr += step
    return (start, end) if end is not None else None
"""


@dataclass(frozen=True)
class Attack:
    name: str
    family: str  # the catalogue's entry (docs/security.md, "Attacks, defences and tests"), e.g. A1
    what: str
    code: str
    expect: frozenset[str]  # failure types the softplus cases may end with
    guard: str = "off"
    per_operator: bool = False  # caught on some cases, and the operator scores 0 for it (outcome.TAINTING_FAILURES)


def attack(name: str, family: str, what: str, body: str, *expect: str, guard: str = "off",
           prelude: str = "", per_operator: bool = False) -> Attack:
    code = "import torch\n" + prelude + "\n\ndef softplus(x, beta=1.0, threshold=20.0):\n" + body
    return Attack(name, family, what, code, frozenset(expect), guard, per_operator)


ATTACKS = [
    attack("zeros", "D3", "returns zeros of the right shape", "    return torch.zeros_like(x)\n",
           "precision_mismatch"),
    attack("lower_precision", "D1", "computes on inputs quantised to a quarter, hoping the tolerance absorbs it",
           "    q = torch.round(x.float() * 4) / 4\n"
           "    return torch.nn.functional.softplus(q, beta=beta, threshold=threshold).to(x.dtype)\n",
           "precision_mismatch"),
    attack("wrong_dtype", "D2", "returns float64 whatever the input dtype (extra precision for free)",
           f"    return {REAL}.double()\n", "compile_runtime_error"),
    attack("nan_everywhere", "D5", "returns NaN hoping NaN compares equal",
           "    return torch.full_like(x, float('nan'))\n", "precision_mismatch"),
    attack("return_input", "B5", "returns the input itself (aliasing)", "    return x\n", "compile_runtime_error"),
    attack("view_of_input", "B5", "returns a view of the input after writing the result into it",
           f"    x.copy_({REAL})\n    return x.view(x.shape)\n", "compile_runtime_error", "input_mutated"),
    attack("instance_attribute", "C2", "a tensor carrying an overridden method as an instance attribute",
           f"    y = {REAL}\n    y.allclose = lambda *a, **k: True\n    return y\n", "compile_runtime_error"),
    attack("tensor_subclass", "C1", "a lazy torch.Tensor subclass that computes on access",
           "    class Lazy(torch.Tensor):\n        pass\n"
           f"    return {REAL}.as_subclass(Lazy)\n", "compile_runtime_error"),
    attack("not_a_tensor", "C4", "a numpy array instead of a tensor",
           f"    return {REAL}.numpy()\n", "compile_runtime_error"),
    attack("input_mutation", "E1", "writes into its input (to poison the judge's copy)",
           f"    y = {REAL}\n    x.zero_()\n    return y\n", "input_mutated"),
    attack("replay_first_output", "B1", "computes once per shape, then replays the cached tensor",
           "    key = (tuple(x.shape), x.dtype, beta, threshold)\n"
           f"    if key not in CACHE:\n        CACHE[key] = {REAL}\n    return CACHE[key]\n",
           "timed_output_wrong", "precision_mismatch", "compile_runtime_error"),
    attack("honest_first_call_only", "F4", "phase detection by call count: honest once, zeros afterwards",
           f"    CALLS.append(1)\n    return {REAL} if len(CALLS) == 1 else torch.zeros_like(x)\n",
           "timed_output_wrong", "precision_mismatch"),
    attack("background_thread", "F2", "returns an empty buffer filled by a thread after return",
           "    import threading, time\n    out = torch.empty_like(x)\n"
           f"    def later():\n        time.sleep(0.05)\n        out.copy_({REAL})\n"
           "    threading.Thread(target=later, daemon=True).start()\n    return out\n",
           "async_escape", "precision_mismatch"),
    attack("forked_daemon", "G1", "forks a helper that outlives the call",
           "    import os, time\n    if os.fork() == 0:\n        time.sleep(30)\n        os._exit(0)\n"
           f"    return {REAL}\n", "async_escape", "forbidden_access"),
    attack("exit_zero", "G2", "os._exit(0) in the middle of a call", "    import os\n    os._exit(0)\n",
           "candidate_crashed"),
    attack("sys_exit", "G2", "sys.exit(0), hoping for a clean exit", "    import sys\n    sys.exit(0)\n",
           "compile_runtime_error"),
    attack("pytest_skip", "G3", "pytest.skip() from inside the operator",
           "    import pytest\n    pytest.skip('nothing to see')\n", "compile_runtime_error"),
    attack("pytest_exit", "G3", "pytest.exit() from inside the operator",
           "    import pytest\n    pytest.exit('done', returncode=0)\n", "compile_runtime_error"),
    attack("patch_checker", "C3", "patches the plugin's precision checker in its own process, returns zeros",
           "    import pytest_cannbench.judge.precision as p\n"
           "    p.compare_outputs = lambda *a, **k: []\n    return torch.zeros_like(x)\n", "precision_mismatch"),
    attack("frame_walk", "E2", "walks the stack looking for an expected output, falls back to zeros",
           "    import sys\n    frame = sys._getframe()\n    while frame is not None:\n"
           "        for name in ('golden', 'expected', 'reference'):\n"
           "            if name in frame.f_locals:\n                return frame.f_locals[name]\n"
           "        frame = frame.f_back\n    return torch.zeros_like(x)\n", "precision_mismatch"),
    attack("slow_clock", "F1", "slows the worker's clock down to report a faster kernel",
           f"    import sys\n    w = sys.modules['__main__']\n    if not hasattr(w, '_real'):\n"
           f"        w._real = w._clock\n        w._clock = lambda: w._real() / 10\n    return {REAL}\n",
           "timing_implausible", "api_tampered"),
    attack("slow_clock_blind_guard", "F1", "empties the guard's captured identities, then slows the worker's clock",
           "    import gc, sys\n    w = sys.modules['__main__']\n    if not hasattr(w, '_real'):\n"
           "        for obj in gc.get_objects():\n"
           "            if type(obj).__name__ == 'Guard' and hasattr(obj, '_identities'):\n"
           "                obj._identities = []\n"
           f"        w._real = w._clock\n        w._clock = lambda: w._real() / 10\n    return {REAL}\n",
           "timing_implausible", per_operator=True),  # a tiny case's lie can hide in the CPU slack
    attack("segfault", "G2", "crashes the process", "    import ctypes\n    ctypes.string_at(0)\n",
           "candidate_crashed"),
    attack("pytest_xfail", "G3", "pytest.xfail() from inside the operator",
           "    import pytest\n    pytest.xfail('expected')\n", "compile_runtime_error"),
    attack("reuse_output_buffer", "B5", "keeps one output buffer and returns it again on every call",
           f"    out = CACHE.get('out')\n    if out is None or out.shape != x.shape or out.dtype != x.dtype:\n"
           f"        out = CACHE['out'] = torch.empty_like(x)\n    out.copy_({REAL})\n    return out\n",
           "compile_runtime_error"),
    attack("lower_precision_dtype", "D1", "keeps only a float8 (e4m3) result, cast back to the input's dtype",
           f"    return {REAL}.to(torch.float8_e4m3fn).to(x.dtype)\n", "precision_mismatch"),
    attack("patch_torch_compare", "C3", "patches torch.allclose/equal in its own process, returns zeros",
           "    torch.allclose = lambda *a, **k: True\n    torch.equal = lambda *a, **k: True\n"
           "    return torch.zeros_like(x)\n", "precision_mismatch"),
    attack("harness_globals", "E3", "searches the worker's objects for a tensor matching its output, else zeros",
           "    import gc\n    for obj in gc.get_objects():\n"
           "        if type(obj) is dict and 'golden' in obj and isinstance(obj['golden'], torch.Tensor):\n"
           "            return obj['golden']\n    return torch.zeros_like(x)\n", "precision_mismatch"),
    attack("patch_perf_counter", "F1", "replaces time.perf_counter to shrink every measured interval",
           "    import time\n    if not hasattr(time, '_real'):\n        time._real = time.perf_counter\n"
           f"        time.perf_counter = lambda: time._real() / 10\n    return {REAL}\n",
           "api_tampered", guard="block"),
    # delegation (family A): the guard's own attacks, graded in block mode
    attack("delegate_functional", "A1", "calls torch.nn.functional.softplus", f"    return {REAL}\n",
           "builtin_compute", guard="block"),
    attack("delegate_tensor_methods", "A1", "builds softplus from Tensor methods (exp, log1p)",
           "    z = x.float() * beta\n    return torch.where(z > threshold, x.float(), z.exp().log1p() / beta)"
           ".to(x.dtype)\n", "builtin_compute", guard="block"),
    attack("delegate_aten_ops", "A1", "calls torch.ops.aten.softplus directly",
           "    return torch.ops.aten.softplus(x, beta, threshold)\n", "builtin_compute", guard="block"),
    attack("delegate_in_thread", "A1", "runs the builtin op on a helper thread and joins it before returning",
           "    import threading\n    box = []\n"
           f"    t = threading.Thread(target=lambda: box.append({REAL}))\n    t.start()\n    t.join()\n"
           "    return box[0]\n", "builtin_compute", guard="block"),
    attack("delegate_numpy", "A4", "imports numpy (hidden from the worker) to compute on the host",
           "    import numpy as np\n    return torch.from_numpy(np.logaddexp(0, x.float().numpy()))\n",
           "compile_runtime_error", "host_library", guard="block"),
    attack("delegate_numpy_unhidden", "A4", "removes the hiding entry from sys.modules, then imports numpy",
           "    import sys\n    sys.modules.pop('numpy', None)\n    import numpy as np\n"
           "    return torch.from_numpy(np.logaddexp(0, x.float().numpy()))\n", "host_library", guard="block"),
    attack("delegate_compile", "A5", "hands the computation to torch.compile (Inductor)",
           f"    return torch.compile(lambda t: {REAL.replace('x.', 't.')})(x)\n",
           "host_library", "builtin_compute", guard="block"),
    attack("delegate_ctypes_libm", "A6", "loads libm through ctypes and computes element by element",
           "    import ctypes\n    libm = ctypes.CDLL('libm.so.6')\n    libm.log1p.restype = ctypes.c_double\n"
           "    return x\n", "host_library", guard="block"),
    attack("blind_profiler", "A3", "switches the profiler off, then delegates",
           f"    torch.autograd._disable_profiler()\n    return {REAL}\n",
           "guard_blinded", "builtin_compute", guard="block"),
    attack("profiler_phase_detection", "F4", "delegates only when no profiler is watching, zeros otherwise",
           f"    if torch.autograd._profiler_enabled():\n        return torch.zeros_like(x)\n    return {REAL}\n",
           "precision_mismatch", "builtin_compute", guard="block"),
    attack("patch_profiler", "A3", "replaces the profiler with a no-op at import time, then delegates",
           f"    return {REAL}\n", "api_tampered", "builtin_compute", guard="block",
           prelude="import contextlib\ntorch.autograd.profiler.record_function = "
                   "lambda *a, **k: contextlib.nullcontext()\n"),
    # containment (family G/H): refused in every guard mode
    attack("read_task_files", "G6", "reads the golden and the cases of its own task",
           "    open('@TASKS@/level1/softplus/golden.py').read()\n    return torch.zeros_like(x)\n",
           "forbidden_access"),
    attack("rewrite_results", "G4", "appends a passing verdict to the judge's results.jsonl",
           "    with open('@REPORTS@/results.jsonl', 'a') as fh:\n        fh.write('{\"forged\": true}\\n')\n"
           f"    return {REAL}\n", "forbidden_access"),
    attack("kill_judge", "G7", "kills its parent, the judge",
           "    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n    return torch.zeros_like(x)\n",
           "forbidden_access", "precision_mismatch"),  # in the sandbox it has no parent to find: zeros
    attack("network", "G6", "phones home for the answer",
           "    import socket\n    socket.create_connection(('10.255.255.1', 80), timeout=1)\n"
           "    return torch.zeros_like(x)\n", "forbidden_access"),
    attack("subprocess_helper", "G1", "starts a helper process to do the work",
           "    import subprocess, sys\n    subprocess.run([sys.executable, '-c', 'print(1)'])\n"
           f"    return {REAL}\n", "forbidden_access"),
    # timing (issue 16 item 5): answers computed during the warm-up for inputs not yet asked about
    attack("read_ahead", "F3", "on the warm-up (the correctness inputs again) reads the later input sets out of "
           "the shared region and answers them all; a timed call is then a lookup, zeros when it misses",
           "    fp = _fingerprint(x)\n"
           "    slot = (x.data_ptr(), x.numel() * x.element_size())\n"
           "    warm = STATE.get('warm')\n"
           "    if warm is not None and warm[0] < slot[0] < warm[1]:  # a later slot of the batch: a timed call\n"
           "        y = CACHE.get(fp)\n"
           "        return y.clone() if y is not None else torch.zeros_like(x)\n"
           "    STATE['warm'] = None\n"
           "    if fp in SEEN:  # the same inputs twice: the warm-up of a timing batch; read what follows\n"
           "        STATE['warm'] = _read_ahead(x, beta, threshold, slot)\n"
           "    SEEN.add(fp)\n"
           f"    return {REAL}\n",
           "timed_output_wrong", prelude=READ_AHEAD),
    attack("write_frame_channel", "G4", "writes garbage into the worker's reply channel (its inherited pipe)",
           "    import os\n    os.write(1, b'\\x00' * 64)\n    return torch.zeros_like(x)\n",
           "candidate_crashed", "precision_mismatch"),
]

HONEST = "import torch\n\n\ndef softplus(x, beta=1.0, threshold=20.0):\n    return " + REAL + ".contiguous()\n"
CACHE_PRELUDE = "CACHE = {}\nCALLS = []\n"
